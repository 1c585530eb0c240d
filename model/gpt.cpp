#include "model/gpt.h"

#include "kernels/check.h"
#include "model/ops.h"

namespace taco {

namespace {
// Row statistics (LayerNorm mean/rstd, cross-entropy pieces, losses) stay in fp32 when the
// activations are bf16.
DType stat_dtype(DType dtype) { return dtype == DType::bf16 ? DType::f32 : dtype; }
}  // namespace

Gpt::Gpt(const ParamLayout& layout, int micro_batch, DeviceKind device, DType dtype,
         TensorParallel* tp)
    : layout_(layout),
      d_(layout.dims()),
      B_(micro_batch),
      T_(layout.dims().seq_len),
      N_(micro_batch * layout.dims().seq_len),
      C_(layout.dims().d_model),
      device_(device),
      dtype_(dtype),
      tp_(tp ? tp : &no_tp_) {
  const int tpn = layout.spec().tp;
  TACO_CHECK(tp_->size() == tpn, "TensorParallel size differs from the layout's tp");
  NH_local_ = d_.n_head / tpn;
  C_local_ = C_ / tpn;
  V_local_ = d_.padded_vocab / tpn;
  acts_.resize(layout.spec().layer_end - layout.spec().layer_begin);
}

Tensor Gpt::reserve_act(Arena& arena, const std::string& name, size_t numel, DType dtype) {
  handles_.push_back(arena.reserve(name, dtype, numel));
  return Tensor{};
}

void Gpt::plan(Arena& arena) {
  TACO_CHECK(arena.device() == device_, "arena on another device");
  handles_.clear();
  bound_.clear();
  auto want = [&](Tensor& t, const std::string& name, size_t numel, DType dt) {
    reserve_act(arena, name, numel, dt);
    bound_.push_back(&t);
  };
  const DType st = stat_dtype(dtype_);
  const size_t N = N_, C = C_, Cl = C_local_;
  want(params_, "params", layout_.total(), dtype_);
  want(grads_, "grads", layout_.total(), dtype_);
  for (size_t i = 0; i < acts_.size(); ++i) {
    LayerActs& a = acts_[i];
    std::string p = "h" + std::to_string(layout_.spec().layer_begin + i) + ".";
    want(a.resid, p + "resid", N * C, dtype_);
    want(a.ln1, p + "ln1", N * C, dtype_);
    want(a.ln1_mean, p + "ln1_mean", N, st);
    want(a.ln1_rstd, p + "ln1_rstd", N, st);
    want(a.qkv, p + "qkv", N * 3 * Cl, dtype_);
    want(a.atty, p + "atty", N * Cl, dtype_);
    want(a.att_saved, p + "att_saved", ops::attention_saved_numel(device_, B_, T_, NH_local_),
         device_ == DeviceKind::cuda ? DType::f32 : dtype_);
    want(a.resid2, p + "resid2", N * C, dtype_);
    want(a.ln2, p + "ln2", N * C, dtype_);
    want(a.ln2_mean, p + "ln2_mean", N, st);
    want(a.ln2_rstd, p + "ln2_rstd", N, st);
    want(a.fch, p + "fch", N * 4 * Cl, dtype_);
    want(a.fch_gelu, p + "fch_gelu", N * 4 * Cl, dtype_);
  }
  want(tokens_, "tokens", N, DType::i32);
  want(targets_, "targets", N, DType::i32);
  want(resid_final_, "resid_final", N * C, dtype_);
  want(lnf_, "lnf", N * C, dtype_);
  want(lnf_mean_, "lnf_mean", N, st);
  want(lnf_rstd_, "lnf_rstd", N, st);
  want(logits_, "logits", N * size_t(V_local_), dtype_);
  want(ce_max_, "ce_max", N, st);
  want(ce_sumexp_, "ce_sumexp", N, st);
  want(ce_target_, "ce_target", N, st);
  want(losses_, "losses", N, st);
  want(dresid_, "dresid", N * C, dtype_);
  want(dln_, "dln", N * C, dtype_);
  want(dqkv_, "dqkv", N * 3 * Cl, dtype_);
  want(datty_, "datty", N * Cl, dtype_);
  want(dfch_, "dfch", N * 4 * Cl, dtype_);
  want(dfch_gelu_, "dfch_gelu", N * 4 * Cl, dtype_);
  want(attn_scratch_, "attn_scratch",
       ops::attention_backward_scratch_bytes(device_, B_, T_, C_local_, NH_local_), DType::u8);
}

void Gpt::bind(const Arena& arena) {
  for (size_t i = 0; i < bound_.size(); ++i) *bound_[i] = arena.get(handles_[i]);
}

double Gpt::forward(const int32_t* inputs, const int32_t* targets) {
  const LayoutSpec& spec = layout_.spec();
  TACO_CHECK(spec.has_embedding && spec.has_head, "pipeline stages run through the schedule");
  const int vocab_start = tp_->rank() * V_local_;
  const ParamInfo& wte = layout_.get("wte");
  device_copy(tokens_.data, inputs, N_ * sizeof(int32_t), device_, DeviceKind::cpu);
  device_copy(targets_.data, targets, N_ * sizeof(int32_t), device_, DeviceKind::cpu);

  // Embedding: vocab-parallel token rows, summed over tp, then positions.
  Tensor x0 = acts_.empty() ? resid_final_ : acts_[0].resid;
  ops::token_embedding_forward(x0, tokens_, param(wte), N_, C_, vocab_start, wte.valid_rows);
  tp_->reduce_from_tp_region_forward(x0, N_, "embed.fwd", -1);
  ops::position_embedding_forward(x0, param("wpe"), B_, T_, C_);

  for (size_t i = 0; i < acts_.size(); ++i) {
    const Tensor& x_out = i + 1 < acts_.size() ? acts_[i + 1].resid : resid_final_;
    forward_block(int(i), acts_[i].resid, x_out);
  }

  // Final LayerNorm, tied head, vocab-parallel cross-entropy.
  ops::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, resid_final_, param("lnf_w"), param("lnf_b"),
                         N_, C_);
  tp_->copy_to_tp_region_forward(lnf_, N_, "head.in.fwd", -1);
  ops::matmul_forward(logits_, lnf_, param(wte), Tensor{}, N_, C_, V_local_);
  ops::crossentropy_row_max(ce_max_, logits_, N_, V_local_, wte.valid_rows);
  tp_->all_reduce_max(ce_max_);
  ops::crossentropy_sumexp_target(ce_sumexp_, ce_target_, logits_, ce_max_, targets_, N_, V_local_,
                                  wte.valid_rows, vocab_start);
  tp_->all_reduce_sum(ce_sumexp_);
  tp_->all_reduce_sum(ce_target_);
  ops::crossentropy_loss(losses_, ce_max_, ce_sumexp_, ce_target_, N_);

