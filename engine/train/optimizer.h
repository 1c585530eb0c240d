// AdamW over a rank's parameter buffer, one kernel call per named parameter so biases and
// LayerNorm weights get no weight decay. On the CPU the fp32 parameters are the master weights;
// with bf16 parameters (CUDA) the optimizer keeps fp32 master weights and writes bf16 copies.
#pragma once

#include "engine/runtime/arena.h"
#include "model/param_layout.h"

namespace taco {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  AdamW(const ParamLayout& layout, DType param_dtype, DeviceKind device, const AdamWConfig& cfg);
  void plan(Arena& arena);
  void bind(const Arena& arena, const Tensor& params);

  // One update with learning rate `lr`, gradients multiplied by `grad_scale` first (clipping);
  // `step` is 1-based.
  void update(const Tensor& params, const Tensor& grads, double lr, float grad_scale, int step);

  Tensor m() const { return m_; }
  Tensor v() const { return v_; }
  Tensor master() const { return master_; }

 private:
  const ParamLayout& layout_;
  DType dtype_;
  DeviceKind device_;
  AdamWConfig cfg_;
  size_t h_m_ = 0, h_v_ = 0, h_master_ = 0;
  Tensor m_, v_, master_;
};

}  // namespace taco
