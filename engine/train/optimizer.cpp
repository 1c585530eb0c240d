#include "engine/train/optimizer.h"

#include "kernels/adamw.h"
#include "kernels/check.h"

namespace taco {

AdamW::AdamW(const ParamLayout& layout, DType param_dtype, DeviceKind device,
             const AdamWConfig& cfg)
    : layout_(layout), dtype_(param_dtype), device_(device), cfg_(cfg) {}

void AdamW::plan(Arena& arena) {
  h_m_ = arena.reserve("adam_m", DType::f32, layout_.total());
  h_v_ = arena.reserve("adam_v", DType::f32, layout_.total());
  if (dtype_ == DType::bf16) h_master_ = arena.reserve("master", DType::f32, layout_.total());
}

void AdamW::bind(const Arena& arena, const Tensor& params) {
  m_ = arena.get(h_m_);
  v_ = arena.get(h_v_);
  if (dtype_ == DType::bf16) {
    master_ = arena.get(h_master_);
    TACO_CHECK(false, "bf16 master-weight initialization comes with the CUDA backend");
  } else {
    TACO_CHECK(params.dtype == DType::f32, "AdamW on the CPU updates fp32 parameters");
  }
}

void AdamW::update(const Tensor& params, const Tensor& grads, double lr, float grad_scale,
                   int step) {
  TACO_CHECK(device_ == DeviceKind::cpu, "CUDA AdamW comes with the CUDA backend");
  for (const ParamInfo& p : layout_.params()) {
    cpu::AdamWParams hp{float(lr),
                        float(cfg_.beta1),
                        float(cfg_.beta2),
                        float(cfg_.eps),
                        p.decay ? float(cfg_.weight_decay) : 0.f,
                        grad_scale,
                        step};
    cpu::adamw_update(params.as<float>() + p.offset, grads.as<float>() + p.offset,
                      m_.as<float>() + p.offset, v_.as<float>() + p.offset, p.numel(), hp);
  }
}

}  // namespace taco
