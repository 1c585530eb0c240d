// GPT-2 (pre-LayerNorm blocks, 4x MLP, tied embeddings, final LayerNorm) with explicit forward
// and backward over one micro-batch, in the style of llm.c, calling the kernels through
// model/ops.h and communicating only through the tensor-parallel mappings, each naming its site.
//
// Shapes per micro-batch (B rows of T tokens, N = B*T, C = d_model; "/tp" marks a tensor-parallel
// shard; Nr = N/tp rows of the residual stream under sequence parallelism, else Nr = N):
//   residual stream x, x2        [Nr, C]
//   LN outputs feeding a matmul  [N, C]  (gathered under SP)
//   qkv [N, 3C/tp]  atty [N, C/tp]  fch, fch_gelu [N, 4C/tp]  logits [N, Vp/tp]
//
// Pipeline parallelism: a stage holds layers [layer_begin, layer_end); the first stage embeds,
// the last computes the loss. Activations of up to `slots` micro-batches in flight are kept
// (1F1B needs at most pp of them); everything used only between a micro-batch's forward and
// its backward on one stage is shared.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/runtime/arena.h"
#include "model/param_layout.h"
#include "parallel/tensor_parallel.h"

namespace taco {

class Gpt {
 public:
  // dtype: f32 (CPU reference), f64 (gradient checks) or bf16 (CUDA). tp may be null (tp = 1).
  Gpt(const ParamLayout& layout, int micro_batch, int slots, DeviceKind device, DType dtype,
      TensorParallel* tp);

  // Rounds the parameter and gradient buffers up to a multiple of `multiple` elements (ZeRO-1
  // splits them evenly over dp ranks: ZeroShard::padded_total() for `multiple` ranks); call
  // before plan(). The padding stays zero.
  void set_buffer_padding(size_t multiple) { padding_ = multiple; }
  // Plans parameters, gradients and activations into `arena`; bind() after arena.allocate().
  void plan(Arena& arena);
  void bind(const Arena& arena);

  const ParamLayout& layout() const { return layout_; }
  // The attention engine this model's shapes run on (for the run's log line).
  std::string attention_engine() const;
  Tensor params() const { return params_; }
  Tensor grads() const { return grads_; }
  Tensor params_padded() const { return params_padded_; }
  Tensor grads_padded() const { return grads_padded_; }
  Tensor param(const ParamInfo& p) const { return params_.slice(p.offset, p.numel()); }
  Tensor grad(const ParamInfo& p) const { return grads_.slice(p.offset, p.numel()); }
  Tensor param(const std::string& name) const { return param(layout_.get(name)); }
  Tensor grad(const std::string& name) const { return grad(layout_.get(name)); }

  // One stage holding the whole model: forward over B rows of T tokens (host arrays [B, T])
  // returns the sum of the per-token losses; backward adds the gradients of sum(loss) * dloss.
  // A forward given the dloss of the backward that follows may start that backward early (the
  // fused classifier writes dlogits with the loss); dloss = 0 (evaluation) leaves it all.
  double forward(const int32_t* inputs, const int32_t* targets, float dloss = 0.f);
  void backward(float dloss);

