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

struct AdamW {
  nv_bf16* params;
  float* master;  // nullptr: the bf16 parameters are the weights
  const nv_bf16* grads;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float inv_bias_correction1, inv_bias_correction2;  // 1 / (1 - beta^t)
  uint64_t rounding_seed;
  uint32_t step;

  template <int W>
  __device__ void apply(size_t i) const {
    float g[W], mm[W], vv[W], p[W];
    load<W>(g, grads + i);
    load<W>(mm, m + i);
    load<W>(vv, v + i);
    if (master) {
      load<W>(p, master + i);
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
                    weight_decay * p[e]);
    }
    store<W>(m + i, mm);
    store<W>(v + i, vv);
    if (master) store<W>(master + i, p);
    if (rounding_seed != kRoundToNearest) {
#pragma unroll
      for (int e = 0; e < W; ++e)
        p[e] = round_stochastic(p[e], random_bits(rounding_seed, step, i + e));
    }
    store<W>(params + i, p);
  }
};

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

void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp, uint64_t rounding_seed, Stream stream) {
  TACO_CHECK(hp.step >= 1, "adamw_update: step is 1-based");
  AdamW op{nv(params),
           master,
           nv(grads),
           m,
           v,
           hp.lr,
           hp.beta1,
           hp.beta2,
           hp.eps,
           hp.weight_decay,
           hp.grad_scale,
           float(1.0 / (1.0 - std::pow(double(hp.beta1), double(hp.step)))),
           float(1.0 / (1.0 - std::pow(double(hp.beta2), double(hp.step)))),
           rounding_seed,
           uint32_t(hp.step)};
  const bool vec = detail::aligned16(params) && detail::aligned16(master) &&
                   detail::aligned16(grads) && detail::aligned16(m) && detail::aligned16(v);
  detail::launch_elementwise(op, n, vec, stream);
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
