// Softmax cross-entropy on bf16 logits with fp32 statistics (math in kernels/crossentropy.h).
// One block per row; each thread reads 8 consecutive logits per 16-byte load, so V (the padded
// row width) must be a multiple of 8. Padding columns (v >= V_valid) never contribute and get
// gradient 0.
//
// fused_classifier (one vocab shard holding the whole vocabulary): pass 1 reads the row once
// for an online max and sum of exponentials (per thread, then combined across the block in a
// fixed order) and the target logit; pass 2 reads it again (mostly from L2) and writes dlogits
// over it. No probability tensor is ever stored.
#include <string>

#include "kernels/crossentropy.h"
#include "kernels/cuda/common.cuh"

namespace taco::cuda {
namespace {

using detail::block_max;
using detail::block_sum;
using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;

constexpr int kRowThreads = 512;
constexpr int kFusedThreads = 1024;

__global__ void row_max_kernel(float* row_max, const nv_bf16* logits, int V, int V_valid) {
  __shared__ float shared[32];
  const nv_bf16* row = logits + size_t(blockIdx.x) * V;
  float m = -INFINITY;
  for (int c = threadIdx.x * 8; c < V_valid; c += blockDim.x * 8) {
    float x[8];
    load<8>(x, row + c);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (c + e < V_valid) m = fmaxf(m, x[e]);
  }
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__device__ __forceinline__ float target_logit_of(const nv_bf16* row, const int32_t* targets, int n,
                                                 int vocab_start, int V_valid) {
  const int t = targets[n] - vocab_start;
  return (t >= 0 && t < V_valid) ? __bfloat162float(row[t]) : 0.f;
}

__global__ void sumexp_target_kernel(float* sumexp, float* target_logit, const nv_bf16* logits,
                                     const float* row_max, const int32_t* targets, int V,
                                     int V_valid, int vocab_start) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  const nv_bf16* row = logits + size_t(n) * V;
  const float m = row_max[n];
  float s = 0.f;
  for (int c = threadIdx.x * 8; c < V_valid; c += blockDim.x * 8) {
    float x[8];
    load<8>(x, row + c);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (c + e < V_valid) s += __expf(x[e] - m);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    sumexp[n] = s;
    target_logit[n] = target_logit_of(row, targets, n, vocab_start, V_valid);
  }
}

__global__ void loss_kernel(float* loss, const float* row_max, const float* sumexp,
                            const float* target_logit, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < N) loss[n] = logf(sumexp[n]) + row_max[n] - target_logit[n];
}

// dlogits[n, v] = (exp(logit - m) / s - [v == t]) * dloss for v < V_valid, 0 on padding.
// In place is fine: each thread reads its 8 logits before writing them.
__device__ __forceinline__ void write_dlogits_row(nv_bf16* drow, const nv_bf16* row, float m,
                                                  float s, int t, float dloss, int V, int V_valid) {
  const float inv_s = 1.f / s;
  for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
    float x[8];
    load<8>(x, row + c);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int v = c + e;
      const float p = __expf(x[e] - m) * inv_s;
      x[e] = v < V_valid ? (p - (v == t ? 1.f : 0.f)) * dloss : 0.f;
    }
    store<8>(drow + c, x);
  }
}

__global__ void backward_kernel(nv_bf16* dlogits, const nv_bf16* logits, const float* row_max,
                                const float* sumexp, const int32_t* targets, float dloss, int V,
                                int V_valid, int vocab_start) {
  const int n = blockIdx.x;
  write_dlogits_row(dlogits + size_t(n) * V, logits + size_t(n) * V, row_max[n], sumexp[n],
                    targets[n] - vocab_start, dloss, V, V_valid);
}

// Running (max m, sum s of exp(x - m)) pairs. Commutative bit for bit, so a butterfly leaves
// every lane with the same pair.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

