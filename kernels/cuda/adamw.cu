// Fused AdamW over fp32 master weights and moments with bf16 gradients and parameters
// (kernels/adamw.h), and bf16 <-> fp32 conversions. Elementwise, 16-byte accesses where every
// pointer allows.
//
// Stochastic rounding of the new parameters: add 16 random bits (a hash of seed, step and
// element index, so runs repeat) below bf16's last bit, then truncate: the result rounds up with
// probability equal to the discarded fraction, so it is unbiased on average.
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/cuda/common.cuh"

namespace taco::cuda {
namespace {

using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;

__device__ __forceinline__ uint32_t random_bits(uint64_t seed, uint32_t step, uint64_t index) {
  // splitmix64 finalizer over the three inputs.
  uint64_t z = seed ^ (uint64_t(step) * 0x9E3779B97F4A7C15ull) ^ (index * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t(z ^ (z >> 31));
}

// x rounded stochastically to a bf16 value, returned as fp32 (exact, so a later RNE store keeps
// it).
__device__ __forceinline__ float round_stochastic(float x, uint32_t bits) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // Inf and NaN stay as they are
  return __uint_as_float(((u + (bits & 0xffffu)) >> 16) << 16);
}

// The update's operands; apply() updates W elements at params/grads index i and state
// (master, m, v) index j with weight decay wd.
struct AdamW {
  nv_bf16* params;
  float* master;  // nullptr: the bf16 parameters are the weights
  const nv_bf16* grads;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, grad_scale;
  float inv_bias_correction1, inv_bias_correction2;  // 1 / (1 - beta^t)
  uint64_t rounding_seed;
  uint32_t step;
  // Set: lr, the bias corrections, step and grad_scale are read on the device (see
  // kernels/adamw.h).
  const AdamWStepScalars* device_step;
  const double* grad_sumsq;
  const double* loss_sum;  // may be null
  double grad_clip;

  // The scalars of this launch: its own, or those in device memory. False: skip the update.
  __device__ bool resolve() {
    if (!device_step) return true;
    const AdamWStepScalars s = *device_step;
    lr = s.lr;
    inv_bias_correction1 = s.inv_bias_correction1;
    inv_bias_correction2 = s.inv_bias_correction2;
    step = s.step;
    const double sumsq = *grad_sumsq;
    if (!isfinite(sumsq) || (loss_sum && !isfinite(*loss_sum))) return false;
    const double norm = sqrt(sumsq);  // IEEE: as the host's std::sqrt
    grad_scale = (grad_clip <= 0.0 || !(norm > grad_clip)) ? 1.f : float(grad_clip / norm);
    return true;
  }

  template <int W>
  __device__ void apply(size_t i, size_t j, float wd) const {
    float g[W], mm[W], vv[W], p[W];
    load<W>(g, grads + i);
    load<W>(mm, m + j);
    load<W>(vv, v + j);
    if (master) {
      load<W>(p, master + j);
    } else {
      load<W>(p, params + i);
    }
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float ge = g[e] * grad_scale;
      mm[e] = beta1 * mm[e] + (1.f - beta1) * ge;
      vv[e] = beta2 * vv[e] + (1.f - beta2) * ge * ge;
      // One division per element: the bias corrections are reciprocals taken once per launch.
      p[e] -= lr * (mm[e] * inv_bias_correction1 / (sqrtf(vv[e] * inv_bias_correction2) + eps) +
                    wd * p[e]);
    }
    store<W>(m + j, mm);
    store<W>(v + j, vv);
    if (master) store<W>(master + j, p);
    if (rounding_seed != kRoundToNearest) {
#pragma unroll
      for (int e = 0; e < W; ++e)
        p[e] = round_stochastic(p[e], random_bits(rounding_seed, step, i + e));
    }
    store<W>(params + i, p);
  }
};

// Up to kRangesPerLaunch ranges per launch, passed by value (well under the 4 KB parameter
// limit). Range r owns blocks [first_block[r], first_block[r + 1]), each a chunk of kChunk
// elements (the last one shorter).
constexpr int kRangesPerLaunch = 48;
constexpr int kThreads = 256;
constexpr size_t kChunk = size_t(kThreads) * 8 * 4;  // four 8-wide steps per thread

struct RangeTable {
  int count;
  unsigned first_block[kRangesPerLaunch + 1];
  unsigned long long offset[kRangesPerLaunch], state_offset[kRangesPerLaunch];
  unsigned long long numel[kRangesPerLaunch];
  float weight_decay[kRangesPerLaunch];
  bool vectorized[kRangesPerLaunch];  // 16-byte aligned at both offsets
};

__global__ void __launch_bounds__(kThreads) adamw_ranges_kernel(AdamW op, RangeTable t) {
  if (!op.resolve()) return;
  // The range that owns this block: the last r with first_block[r] <= blockIdx.x.
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= blockIdx.x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const size_t begin = size_t(blockIdx.x - t.first_block[lo]) * kChunk;
  const size_t end = min(begin + kChunk, size_t(t.numel[lo]));
  const size_t i0 = t.offset[lo], j0 = t.state_offset[lo];
  const float wd = t.weight_decay[lo];
  size_t scalar_from = begin;
  if (t.vectorized[lo]) {
    scalar_from = begin + (end - begin) / 8 * 8;
    for (size_t k = begin + size_t(threadIdx.x) * 8; k < scalar_from; k += size_t(kThreads) * 8)
      op.apply<8>(i0 + k, j0 + k, wd);
  }
  for (size_t k = scalar_from + threadIdx.x; k < end; k += kThreads)
    op.apply<1>(i0 + k, j0 + k, wd);
}

struct ToFloat {
  float* out;
  const nv_bf16* in;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W];
    load<W>(x, in + i);
    store<W>(out + i, x);
  }
};

