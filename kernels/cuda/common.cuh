// Device helpers shared by the bf16 kernels of kernels/cuda: pointer casts, 16-byte vector
// loads and stores widened to fp32, warp and block reductions in a fixed order (so results are
// bit-identical from run to run), and a launcher for elementwise maps.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/context.cuh"
#include "kernels/dtype.h"

namespace taco::cuda::detail {

using nv_bf16 = __nv_bfloat16;

// taco::bf16 and __nv_bfloat16 are both two bytes of bf16 bits.
inline nv_bf16* nv(bf16* p) { return reinterpret_cast<nv_bf16*>(p); }
inline const nv_bf16* nv(const bf16* p) { return reinterpret_cast<const nv_bf16*>(p); }

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// W consecutive elements widened to fp32: W = 8 uses one 16-byte access for bf16 (two for fp32)
// and needs 16-byte aligned addresses; W = 1 is the scalar path for tails and odd layouts.
template <int W>
__device__ __forceinline__ void load(float (&f)[W], const nv_bf16* p) {
  if constexpr (W == 8) {
    int4 raw = *reinterpret_cast<const int4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 t = __bfloat1622float2(h[k]);
      f[2 * k] = t.x;
      f[2 * k + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = __bfloat162float(p[k]);
  }
}

template <int W>
__device__ __forceinline__ void store(nv_bf16* p, const float (&f)[W]) {
  if constexpr (W == 8) {
    int4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<int4*>(p) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) p[k] = __float2bfloat16_rn(f[k]);
  }
}

template <int W>
__device__ __forceinline__ void load(float (&f)[W], const float* p) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 4) {
      float4 t = *reinterpret_cast<const float4*>(p + k);
      f[k] = t.x;
      f[k + 1] = t.y;
      f[k + 2] = t.z;
      f[k + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] = p[k];
  }
}

template <int W>
__device__ __forceinline__ void store(float* p, const float (&f)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 4)
      *reinterpret_cast<float4*>(p + k) = make_float4(f[k], f[k + 1], f[k + 2], f[k + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) p[k] = f[k];
  }
}

// The value a bf16 store of x would hold, back in fp32 (round to nearest even).
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// Butterfly reductions: every lane ends with the same bits, since each step adds the same two
// operands on both partner lanes (fp32 addition is commutative).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// `shared` holds 32 values. Fixed order: warps, then the per-warp results by warp 0.
template <typename T>
__device__ __forceinline__ T block_sum(T x, T* shared) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  x = warp_sum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : T(0);
  return warp_sum(x);
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  x = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(x);
}

// Elementwise maps. An Op is a struct of device pointers with
//   template <int W> __device__ void apply(size_t i) const;   // elements [i, i + W)
// The kernel runs apply<8> over whole 16-byte groups when every pointer is 16-byte aligned
// (`vectorized`), and apply<1> over the rest.
template <class Op>
__global__ void elementwise_kernel(Op op, size_t n, bool vectorized) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t start = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t groups = vectorized ? n / 8 : 0;
  for (size_t g = start; g < groups; g += stride) op.template apply<8>(g * 8);
  for (size_t i = groups * 8 + start; i < n; i += stride) op.template apply<1>(i);
}

template <class Op>
void launch_elementwise(const Op& op, size_t n, bool vectorized, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const size_t work = vectorized ? ceil_div(n, 8) : n;
  const size_t blocks_max = size_t(sm_count()) * 16;  // grid-stride beyond a few waves
  const size_t blocks =
      ceil_div(work, kThreads) < blocks_max ? ceil_div(work, kThreads) : blocks_max;
  elementwise_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(op, n, vectorized);
  TACO_LAUNCH_OK();
}

}  // namespace taco::cuda::detail