__global__ void fused_classifier_kernel(nv_bf16* logits, float* loss, const int32_t* targets,
                                        float dloss, int V, int V_valid, bool write_dlogits) {
  __shared__ float shared_m[32], shared_s[32];
  const int n = blockIdx.x;
  nv_bf16* row = logits + size_t(n) * V;
  // Read before the barriers below, so before any thread overwrites the row.
  const float target = threadIdx.x == 0 ? target_logit_of(row, targets, n, 0, V_valid) : 0.f;

  float m = -INFINITY, s = 0.f;
  for (int c = threadIdx.x * 8; c < V_valid; c += blockDim.x * 8) {
    float x[8];
    load<8>(x, row + c);
    float cm = -INFINITY;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (c + e < V_valid) cm = fmaxf(cm, x[e]);
    const float mx = fmaxf(m, cm);
    s *= __expf(m - mx);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (c + e < V_valid) s += __expf(x[e] - mx);
    m = mx;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) {
    shared_m[warp] = m;
    shared_s[warp] = s;
  }
  __syncthreads();
  m = lane < warps ? shared_m[lane] : -INFINITY;
  s = lane < warps ? shared_s[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  }
  if (threadIdx.x == 0) loss[n] = logf(s) + m - target;
  if (write_dlogits) write_dlogits_row(row, row, m, s, targets[n], dloss, V, V_valid);
}

// A vocab shard may hold only padding (V_valid = 0): its row_max is -inf and its sumexp 0, the
// identities of the all-reduces that follow. The fused classifier needs real columns.
void check_logits(const char* op, const void* logits, int V, int V_valid, int min_valid = 0) {
  TACO_CHECK(V % 8 == 0 && V_valid >= min_valid && V_valid <= V,
             std::string(op) + ": V=" + std::to_string(V) + " must be a multiple of 8 and hold " +
                 "V_valid=" + std::to_string(V_valid) + " real columns (pad the vocabulary)");
  TACO_CHECK(detail::aligned16(logits), std::string(op) + ": logits must be 16-byte aligned");
}

}  // namespace

void crossentropy_row_max(float* row_max, const bf16* logits, int N, int V, int V_valid,
                          Stream stream) {
  check_logits("crossentropy_row_max", logits, V, V_valid);
  if (N == 0) return;
  row_max_kernel<<<N, kRowThreads, 0, stream>>>(row_max, nv(logits), V, V_valid);
  TACO_LAUNCH_OK();
}

void crossentropy_sumexp_target(float* sumexp, float* target_logit, const bf16* logits,
                                const float* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start, Stream stream) {
  check_logits("crossentropy_sumexp_target", logits, V, V_valid);
  if (N == 0) return;
  sumexp_target_kernel<<<N, kRowThreads, 0, stream>>>(sumexp, target_logit, nv(logits), row_max,
                                                      targets, V, V_valid, vocab_start);
  TACO_LAUNCH_OK();
}

void crossentropy_loss(float* loss, const float* row_max, const float* sumexp,
                       const float* target_logit, int N, Stream stream) {
  if (N == 0) return;
  loss_kernel<<<unsigned(detail::ceil_div(N, 256)), 256, 0, stream>>>(loss, row_max, sumexp,
                                                                      target_logit, N);
  TACO_LAUNCH_OK();
}

void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* row_max,
                           const float* sumexp, const int32_t* targets, float dloss, int N, int V,
                           int V_valid, int vocab_start, Stream stream) {
  check_logits("crossentropy_backward", logits, V, V_valid);
  TACO_CHECK(detail::aligned16(dlogits), "crossentropy_backward: dlogits must be 16-byte aligned");
  if (N == 0) return;
  backward_kernel<<<N, kRowThreads, 0, stream>>>(nv(dlogits), nv(logits), row_max, sumexp, targets,
                                                 dloss, V, V_valid, vocab_start);
  TACO_LAUNCH_OK();
}

void fused_classifier(bf16* logits, float* loss, const int32_t* targets, float dloss, int N, int V,
                      int V_valid, bool write_dlogits, Stream stream) {
  check_logits("fused_classifier", logits, V, V_valid, 1);
  if (N == 0) return;
  fused_classifier_kernel<<<N, kFusedThreads, 0, stream>>>(nv(logits), loss, targets, dloss, V,
                                                           V_valid, write_dlogits);
  TACO_LAUNCH_OK();
}

}  // namespace taco::cuda