  // Pipeline pieces. set_batch gives a slot its tokens (inputs used on the first stage, targets
  // on the last). forward_stage adds its per-token losses to a sum kept where the model runs
  // (on the device: no host round trip mid-step); take_loss_sum returns that sum over the
  // forwards since the last call (0 off the last stage) and starts a new one, waiting for the
  // device. forward() is set_batch + forward_stage + take_loss_sum.
  void set_batch(int slot, const int32_t* inputs, const int32_t* targets);
  // The same from [B, T] int32 tensors on the model's device, queued as an op (a CUDA graph's
  // step copies each micro-batch's tokens in from buffers the host filled before it).
  void set_batch(int slot, const Tensor& inputs, const Tensor& targets);
  void forward_stage(int slot, float dloss = 0.f);
  double take_loss_sum();
  // The same sum left on the device, for a step that must not wait for it (a CUDA graph's): one
  // f64, empty off the last stage. zero_loss_sum starts a new sum, queued as an op.
  Tensor loss_sum() const { return loss_sum_; }
  void zero_loss_sum();
  void backward_stage(int slot, float dloss);
  Tensor stage_input(int slot) const;   // [Nr, C] a non-first stage receives before forward
  Tensor stage_output(int slot) const;  // [Nr, C] a non-last stage sends after forward
  // [Nr, C]: d(stage output), received by a non-last stage before backward_stage; after it,
  // d(stage input), which a non-first stage sends back.
  Tensor stage_grad() const { return dresid_; }
  // [B*T, V_local]: the last forward's logits on the last stage (before a backward, or a
  // forward given dloss, overwrites them with their gradient); for sampling.
  Tensor logits() const { return logits_; }

  // Parameters whose gradients are partial sums over the tp group under sequence parallelism
  // (LayerNorms and positions see only this rank's token rows): the trainer all-reduces them.
  std::vector<const ParamInfo*> sequence_parallel_grads() const;

  int micro_batch() const { return B_; }
  int slots() const { return int(slots_.size()); }
  int residual_rows() const { return Nr_; }

 private:
  struct LayerActs {
    Tensor resid, ln1, ln1_mean, ln1_rstd, qkv, atty, att_saved, resid2, ln2, ln2_mean, ln2_rstd,
        fch, fch_gelu;
  };
  struct SlotActs {
    Tensor tokens, targets, resid_final;
    std::vector<LayerActs> layers;
  };
  void forward_embedding(SlotActs& s);
  void forward_block(SlotActs& s, int i);
  void forward_head(SlotActs& s, float dloss);
  // CUDA without SP: the LayerNorm backward adds the fc2 and proj bias gradients (column sums of
  // the residual gradient it writes) instead of a separate pass in matmul_backward. Not on the
  // CPU (the reference keeps matmul_backward's sums) nor under SP (a rank's LayerNorm sees only
  // its rows, the bias gradient needs all).
  bool fuses_row_parallel_bias_grads() const { return device_ == DeviceKind::cuda && !sp_; }
  void backward_head(SlotActs& s, float dloss);
  void backward_block(SlotActs& s, int i);
  void backward_embedding(SlotActs& s);
  // Adds wpe to rows [row0, row0 + rows) of the flattened [B, T] token grid (and back).
  void add_positions(const Tensor& x, int row0, int rows);
  void add_position_grads(const Tensor& dx, int row0, int rows);
  int first_row() const { return tp_->sequence_parallel() ? tp_->rank() * Nr_ : 0; }

  const ParamLayout& layout_;
  GptDims d_;
  int B_, T_, N_, Nr_, C_, NH_local_, C_local_, V_local_;
  DeviceKind device_;
  DType dtype_;
  TensorParallel* tp_;
  TensorParallel no_tp_;
  bool sp_;

  Tensor params_, grads_, params_padded_, grads_padded_;
  size_t padding_ = 1;
  std::vector<SlotActs> slots_;
  // Shared between forward and backward of one micro-batch on this stage.
  Tensor lnf_, lnf_full_, lnf_mean_, lnf_rstd_, logits_;
  // The slot whose dlogits the last forward_head already wrote over logits_ (one logits buffer:
  // on the last stage a micro-batch's backward follows its forward), and with which dloss.
  const SlotActs* dlogits_owner_ = nullptr;
  float dlogits_scale_ = 0.f;
  Tensor ce_max_, ce_sumexp_, ce_target_, losses_;
  Tensor loss_sum_;  // one f64 on the last stage: forward_stage's losses since take_loss_sum
  Tensor dresid_, full_a_, full_b_, shard_, dqkv_, datty_, dfch_, dfch_gelu_, attn_scratch_;
  std::vector<size_t> handles_;
  std::vector<Tensor*> bound_;
};

}  // namespace taco
