// LayerNorm on bf16 rows, fp32 math (math in kernels/layernorm.h).
//
// Forward: one warp per row; lane l owns channels [8l + 256k, 8l + 256k + 8) for k = 0, 1, ...,
// read as 16-byte vectors. Three passes over the row (mean, variance, output); the second and
// third hit L1. The fused variant first writes residual_out = a + b (rounded to bf16) and
// normalizes that rounded row, so it equals residual_forward followed by layernorm_forward.
//
// Backward: one warp per row as well. Each warp keeps its own fp32 dweight/dbias partial sums for
// its rows in shared memory ([warps][2][C], no atomics; a third [C] for the column sums of dinp
// when asked); the block adds its warps in order into one partial per block, and
// column_sums_add adds the blocks in order. Deterministic.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace taco::cuda {
namespace {

using detail::ceil_div;
using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;
using detail::warp_sum;

constexpr int kForwardWarps = 8;
constexpr int kBackwardMaxBlocks = 512;  // partial sums per column: fixed, so results are too

template <bool kResidual>
__global__ void layernorm_forward_kernel(nv_bf16* out, float* mean, float* rstd,
                                         nv_bf16* residual_out, const nv_bf16* a, const nv_bf16* b,
                                         const nv_bf16* weight, const nv_bf16* bias, int N, int C) {
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= N) return;
  const size_t base = size_t(row) * C;
  // The row being normalized; with kResidual this lane reads back only what it wrote itself.
  const nv_bf16* x = kResidual ? residual_out + base : a + base;

