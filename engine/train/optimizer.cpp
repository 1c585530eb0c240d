#include "engine/train/optimizer.h"

#include <algorithm>
#include <vector>

#include "engine/runtime/device.h"
#include "kernels/adamw.h"
#include "kernels/check.h"
#include "model/ops.h"

namespace taco {

AdamW::AdamW(const ParamLayout& layout, DType param_dtype, DeviceKind device,
             const AdamWConfig& cfg, const ZeroShard& shard)
    : layout_(layout),
      dtype_(param_dtype),
      device_(device),
      cfg_(cfg),
      begin_(std::min(shard.begin(), layout.total())),
      end_(std::min(shard.end(), layout.total())) {
  const bool cpu_fp32 = device == DeviceKind::cpu && param_dtype == DType::f32;
  const bool cuda_bf16 = device == DeviceKind::cuda && param_dtype == DType::bf16;
  TACO_CHECK(cpu_fp32 || cuda_bf16, "AdamW runs fp32 parameters on the CPU, bf16 on CUDA");
  TACO_CHECK(shard.total() == layout.total(), "AdamW: the shard splits another buffer");
  TACO_CHECK(built_with_cuda() || !cuda_bf16, "AdamW on CUDA in a build without CUDA");
  // The layout is contiguous: merge neighbours with the same decay into one launch.
  for (const ParamInfo& p : layout.params()) {
    const size_t lo = std::max(p.offset, begin_), hi = std::min(p.offset + p.numel(), end_);
    if (lo >= hi) continue;
    if (!ranges_.empty() && ranges_.back().decay == p.decay &&
        ranges_.back().offset + ranges_.back().numel == lo) {
      ranges_.back().numel += hi - lo;
    } else {
      ranges_.push_back({lo, hi - lo, p.decay});
    }
  }
}

void AdamW::plan(Arena& arena) {
  TACO_CHECK(arena.device() == device_, "AdamW state planned on another device's arena");
  const size_t n = end_ - begin_;
  h_m_ = arena.reserve("adam_m", DType::f32, n);
  h_v_ = arena.reserve("adam_v", DType::f32, n);
  if (dtype_ == DType::bf16) h_master_ = arena.reserve("master", DType::f32, n);
}

void AdamW::bind(const Arena& arena, const Tensor& params) {
  TACO_CHECK(
      params.dtype == dtype_ && params.device == device_ && params.numel == layout_.total(),
      "AdamW::bind: the parameter buffer differs from the optimizer's dtype, device or size");
  params_ = params;
  m_ = arena.get(h_m_);
  v_ = arena.get(h_v_);
  if (dtype_ == DType::bf16) master_ = arena.get(h_master_);
}

void AdamW::load_initial(const float* host) {
  TACO_CHECK(!params_.empty(), "AdamW::load_initial before bind");
  const size_t n = layout_.total();
  if (dtype_ == DType::f32) {
    device_copy(params_.data, host, n * sizeof(float), device_, DeviceKind::cpu);
    return;
  }
  device_copy(master_.data, host + begin_, (end_ - begin_) * sizeof(float), device_,
              DeviceKind::cpu);
  // Every rank starts from the same weights: bf16 copies of all of them, not just the shard.
  std::vector<bf16> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = float_to_bf16(host[i]);
  device_copy(params_.data, all.data(), n * sizeof(bf16), device_, DeviceKind::cpu);
}

void AdamW::update(const Tensor& params, const Tensor& grads, double lr, float grad_scale,
                   int step) {
  TACO_CHECK(params.data == params_.data, "AdamW::update on another parameter buffer than bound");
  TACO_CHECK(grads.dtype == dtype_ && grads.numel == layout_.total(),
             "AdamW::update: gradients differ from the parameters' dtype or size");
  const cpu::AdamWParams hp{float(lr),
                            float(cfg_.beta1),
                            float(cfg_.beta2),
                            float(cfg_.eps),
                            float(cfg_.weight_decay),
                            grad_scale,
                            step};
  if (dtype_ == DType::f32) {
    for (const Range& r : ranges_) {
      cpu::AdamWParams range_hp = hp;
      if (!r.decay) range_hp.weight_decay = 0.f;
      cpu::adamw_update(params.as<float>() + r.offset, grads.as<float>() + r.offset,
                        m_.as<float>() + (r.offset - begin_), v_.as<float>() + (r.offset - begin_),
                        r.numel, range_hp);
    }
    return;
  }
  // bf16 parameters exist on CUDA only (checked when constructed). All ranges in one launch (a few
  // for deep models), on the legacy default stream in order with the model's ops; parameters
  // rounded to nearest from the master (the master carries the small updates, so no stochastic
  // rounding is needed).
  if constexpr (built_with_cuda())
    cuda::adamw_update(params.as<bf16>(), master_.as<float>(), grads.as<bf16>(), m_.as<float>(),
                       v_.as<float>(), device_ranges(), hp, cuda::kRoundToNearest, ops::stream());
}

std::vector<cuda::AdamWRange> AdamW::device_ranges() const {
  std::vector<cuda::AdamWRange> ranges;
  ranges.reserve(ranges_.size());
  for (const Range& r : ranges_)
    ranges.push_back(
        {r.offset, r.offset - begin_, r.numel, r.decay ? float(cfg_.weight_decay) : 0.f});
  return ranges;
}

cuda::AdamWStepScalars AdamW::step_scalars(double lr, int step) const {
  TACO_CHECK(step >= 1, "AdamW: the step is 1-based");
  cpu::AdamWParams hp{};
  hp.lr = float(lr);
  hp.beta1 = float(cfg_.beta1);
  hp.beta2 = float(cfg_.beta2);
  hp.step = step;
  return cuda::adamw_step_scalars(hp);
}

void AdamW::update_on_device(const Tensor& params, const Tensor& grads,
                             const cuda::AdamWStepScalars* scalars, const Tensor& grad_sumsq,
                             const Tensor& loss_sum, double grad_clip) {
  TACO_CHECK(params.data == params_.data, "AdamW::update on another parameter buffer than bound");
  TACO_CHECK(dtype_ == DType::bf16 && device_ == DeviceKind::cuda && grads.dtype == dtype_ &&
                 grads.numel == layout_.total(),
             "AdamW::update_on_device needs bf16 parameters and gradients on CUDA");
  TACO_CHECK(grad_sumsq.dtype == DType::f64 && grad_sumsq.numel == 1 &&
                 grad_sumsq.device == DeviceKind::cuda,
             "AdamW::update_on_device: grad_sumsq must be one f64 on the device");
  TACO_CHECK(loss_sum.empty() || (loss_sum.dtype == DType::f64 && loss_sum.numel == 1 &&
                                  loss_sum.device == DeviceKind::cuda),
             "AdamW::update_on_device: loss_sum must be one f64 on the device, or none");
  // beta1, beta2, eps; lr, grad_scale and step come from the device.
  const cpu::AdamWParams hp{0.f, float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), 0.f, 1.f,
                            1};
  if constexpr (built_with_cuda())
    cuda::adamw_update(params.as<bf16>(), master_.as<float>(), grads.as<bf16>(), m_.as<float>(),
                       v_.as<float>(), device_ranges(), hp, scalars, grad_sumsq.as<const double>(),
                       loss_sum.as<const double>(), grad_clip, cuda::kRoundToNearest,
                       ops::stream());
}

}  // namespace taco