struct ToBf16 {
  nv_bf16* out;
  const float* in;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W];
    load<W>(x, in + i);
    store<W>(out + i, x);
  }
};

}  // namespace

namespace {

void launch_ranges(const AdamW& op, const std::vector<AdamWRange>& ranges, Stream stream) {
  const bool bases_aligned = detail::aligned16(op.params) && detail::aligned16(op.master) &&
                             detail::aligned16(op.grads) && detail::aligned16(op.m) &&
                             detail::aligned16(op.v);
  RangeTable t{};
  size_t blocks = 0;
  auto launch = [&] {
    if (t.count == 0) return;
    t.first_block[t.count] = unsigned(blocks);
    adamw_ranges_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(op, t);
    TACO_LAUNCH_OK();
    t = RangeTable{};
    blocks = 0;
  };
  for (const AdamWRange& r : ranges) {
    if (r.numel == 0) continue;
    const size_t chunks = detail::ceil_div(r.numel, kChunk);
    TACO_CHECK(chunks < (size_t(1) << 31), "adamw_update: range too large for one launch");
    if (t.count == kRangesPerLaunch || blocks + chunks >= (size_t(1) << 31)) launch();
    const int k = t.count++;
    t.first_block[k] = unsigned(blocks);
    t.offset[k] = r.offset;
    t.state_offset[k] = r.state_offset;
    t.numel[k] = r.numel;
    t.weight_decay[k] = r.weight_decay;
    // 8-wide steps need every access 16-byte aligned: offsets in multiples of 8 elements.
    t.vectorized[k] = bases_aligned && r.offset % 8 == 0 && r.state_offset % 8 == 0;
    blocks += chunks;
  }
  launch();
}

}  // namespace

namespace {

// The operands and the hyperparameters every launch shares; the per-step values are set after.
AdamW operands(bf16* params, float* master, const bf16* grads, float* m, float* v,
               const AdamWParams& hp, uint64_t rounding_seed) {
  AdamW op{};
  op.params = nv(params);
  op.master = master;
  op.grads = nv(grads);
  op.m = m;
  op.v = v;
  op.beta1 = hp.beta1;
  op.beta2 = hp.beta2;
  op.eps = hp.eps;
  op.rounding_seed = rounding_seed;
  return op;
}

}  // namespace

void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v,
                  const std::vector<AdamWRange>& ranges, const AdamWParams& hp,
                  uint64_t rounding_seed, Stream stream) {
  TACO_CHECK(hp.step >= 1, "adamw_update: step is 1-based");
  const AdamWStepScalars s = adamw_step_scalars(hp);
  AdamW op = operands(params, master, grads, m, v, hp, rounding_seed);
  op.lr = s.lr;
  op.grad_scale = hp.grad_scale;
  op.inv_bias_correction1 = s.inv_bias_correction1;
  op.inv_bias_correction2 = s.inv_bias_correction2;
  op.step = s.step;
  launch_ranges(op, ranges, stream);
}

void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v,
                  const std::vector<AdamWRange>& ranges, const AdamWParams& hp,
                  const AdamWStepScalars* step, const double* grad_sumsq, const double* loss_sum,
                  double grad_clip, uint64_t rounding_seed, Stream stream) {
  TACO_CHECK(step && grad_sumsq, "adamw_update: the device scalars are missing");
  AdamW op = operands(params, master, grads, m, v, hp, rounding_seed);
  op.device_step = step;
  op.grad_sumsq = grad_sumsq;
  op.loss_sum = loss_sum;
  op.grad_clip = grad_clip;
  launch_ranges(op, ranges, stream);
}

void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp, uint64_t rounding_seed, Stream stream) {
  adamw_update(params, master, grads, m, v, {AdamWRange{0, 0, n, hp.weight_decay}}, hp,
               rounding_seed, stream);
}

void convert_bf16_to_f32(float* out, const bf16* in, size_t n, Stream stream) {
  const bool vec = detail::aligned16(out) && detail::aligned16(in);
  detail::launch_elementwise(ToFloat{out, nv(in)}, n, vec, stream);
}

void convert_f32_to_bf16(bf16* out, const float* in, size_t n, Stream stream) {
  const bool vec = detail::aligned16(out) && detail::aligned16(in);
  detail::launch_elementwise(ToBf16{nv(out), in}, n, vec, stream);
}

}  // namespace taco::cuda
