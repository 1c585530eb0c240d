// GPT-2 (pre-LayerNorm blocks, 4x MLP, tied embeddings, final LayerNorm) with explicit forward
// and backward over one micro-batch, in the style of llm.c, calling the kernels through
// model/ops.h and communicating only through the tensor-parallel mappings.
//
// Shapes per micro-batch (B rows of T tokens, N = B*T, C = d_model, tp shards marked /tp):
//   x      [N, C]      residual stream
//   qkv    [N, 3C/tp]  atty [N, C/tp]   fch, fch_gelu [N, 4C/tp]
//   logits [N, Vp/tp]  (overwritten by dlogits in backward)
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/arena.h"
#include "model/param_layout.h"
#include "parallel/tensor_parallel.h"

namespace taco {

class Gpt {
 public:
  // dtype: f32 (CPU reference), f64 (gradient checks) or bf16 (CUDA).
  Gpt(const ParamLayout& layout, int micro_batch, DeviceKind device, DType dtype,
      TensorParallel* tp);

  // Plans parameters, gradients and activations into `arena`; bind() after arena.allocate().
  void plan(Arena& arena);
  void bind(const Arena& arena);

  const ParamLayout& layout() const { return layout_; }
  Tensor params() const { return params_; }
  Tensor grads() const { return grads_; }
  Tensor param(const ParamInfo& p) const { return params_.slice(p.offset, p.numel()); }
  Tensor grad(const ParamInfo& p) const { return grads_.slice(p.offset, p.numel()); }
  Tensor param(const std::string& name) const { return param(layout_.get(name)); }
  Tensor grad(const std::string& name) const { return grad(layout_.get(name)); }

  // Forward over B rows of T tokens (host arrays [B, T]); returns the sum of the per-token
  // losses of these rows. Keeps what backward needs.
  double forward(const int32_t* inputs, const int32_t* targets);
  // Backward of the last forward with d(loss_i) = dloss for every token; adds into grads().
  void backward(float dloss);

  int micro_batch() const { return B_; }

 private:
  struct LayerActs {
    Tensor resid, ln1, ln1_mean, ln1_rstd, qkv, atty, att_saved, resid2, ln2, ln2_mean, ln2_rstd,
        fch, fch_gelu;
  };
  Tensor reserve_act(Arena& arena, const std::string& name, size_t numel, DType dtype);
  void forward_block(int l, const Tensor& x_in, const Tensor& x_out);
  void backward_block(int l);

  const ParamLayout& layout_;
  GptDims d_;
  int B_, T_, N_, C_, NH_local_, C_local_, V_local_;
  DeviceKind device_;
  DType dtype_;
  TensorParallel* tp_;
  TensorParallel no_tp_;

  Tensor params_, grads_;
  std::vector<LayerActs> acts_;  // indexed by local layer
  Tensor tokens_, targets_, resid_final_, lnf_, lnf_mean_, lnf_rstd_, logits_;
  Tensor ce_max_, ce_sumexp_, ce_target_, losses_;
  Tensor dresid_, dln_, dqkv_, datty_, dfch_, dfch_gelu_, attn_scratch_;
  std::vector<size_t> handles_;
  std::vector<Tensor*> bound_;
  std::vector<float> host_losses_;
};

}  // namespace taco