  // Sum the per-token losses on the host, in double.
  const size_t es = dtype_size(losses_.dtype);
  host_losses_.resize(N_ * es / sizeof(float));
  device_copy(host_losses_.data(), losses_.data, N_ * es, DeviceKind::cpu, device_);
  double sum = 0;
  if (losses_.dtype == DType::f64) {
    const double* l = reinterpret_cast<const double*>(host_losses_.data());
    for (int i = 0; i < N_; ++i) sum += l[i];
  } else {
    for (int i = 0; i < N_; ++i) sum += host_losses_[i];
  }
  return sum;
}

void Gpt::forward_block(int i, const Tensor& x, const Tensor& x_out) {
  const int l = layout_.spec().layer_begin + i;
  const std::string h = "h" + std::to_string(l) + ".";
  LayerActs& a = acts_[i];
  const int N = N_, C = C_, Cl = C_local_;
  const bool tp1 = tp_->size() == 1;

  // Attention: x2 = x + proj(attention(qkv(LN1(x)))).
  ops::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, param(h + "ln1_w"), param(h + "ln1_b"),
                         N, C);
  tp_->copy_to_tp_region_forward(a.ln1, N, "attn.in.fwd", l);
  ops::matmul_forward(a.qkv, a.ln1, param(h + "qkv_w"), param(h + "qkv_b"), N, C, 3 * Cl);
  ops::attention_forward(a.atty, a.att_saved, a.qkv, B_, T_, Cl, NH_local_);
  // Row-parallel projection: the bias joins once, after the partial sums are reduced.
  Tensor proj = dln_;  // scratch [N, C], free during forward
  ops::matmul_forward(proj, a.atty, param(h + "proj_w"), tp1 ? param(h + "proj_b") : Tensor{}, N,
                      Cl, C);
  tp_->reduce_from_tp_region_forward(proj, N, "attn.out.fwd", l);
  TACO_CHECK(tp1, "tp > 1 bias add comes with the parallel runtime");
  ops::residual_forward(a.resid2, x, proj);

  // MLP: x_out = x2 + fc2(gelu(fc(LN2(x2)))).
  ops::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.resid2, param(h + "ln2_w"),
                         param(h + "ln2_b"), N, C);
  tp_->copy_to_tp_region_forward(a.ln2, N, "mlp.in.fwd", l);
  ops::matmul_forward(a.fch, a.ln2, param(h + "fc_w"), param(h + "fc_b"), N, C, 4 * Cl);
  ops::gelu_forward(a.fch_gelu, a.fch);
  Tensor fc2 = dln_;
  ops::matmul_forward(fc2, a.fch_gelu, param(h + "fc2_w"), tp1 ? param(h + "fc2_b") : Tensor{}, N,
                      4 * Cl, C);
  tp_->reduce_from_tp_region_forward(fc2, N, "mlp.out.fwd", l);
  ops::residual_forward(x_out, a.resid2, fc2);
}

