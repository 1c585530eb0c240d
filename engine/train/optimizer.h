// AdamW over a rank's parameter buffer, one kernel call per run of consecutive parameters that
// share a weight-decay setting (biases and LayerNorm parameters get none).
//   CPU (fp32 parameters): the parameters are the weights; m and v are fp32.
//   CUDA (bf16 parameters): fp32 master weights, m and v in the arena; each update reads the bf16
//   gradients, updates the master and WRITES the bf16 parameters as the master rounded to nearest.
// ZeRO-1: an optimizer built for a ZeroShard (parallel/zero_shard.h) keeps m, v (and the master)
// for the shard's range [begin, end) of the flat buffer only and updates only those parameters;
// GradSync (parallel/grad_sync.h) reduce-scatters gradients into the range and all-gathers the
// parameters after.
// Use: plan(arena) before arena.allocate(); bind(arena, params); load_initial(host weights).
#pragma once

#include <vector>

#include "engine/runtime/arena.h"
#include "kernels/adamw.h"
#include "model/param_layout.h"
#include "parallel/zero_shard.h"

namespace taco {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // `shard`: the part of the flat buffer this rank updates (ZeroShard(layout.total()): all).
  AdamW(const ParamLayout& layout, DType param_dtype, DeviceKind device, const AdamWConfig& cfg,
        const ZeroShard& shard);
  // The whole buffer.
  AdamW(const ParamLayout& layout, DType param_dtype, DeviceKind device, const AdamWConfig& cfg)
      : AdamW(layout, param_dtype, device, cfg, ZeroShard(layout.total())) {}
  void plan(Arena& arena);
  // `params` is the model's parameter buffer (layout.total() elements of param_dtype).
  void bind(const Arena& arena, const Tensor& params);

  // Sets the weights from layout.total() host floats: the parameters on the CPU; on CUDA the
  // master weights (of the shard), and the bf16 parameters as their round-to-nearest copies.
  void load_initial(const float* host);

  // One update of the shard's parameters with learning rate `lr`, gradients (read at their
  // buffer offsets) multiplied by `grad_scale` first (clipping); `step` is 1-based.
  void update(const Tensor& params, const Tensor& grads, double lr, float grad_scale, int step);

  // The same update with its per-step values read on the device, for a step a CUDA graph replays
  // (bf16 parameters on CUDA only). `scalars` points to device memory holding step_scalars(lr,
  // step), written by the host before the step runs; `grad_sumsq` (one f64 on the device) holds
  // the squared gradient norm, from which the kernel takes clip_scale(sqrt(sum), grad_clip) as
  // the host would. A non-finite sum, or a non-finite `loss_sum` (one f64 on the device; may be
  // empty), updates nothing. Bit-identical to update() given the same lr, step and clip.
  cuda::AdamWStepScalars step_scalars(double lr, int step) const;
  void update_on_device(const Tensor& params, const Tensor& grads,
                        const cuda::AdamWStepScalars* scalars, const Tensor& grad_sumsq,
                        const Tensor& loss_sum, double grad_clip);

  Tensor m() const { return m_; }
  Tensor v() const { return v_; }
  Tensor master() const { return master_; }  // empty on the CPU

 private:
  // Elements [offset, offset + numel) updated with one weight-decay setting.
  struct Range {
    size_t offset, numel;
    bool decay;
  };

  std::vector<cuda::AdamWRange> device_ranges() const;  // ranges_ for the CUDA kernel

  const ParamLayout& layout_;
  DType dtype_;
  DeviceKind device_;
  AdamWConfig cfg_;
  std::vector<Range> ranges_;  // within the shard
  size_t begin_ = 0, end_ = 0;
  size_t h_m_ = 0, h_v_ = 0, h_master_ = 0;
  Tensor params_, m_, v_, master_;
};

}  // namespace taco