  float sum = 0.f;
  for (int c = lane * 8; c < C; c += 256) {
    float v[8];
    if constexpr (kResidual) {
      float w[8];
      load<8>(v, a + base + c);
      load<8>(w, b + base + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = detail::round_bf16(v[e] + w[e]);
      store<8>(residual_out + base + c, v);
    } else {
      load<8>(v, x + c);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += v[e];
  }
  const float m = warp_sum(sum) / C;

  float sq = 0.f;
  for (int c = lane * 8; c < C; c += 256) {
    float v[8];
    load<8>(v, x + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq += (v[e] - m) * (v[e] - m);
  }
  const float s = rsqrtf(warp_sum(sq) / C + cpu::kLayerNormEps);

  for (int c = lane * 8; c < C; c += 256) {
    float v[8], w[8], bb[8];
    load<8>(v, x + c);
    load<8>(w, weight + c);
    load<8>(bb, bias + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = (v[e] - m) * s * w[e] + bb[e];
    store<8>(out + base + c, v);
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// partials: [kSums][gridDim.x][C] (dbias, dweight and, with kColumnSums, the column sums of
// the updated dinp), one row per block.
template <bool kColumnSums>
__global__ void layernorm_backward_kernel(nv_bf16* dinp, float* partials, const nv_bf16* dout,
                                          const nv_bf16* inp, const nv_bf16* weight,
                                          const float* mean, const float* rstd, int N, int C) {
  constexpr int kSums = kColumnSums ? 3 : 2;
  extern __shared__ float acc[];  // [warps][kSums][C]
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < warps * kSums * C; i += blockDim.x) acc[i] = 0.f;
  __syncthreads();
  float* acc_dbias = acc + size_t(warp) * kSums * C;
  float* acc_dweight = acc_dbias + C;
  float* acc_dinp = acc_dweight + C;  // used with kColumnSums only

  for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
    const size_t base = size_t(row) * C;
    const float m = mean[row], s = rstd[row];
    // g = weight * dout; dinp += (g - mean(g) - xhat * mean(g * xhat)) * rstd
    float sum_g = 0.f, sum_gx = 0.f;
    for (int c = lane * 8; c < C; c += 256) {
      float d[8], x[8], w[8];
      load<8>(d, dout + base + c);
      load<8>(x, inp + base + c);
      load<8>(w, weight + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float g = w[e] * d[e];
        const float xhat = (x[e] - m) * s;
        sum_g += g;
        sum_gx += g * xhat;
      }
    }
    const float mean_g = warp_sum(sum_g) / C;
    const float mean_gx = warp_sum(sum_gx) / C;

    for (int c = lane * 8; c < C; c += 256) {
      float d[8], x[8], w[8], di[8], db[8], dw[8];
      load<8>(d, dout + base + c);
      load<8>(x, inp + base + c);
      load<8>(w, weight + c);
      load<8>(di, dinp + base + c);
      load<8>(db, acc_dbias + c);
      load<8>(dw, acc_dweight + c);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xhat = (x[e] - m) * s;
        di[e] += (w[e] * d[e] - mean_g - xhat * mean_gx) * s;
        db[e] += d[e];
        dw[e] += d[e] * xhat;
      }
      store<8>(dinp + base + c, di);
      store<8>(acc_dbias + c, db);
      store<8>(acc_dweight + c, dw);
      if constexpr (kColumnSums) {
        // The sums take dinp as stored (rounded to bf16), as a later bias-gradient kernel
        // reading it would.
        float sum[8];
        load<8>(sum, acc_dinp + c);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum[e] += detail::round_bf16(di[e]);
        store<8>(acc_dinp + c, sum);
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sums[kSums] = {};
    for (int w = 0; w < warps; ++w) {
#pragma unroll
      for (int k = 0; k < kSums; ++k) sums[k] += acc[(size_t(w) * kSums + k) * C + c];
    }
#pragma unroll
    for (int k = 0; k < kSums; ++k)
      partials[(size_t(k) * gridDim.x + blockIdx.x) * C + c] = sums[k];
  }
}

void check_rows(const char* op, int C, std::initializer_list<const void*> pointers) {
  TACO_CHECK(C % 8 == 0 && C > 0, std::string(op) + ": C=" + std::to_string(C) +
                                      " must be a positive multiple of 8 (16-byte row vectors)");
  for (const void* p : pointers)
    TACO_CHECK(p && detail::aligned16(p),
               std::string(op) + ": bf16 tensors must be non-null and 16-byte aligned");
}

}  // namespace

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, Stream stream) {
  check_rows("layernorm_forward", C, {out, inp, weight, bias});
  if (N == 0) return;
  layernorm_forward_kernel<false>
      <<<unsigned(ceil_div(N, kForwardWarps)), kForwardWarps * 32, 0, stream>>>(
          nv(out), mean, rstd, nullptr, nv(inp), nullptr, nv(weight), nv(bias), N, C);
  TACO_LAUNCH_OK();
}

void fused_residual_layernorm_forward(bf16* residual_out, bf16* out, float* mean, float* rstd,
                                      const bf16* a, const bf16* b, const bf16* weight,
                                      const bf16* bias, int N, int C, Stream stream) {
  check_rows("fused_residual_layernorm_forward", C, {residual_out, out, a, b, weight, bias});
  if (N == 0) return;
  layernorm_forward_kernel<true>
      <<<unsigned(ceil_div(N, kForwardWarps)), kForwardWarps * 32, 0, stream>>>(
          nv(out), mean, rstd, nv(residual_out), nv(a), nv(b), nv(weight), nv(bias), N, C);
  TACO_LAUNCH_OK();
}

void layernorm_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        Stream stream, bf16* dinp_column_sums) {
  check_rows("layernorm_backward", C, {dinp, dweight, dbias, dout, inp, weight});
  TACO_CHECK(!dinp_column_sums || detail::aligned16(dinp_column_sums),
             "layernorm_backward: dinp_column_sums must be 16-byte aligned");
  if (N == 0) return;
  const bool column_sums = dinp_column_sums != nullptr;
  const int sums = column_sums ? 3 : 2;
  // Per-warp accumulators take 4 sums C bytes each: up to 8 warps within ~96 KiB of shared
  // memory, counted for three sums either way, so that both variants split the rows alike and
  // give the same dweight and dbias bits.
  int warps = int(98304 / (size_t(4) * 3 * C));
  warps = warps < 1 ? 1 : (warps > 8 ? 8 : warps);
  const size_t smem = size_t(warps) * 4 * sums * C;
  TACO_CHECK(smem <= size_t(detail::max_shared_memory_optin()),
             "layernorm_backward: C=" + std::to_string(C) + " needs " + std::to_string(smem) +
                 " bytes of shared memory per block, more than this device offers");
  auto kernel = column_sums ? layernorm_backward_kernel<true> : layernorm_backward_kernel<false>;
  if (smem > 48 * 1024) {
    TACO_CUDA_OK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  const int blocks =
      int(ceil_div(N, warps)) < kBackwardMaxBlocks ? int(ceil_div(N, warps)) : kBackwardMaxBlocks;
  auto* partials =
      static_cast<float*>(detail::scratch(stream, size_t(sums) * blocks * C * sizeof(float)));
  kernel<<<blocks, warps * 32, smem, stream>>>(nv(dinp), partials, nv(dout), nv(inp), nv(weight),
                                               mean, rstd, N, C);
  TACO_LAUNCH_OK();
  detail::column_sums_add(nv(dbias), nv(dweight), partials, blocks, C, stream);
  if (column_sums) {
    detail::column_sums_add(nv(dinp_column_sums), nullptr, partials + size_t(2) * blocks * C,
                            blocks, C, stream);
  }
}

}  // namespace taco::cuda
