// LayerNorm on bf16 rows, fp32 math (math in kernels/layernorm.h).
//
// Forward: one warp per row; lane l owns channels [8l + 256k, 8l + 256k + 8) for k = 0, 1, ...,
// read as 16-byte vectors. Three passes over the row (mean, variance, output); the second and
// third hit L1. The fused variant first writes residual_out = a + b (rounded to bf16) and
// normalizes that rounded row, so it equals residual_forward followed by layernorm_forward.
//
// Backward: one warp per row as well, in one wave of blocks (SMs x resident blocks), each warp
// striding over rows. Where C is a multiple of 256 up to 1024 (GPT-2 124M and 350M), a lane
// keeps its rows' fp32 dweight/dbias partial sums (and the column sums of dinp, when asked) in
// registers and holds the row it works on there between the two passes; otherwise the
// partials live in shared memory ([warps][3][C]) and the second pass reads the row again.
// No atomics: the block adds its warps in order into one partial per block, and
// column_sums_add adds the blocks in order. Deterministic on a given device (the grid follows
// its SM count).
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
constexpr int kBackwardRegWarps = 4;  // warps per block of the register variant

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

// The register variant: C = 256 K exactly; lane l owns channels [8l + 256k, 8l + 256k + 8).
// Partials per warp in registers, added across the block's warps in order through one [kSums][C]
// buffer in shared memory at the end.
template <int K, bool kColumnSums>
__global__ void __launch_bounds__(kBackwardRegWarps * 32)
    layernorm_backward_regs_kernel(nv_bf16* dinp, float* partials, const nv_bf16* dout,
                                   const nv_bf16* inp, const nv_bf16* weight, const float* mean,
                                   const float* rstd, int N) {
  constexpr int C = K * 256;
  constexpr int kSums = kColumnSums ? 3 : 2;
  __shared__ float block_acc[kSums][C];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kSums][K][8] = {};                     // dbias, dweight, column sums of dinp
  const nv_bf16* lane_weight = weight + lane * 8;  // read in both passes (L1 hits after the first)

  for (int row = blockIdx.x * kBackwardRegWarps + warp; row < N;
       row += gridDim.x * kBackwardRegWarps) {
    const size_t base = size_t(row) * C + lane * 8;
    const float m = mean[row], s = rstd[row];
    float d[K][8], xhat[K][8], di[K][8];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      load<8>(d[k], dout + base + k * 256);
      load<8>(xhat[k], inp + base + k * 256);
    }
#pragma unroll
    for (int k = 0; k < K; ++k) load<8>(di[k], dinp + base + k * 256);
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float w[8];
      load<8>(w, lane_weight + k * 256);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        xhat[k][e] = (xhat[k][e] - m) * s;
        const float g = w[e] * d[k][e];
        sum_g += g;
        sum_gx += g * xhat[k][e];
      }
    }
    const float mean_g = warp_sum(sum_g) / C;
    const float mean_gx = warp_sum(sum_gx) / C;

#pragma unroll
    for (int k = 0; k < K; ++k) {
      float w[8];
      load<8>(w, lane_weight + k * 256);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        di[k][e] += (w[e] * d[k][e] - mean_g - xhat[k][e] * mean_gx) * s;
        acc[0][k][e] += d[k][e];
        acc[1][k][e] += d[k][e] * xhat[k][e];
      }
      store<8>(dinp + base + k * 256, di[k]);
      if constexpr (kColumnSums) {
        // The sums take dinp as stored (rounded to bf16), as a later bias-gradient kernel
        // reading it would.
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[2][k][e] += detail::round_bf16(di[k][e]);
      }
    }
  }
  // The warps add into the block's buffer one after another: the same order every run.
  for (int w = 0; w < kBackwardRegWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int j = 0; j < kSums; ++j) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          float* dst = &block_acc[j][lane * 8 + k * 256];
#pragma unroll
          for (int e = 0; e < 8; ++e) dst[e] = w == 0 ? acc[j][k][e] : dst[e] + acc[j][k][e];
        }
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < kSums * C; i += blockDim.x) {
    const int j = i / C, c = i % C;
    partials[(size_t(j) * gridDim.x + blockIdx.x) * C + c] = block_acc[j][c];
  }
}

