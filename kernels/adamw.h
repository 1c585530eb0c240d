// AdamW (decoupled weight decay, PyTorch semantics), one contiguous parameter range:
//   g = grad * grad_scale                       (grad_scale folds in clipping)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p)
// t is the 1-based step. Biases and LayerNorm parameters get weight_decay = 0 from the caller.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace taco::cpu {

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float grad_scale;
  int step;
};

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp);

}  // namespace taco::cpu

// CUDA: fused AdamW for the mixed-precision layout (kernels/cuda/adamw.cu): fp32 master weights
// and moments m, v; bf16 gradients (times hp.grad_scale) and bf16 parameters, which are WRITTEN
// from the updated master. Same math as the CPU update above. Call once per contiguous range
// with that range's weight_decay. master may be nullptr: the bf16 parameters are then updated
// directly. rounding_seed == kRoundToNearest rounds the parameters to nearest even; any other
// value rounds stochastically (a hash of seed, hp.step and element index, so runs repeat).
namespace taco::cuda {

using AdamWParams = cpu::AdamWParams;
constexpr uint64_t kRoundToNearest = 0;

void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp, uint64_t rounding_seed, Stream stream);

// A whole parameter buffer in one or a few launches (a GPT has eight weight-decay runs per
// layer; one launch each would cost more in launches and tails than the update itself). Range k
// updates params and grads [offset, offset + numel) and master, m and v [state_offset,
// state_offset + numel) with its own weight_decay; hp.weight_decay is not used. Ranges must not
// overlap. Same math and rounding as the one-range call; the stochastic-rounding hash takes the
// element's index into params.
struct AdamWRange {
  size_t offset = 0, state_offset = 0, numel = 0;
  float weight_decay = 0.f;
};
void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v,
                  const std::vector<AdamWRange>& ranges, const AdamWParams& hp,
                  uint64_t rounding_seed, Stream stream);

// The same update with its per-step scalars read on the device, for a launch a CUDA graph
// replays every step. The host writes `step` (lr, the step and its bias corrections, from
// adamw_step_scalars) before each replay; the clip scale is computed from *grad_sumsq, the
// squared gradient norm the step summed on the device, exactly as the host's clip_scale() does
// (kernels/gradnorm.h: double sqrt and division, then float). A non-finite *grad_sumsq updates
// nothing (the step is skipped, as the trainer skips it), and so does a non-finite *loss_sum where
// loss_sum is given (the step's summed loss). hp supplies beta1, beta2 and eps; its
// lr, grad_scale and step are not used. Bit-identical to the host-scalar call with the same values.
struct AdamWStepScalars {
  float lr = 0.f;
  float inv_bias_correction1 = 1.f, inv_bias_correction2 = 1.f;  // 1 / (1 - beta^t)
  uint32_t step = 1;
};
// From hp.lr, hp.step (1-based) and the betas, as the host-scalar update computes them.
inline AdamWStepScalars adamw_step_scalars(const AdamWParams& hp) {
  AdamWStepScalars s;
  s.lr = hp.lr;
  s.inv_bias_correction1 = float(1.0 / (1.0 - std::pow(double(hp.beta1), double(hp.step))));
  s.inv_bias_correction2 = float(1.0 / (1.0 - std::pow(double(hp.beta2), double(hp.step))));
  s.step = uint32_t(hp.step);
  return s;
}
void adamw_update(bf16* params, float* master, const bf16* grads, float* m, float* v,
                  const std::vector<AdamWRange>& ranges, const AdamWParams& hp,
                  const AdamWStepScalars* step, const double* grad_sumsq, const double* loss_sum,
                  double grad_clip, uint64_t rounding_seed, Stream stream);

// Elementwise conversions (e.g. master weights from bf16 parameters), bf16 rounded to nearest.
void convert_bf16_to_f32(float* out, const bf16* in, size_t n, Stream stream);
void convert_f32_to_bf16(bf16* out, const float* in, size_t n, Stream stream);

}  // namespace taco::cuda