void Gpt::backward(float dloss) {
  const ParamInfo& wte = layout_.get("wte");
  const int vocab_start = tp_->rank() * V_local_;

  // Cross-entropy writes dlogits over the logits; the head's backward gives d(lnf) and d(wte).
  ops::crossentropy_backward(logits_, ce_max_, ce_sumexp_, targets_, dloss, N_, V_local_,
                             wte.valid_rows, vocab_start);
  ops::matmul_backward(dln_, grad(wte), Tensor{}, logits_, lnf_, param(wte), N_, C_, V_local_);
  tp_->copy_to_tp_region_backward(dln_, N_, "head.in.bwd", -1);
  ops::zero(dresid_);
  ops::layernorm_backward(dresid_, grad("lnf_w"), grad("lnf_b"), dln_, resid_final_, param("lnf_w"),
                          lnf_mean_, lnf_rstd_, N_, C_);

  for (int i = int(acts_.size()) - 1; i >= 0; --i) backward_block(i);

  // dresid now holds d(embedding output).
  ops::position_embedding_backward(grad("wpe"), dresid_, B_, T_, C_);
  tp_->reduce_from_tp_region_backward(dresid_, N_, "embed.bwd", -1);
  ops::token_embedding_backward(grad(wte), dresid_, tokens_, N_, C_, vocab_start, wte.valid_rows);
}

void Gpt::backward_block(int i) {
  const int l = layout_.spec().layer_begin + i;
  const std::string h = "h" + std::to_string(l) + ".";
  LayerActs& a = acts_[i];
  const int N = N_, C = C_, Cl = C_local_;

  // MLP. dresid = d(x_out) flows unchanged into both d(x2) and d(fc2 output).
  tp_->reduce_from_tp_region_backward(dresid_, N, "mlp.out.bwd", l);
  ops::matmul_backward(dfch_gelu_, grad(h + "fc2_w"), grad(h + "fc2_b"), dresid_, a.fch_gelu,
                       param(h + "fc2_w"), N, 4 * Cl, C);
  ops::gelu_backward(dfch_, a.fch, dfch_gelu_);
  ops::matmul_backward(dln_, grad(h + "fc_w"), grad(h + "fc_b"), dfch_, a.ln2, param(h + "fc_w"), N,
                       C, 4 * Cl);
  tp_->copy_to_tp_region_backward(dln_, N, "mlp.in.bwd", l);
  ops::layernorm_backward(dresid_, grad(h + "ln2_w"), grad(h + "ln2_b"), dln_, a.resid2,
                          param(h + "ln2_w"), a.ln2_mean, a.ln2_rstd, N, C);

  // Attention. dresid = d(x2) flows into d(x) and d(proj output).
  tp_->reduce_from_tp_region_backward(dresid_, N, "attn.out.bwd", l);
  ops::matmul_backward(datty_, grad(h + "proj_w"), grad(h + "proj_b"), dresid_, a.atty,
                       param(h + "proj_w"), N, Cl, C);
  ops::attention_backward(dqkv_, datty_, a.qkv, a.atty, a.att_saved, attn_scratch_, B_, T_, Cl,
                          NH_local_);
  ops::matmul_backward(dln_, grad(h + "qkv_w"), grad(h + "qkv_b"), dqkv_, a.ln1, param(h + "qkv_w"),
                       N, C, 3 * Cl);
  tp_->copy_to_tp_region_backward(dln_, N, "attn.in.bwd", l);
  ops::layernorm_backward(dresid_, grad(h + "ln1_w"), grad(h + "ln1_b"), dln_, a.resid,
                          param(h + "ln1_w"), a.ln1_mean, a.ln1_rstd, N, C);
}

}  // namespace taco