// Blocks for one wave of `kernel` (occupancy of the variant with the column sums, so that both
// variants split the rows alike and give the same dweight and dbias bits), no more than the rows
// need.
int one_wave(const void* kernel, int threads, size_t smem, int N) {
  const size_t wave = size_t(detail::wave_blocks(kernel, threads, smem));
  const size_t needed = ceil_div(size_t(N), size_t(threads / 32));
  return int(wave < needed ? wave : needed);
}

template <int K>
int layernorm_backward_regs(nv_bf16* dinp, float** partials, const nv_bf16* dout,
                            const nv_bf16* inp, const nv_bf16* weight, const float* mean,
                            const float* rstd, int N, bool column_sums, Stream stream) {
  constexpr int threads = kBackwardRegWarps * 32;
  const int blocks = one_wave(
      reinterpret_cast<const void*>(layernorm_backward_regs_kernel<K, true>), threads, 0, N);
  *partials = static_cast<float*>(
      detail::scratch(stream, size_t(column_sums ? 3 : 2) * blocks * K * 256 * sizeof(float)));
  if (column_sums) {
    layernorm_backward_regs_kernel<K, true>
        <<<blocks, threads, 0, stream>>>(dinp, *partials, dout, inp, weight, mean, rstd, N);
  } else {
    layernorm_backward_regs_kernel<K, false>
        <<<blocks, threads, 0, stream>>>(dinp, *partials, dout, inp, weight, mean, rstd, N);
  }
  TACO_LAUNCH_OK();
  return blocks;
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
  float* partials = nullptr;
  int blocks = 0;
  // The register variant for C = 256 K, K <= 4; the shared-memory one otherwise.
  using RegsLaunch = int (*)(nv_bf16*, float**, const nv_bf16*, const nv_bf16*, const nv_bf16*,
                             const float*, const float*, int, bool, Stream);
  constexpr RegsLaunch kRegs[] = {nullptr, layernorm_backward_regs<1>, layernorm_backward_regs<2>,
                                  layernorm_backward_regs<3>, layernorm_backward_regs<4>};
  const int K = C % 256 == 0 && C / 256 <= 4 ? C / 256 : 0;
  if (K > 0) {
    blocks = kRegs[K](nv(dinp), &partials, nv(dout), nv(inp), nv(weight), mean, rstd, N,
                      column_sums, stream);
  } else {
    // Per-warp accumulators take 4 sums C bytes each: up to 8 warps within ~96 KiB of shared
    // memory, counted for three sums either way (see one_wave).
    int warps = int(98304 / (size_t(4) * 3 * C));
    warps = warps < 1 ? 1 : (warps > 8 ? 8 : warps);
    const size_t smem = size_t(warps) * 4 * sums * C, smem3 = size_t(warps) * 4 * 3 * C;
    TACO_CHECK(smem3 <= size_t(detail::max_shared_memory_optin()),
               "layernorm_backward: C=" + std::to_string(C) + " needs " + std::to_string(smem3) +
                   " bytes of shared memory per block, more than this device offers");
    for (auto* k : {layernorm_backward_kernel<true>, layernorm_backward_kernel<false>}) {
      if (smem3 > 48 * 1024) {
        TACO_CUDA_OK(
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem3)));
      }
    }
    blocks = one_wave(reinterpret_cast<const void*>(layernorm_backward_kernel<true>), warps * 32,
                      smem3, N);
    partials =
        static_cast<float*>(detail::scratch(stream, size_t(sums) * blocks * C * sizeof(float)));
    auto kernel = column_sums ? layernorm_backward_kernel<true> : layernorm_backward_kernel<false>;
    kernel<<<blocks, warps * 32, smem, stream>>>(nv(dinp), partials, nv(dout), nv(inp), nv(weight),
                                                 mean, rstd, N, C);
    TACO_LAUNCH_OK();
  }
  detail::column_sums_add(nv(dbias), nv(dweight), partials, blocks, C, stream,
                          column_sums ? nv(dinp_column_sums) : nullptr);
}

}  // namespace taco::cuda
