#include "model/gpt.h"

#include <algorithm>

#include "kernels/check.h"
#include "model/ops.h"
#include "parallel/zero_shard.h"

namespace taco {

namespace {
// Row statistics (LayerNorm mean/rstd, cross-entropy pieces, losses) stay in fp32 when the
// activations are bf16.
DType stat_dtype(DType dtype) { return dtype == DType::bf16 ? DType::f32 : dtype; }
std::string block(int l) {
  std::string name = "h";  // built step by step: GCC 12 warns falsely (-Wrestrict) on "h" + ...
  name += std::to_string(l);
  name += '.';
  return name;
}
}  // namespace

Gpt::Gpt(const ParamLayout& layout, int micro_batch, int slots, DeviceKind device, DType dtype,
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
  TACO_CHECK(slots >= 1, "at least one activation slot");
  sp_ = tp_->sequence_parallel();
  NH_local_ = d_.n_head / tpn;
  C_local_ = C_ / tpn;
  V_local_ = d_.padded_vocab / tpn;
  Nr_ = sp_ ? N_ / tpn : N_;
  TACO_CHECK(!sp_ || N_ % tpn == 0, "sequence parallelism needs B*T divisible by tp");
  slots_.resize(slots);
  for (auto& s : slots_) s.layers.resize(layout.spec().layer_end - layout.spec().layer_begin);
}

void Gpt::plan(Arena& arena) {
  TACO_CHECK(arena.device() == device_, "arena on another device");
  handles_.clear();
  bound_.clear();
  auto want = [&](Tensor& t, const std::string& name, size_t numel, DType dt) {
    handles_.push_back(arena.reserve(name, dt, numel));
    bound_.push_back(&t);
  };
  const DType st = stat_dtype(dtype_);
  const size_t N = N_, Nr = Nr_, C = C_, Cl = C_local_;
  const LayoutSpec& spec = layout_.spec();
  // ZeroShard owns the padding: equal slots for `padding_` ranks.
  const size_t padded = ZeroShard(layout_.total(), int(padding_), 0).padded_total();
  want(params_padded_, "params", padded, dtype_);
  want(grads_padded_, "grads", padded, dtype_);
  for (size_t k = 0; k < slots_.size(); ++k) {
    SlotActs& s = slots_[k];
    const std::string sk = "slot" + std::to_string(k) + ".";
    want(s.tokens, sk + "tokens", N, DType::i32);
    want(s.targets, sk + "targets", N, DType::i32);
    want(s.resid_final, sk + "resid_final", Nr * C, dtype_);
    for (size_t i = 0; i < s.layers.size(); ++i) {
      LayerActs& a = s.layers[i];
      const std::string p = sk + block(spec.layer_begin + int(i));
      want(a.resid, p + "resid", Nr * C, dtype_);
      want(a.ln1, p + "ln1", N * C, dtype_);
      want(a.ln1_mean, p + "ln1_mean", Nr, st);
      want(a.ln1_rstd, p + "ln1_rstd", Nr, st);
      want(a.qkv, p + "qkv", N * 3 * Cl, dtype_);
      want(a.atty, p + "atty", N * Cl, dtype_);
      want(a.att_saved, p + "att_saved", ops::attention_saved_numel(device_, B_, T_, NH_local_),
           device_ == DeviceKind::cuda ? DType::f32 : dtype_);
      want(a.resid2, p + "resid2", Nr * C, dtype_);
      want(a.ln2, p + "ln2", N * C, dtype_);
      want(a.ln2_mean, p + "ln2_mean", Nr, st);
      want(a.ln2_rstd, p + "ln2_rstd", Nr, st);
      want(a.fch, p + "fch", N * 4 * Cl, dtype_);
      want(a.fch_gelu, p + "fch_gelu", N * 4 * Cl, dtype_);
    }
  }
  if (spec.has_head) {
    want(lnf_, "lnf", Nr * C, dtype_);
    if (sp_) want(lnf_full_, "lnf_full", N * C, dtype_);
    want(lnf_mean_, "lnf_mean", Nr, st);
    want(lnf_rstd_, "lnf_rstd", Nr, st);
    want(logits_, "logits", N * size_t(V_local_), dtype_);
    want(ce_max_, "ce_max", N, st);
    want(ce_sumexp_, "ce_sumexp", N, st);
    want(ce_target_, "ce_target", N, st);
    want(losses_, "losses", N, st);
    want(loss_sum_, "loss_sum", 1, DType::f64);
  }
  want(dresid_, "dresid", Nr * C, dtype_);
  want(full_a_, "full_a", N * C, dtype_);
  want(full_b_, "full_b", N * C, dtype_);
  if (sp_) want(shard_, "shard", Nr * C, dtype_);
  want(dqkv_, "dqkv", N * 3 * Cl, dtype_);
  want(datty_, "datty", N * Cl, dtype_);
  want(dfch_, "dfch", N * 4 * Cl, dtype_);
  if (ops::matmul_gelu_backward_needs_scratch(device_))
    want(dfch_gelu_, "dfch_gelu", N * 4 * Cl, dtype_);
  want(attn_scratch_, "attn_scratch",
       ops::attention_backward_scratch_bytes(device_, B_, T_, C_local_, NH_local_), DType::u8);
}

void Gpt::bind(const Arena& arena) {
  for (size_t i = 0; i < bound_.size(); ++i) *bound_[i] = arena.get(handles_[i]);
  params_ = params_padded_.slice(0, layout_.total());
  grads_ = grads_padded_.slice(0, layout_.total());
  if (!sp_) lnf_full_ = lnf_;
  if (layout_.spec().has_head) ops::zero(loss_sum_);
}

std::vector<const ParamInfo*> Gpt::sequence_parallel_grads() const {
  std::vector<const ParamInfo*> out;
  if (!sp_) return out;
  for (const ParamInfo& p : layout_.params()) {
    const std::string& n = p.name;
    const bool layernorm = n.find("ln1_") != std::string::npos ||
                           n.find("ln2_") != std::string::npos || n.rfind("lnf_", 0) == 0;
    if (layernorm || n == "wpe") out.push_back(&p);
  }
  return out;
}

Tensor Gpt::stage_input(int slot) const {
  const SlotActs& s = slots_[slot];
  return s.layers.empty() ? s.resid_final : s.layers[0].resid;
}

Tensor Gpt::stage_output(int slot) const { return slots_[slot].resid_final; }

void Gpt::set_batch(int slot, const int32_t* inputs, const int32_t* targets) {
  SlotActs& s = slots_[slot];
  if (inputs) device_copy(s.tokens.data, inputs, N_ * sizeof(int32_t), device_, DeviceKind::cpu);
  if (targets) device_copy(s.targets.data, targets, N_ * sizeof(int32_t), device_, DeviceKind::cpu);
}

void Gpt::set_batch(int slot, const Tensor& inputs, const Tensor& targets) {
  SlotActs& s = slots_[slot];
  TACO_CHECK(inputs.dtype == DType::i32 && inputs.numel == size_t(N_) &&
                 targets.dtype == DType::i32 && targets.numel == size_t(N_),
             "Gpt::set_batch: the token tensors are not [B, T] int32");
  ops::copy_async(s.tokens, inputs);
  ops::copy_async(s.targets, targets);
}

std::string Gpt::attention_engine() const {
  return ops::attention_engine_description(device_, B_, T_, C_local_, NH_local_);
}

double Gpt::forward(const int32_t* inputs, const int32_t* targets, float dloss) {
  set_batch(0, inputs, targets);
  forward_stage(0, dloss);
  return take_loss_sum();
}

void Gpt::zero_loss_sum() {
  if (layout_.spec().has_head) ops::zero(loss_sum_);
}

double Gpt::take_loss_sum() {
  if (!layout_.spec().has_head) return 0.0;
  double sum = 0;
  device_copy(&sum, loss_sum_.data, sizeof(double), DeviceKind::cpu, device_);
  ops::zero(loss_sum_);
  return sum;
}

void Gpt::backward(float dloss) { backward_stage(0, dloss); }

void Gpt::forward_stage(int slot, float dloss) {
  SlotActs& s = slots_[slot];
  if (layout_.spec().has_embedding) forward_embedding(s);
  for (size_t i = 0; i < s.layers.size(); ++i) forward_block(s, int(i));
  if (layout_.spec().has_head) forward_head(s, dloss);
}

void Gpt::backward_stage(int slot, float dloss) {
  SlotActs& s = slots_[slot];
  if (layout_.spec().has_head) backward_head(s, dloss);
  for (int i = int(s.layers.size()) - 1; i >= 0; --i) backward_block(s, i);
  if (layout_.spec().has_embedding) backward_embedding(s);
}

namespace {

// Row r holds position r % T. The rows split into a partial sequence at either end (under SP a
// rank's rows may start or stop mid-sequence) and whole sequences between, one call for all of
// those.
template <class Fn>
void for_each_position_run(int row0, int rows, int T, const Fn& fn) {
  for (int r = row0; r < row0 + rows;) {
    const int t0 = r % T, left = row0 + rows - r;
    if (t0 == 0 && left >= T) {
      const int seqs = left / T;
      fn(r - row0, 0, seqs, T);  // (first row, first position, sequences, length)
      r += seqs * T;
    } else {
      const int len = std::min(T - t0, left);
      fn(r - row0, t0, 1, len);
      r += len;
    }
  }
}

}  // namespace

void Gpt::add_positions(const Tensor& x, int row0, int rows) {
  const Tensor wpe = param("wpe");
  for_each_position_run(row0, rows, T_, [&](int row, int t0, int seqs, int len) {
    ops::position_embedding_forward(x.slice(size_t(row) * C_, size_t(seqs) * len * C_),
                                    wpe.slice(size_t(t0) * C_, size_t(len) * C_), seqs, len, C_);
  });
}

void Gpt::add_position_grads(const Tensor& dx, int row0, int rows) {
  const Tensor dwpe = grad("wpe");
  for_each_position_run(row0, rows, T_, [&](int row, int t0, int seqs, int len) {
    ops::position_embedding_backward(dwpe.slice(size_t(t0) * C_, size_t(len) * C_),
                                     dx.slice(size_t(row) * C_, size_t(seqs) * len * C_), seqs, len,
                                     C_);
  });
}

// Embedding: vocab-parallel token rows summed over tp (SP: reduce-scattered to this rank's token
// rows), then the positions of those rows.
void Gpt::forward_embedding(SlotActs& s) {
  const ParamInfo& wte = layout_.get("wte");
  const int vocab_start = tp_->rank() * V_local_;
  const Tensor x0 = s.layers.empty() ? s.resid_final : s.layers[0].resid;  // stage input
  const Tensor tok = sp_ ? full_a_ : x0;
  ops::token_embedding_forward(tok, s.tokens, param(wte), N_, C_, vocab_start, wte.valid_rows);
  tp_->row_parallel_output_forward(tok, x0, N_, TpSite::embed, -1);
  add_positions(x0, first_row(), Nr_);
}

void Gpt::backward_embedding(SlotActs& s) {
  const ParamInfo& wte = layout_.get("wte");
  const int vocab_start = tp_->rank() * V_local_;
  add_position_grads(dresid_, first_row(), Nr_);
  const Tensor dtok = tp_->row_parallel_output_backward(dresid_, full_a_, N_, TpSite::embed, -1);
  ops::token_embedding_backward(grad(wte), dtok, s.tokens, N_, C_, vocab_start, wte.valid_rows);
}

void Gpt::forward_block(SlotActs& s, int i) {
  const int l = layout_.spec().layer_begin + i;
  const std::string h = block(l);
  LayerActs& a = s.layers[i];
  const Tensor& x = a.resid;
  const bool last = size_t(i) + 1 == s.layers.size();
  const Tensor& x_out = last ? s.resid_final : s.layers[i + 1].resid;
  const int N = N_, Nr = Nr_, C = C_, Cl = C_local_;
  const bool tp1 = tp_->size() == 1;

  // A LayerNorm writes this rank's rows: under SP into shard_, all-gathered into the full input
  // of the column-parallel matmul by spread(); else straight into it.
  auto ln_rows = [&](const Tensor& ln) { return sp_ ? shard_ : ln; };
  auto spread = [&](const Tensor& ln, TpSite site) {
    tp_->column_parallel_input_forward(shard_, ln, N, site, l);
  };
  // Row-parallel matmul partial sums -> all-reduce (SP: reduce-scatter into full_b_, free in the
  // forward) -> bias. The residual add follows, fused with the next LayerNorm.
  auto reduce = [&](const Tensor& partial, const std::string& bias, TpSite site) {
    const Tensor reduced =
        tp_->row_parallel_output_forward(partial, full_b_.slice(0, size_t(Nr) * C), N, site, l);
    if (!tp1) ops::bias_add(reduced, param(bias), Nr, C);
    return reduced;
  };

  // Attention: x2 = x + proj(attention(qkv(LN1(x)))). LN1 was done with the previous block's
  // residual add, except in a stage's first block.
  if (i == 0)
    ops::layernorm_forward(ln_rows(a.ln1), a.ln1_mean, a.ln1_rstd, x, param(h + "ln1_w"),
                           param(h + "ln1_b"), Nr, C);
  spread(a.ln1, TpSite::attn_in);
  ops::matmul_forward(a.qkv, a.ln1, param(h + "qkv_w"), param(h + "qkv_b"), N, C, 3 * Cl);
  ops::attention_forward(a.atty, a.att_saved, a.qkv, B_, T_, Cl, NH_local_);
  // With tp > 1 the row-parallel bias joins once, after the partial sums are reduced.
  ops::matmul_forward(full_a_, a.atty, param(h + "proj_w"), tp1 ? param(h + "proj_b") : Tensor{}, N,
                      Cl, C);
  Tensor r = reduce(full_a_, h + "proj_b", TpSite::attn_out);
  ops::residual_layernorm_forward(a.resid2, ln_rows(a.ln2), a.ln2_mean, a.ln2_rstd, x, r,
                                  param(h + "ln2_w"), param(h + "ln2_b"), Nr, C);

  // MLP: x_out = x2 + fc2(gelu(fc(LN2(x2)))).
  spread(a.ln2, TpSite::mlp_in);
  ops::matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, param(h + "fc_w"), param(h + "fc_b"), N, C,
                           4 * Cl);
  ops::matmul_forward(full_a_, a.fch_gelu, param(h + "fc2_w"), tp1 ? param(h + "fc2_b") : Tensor{},
                      N, 4 * Cl, C);
  r = reduce(full_a_, h + "fc2_b", TpSite::mlp_out);
  // The next LayerNorm joins this residual add: the next block's LN1, or the head's final one.
  if (!last) {
    LayerActs& n = s.layers[i + 1];
    const std::string hn = block(l + 1);
    ops::residual_layernorm_forward(x_out, ln_rows(n.ln1), n.ln1_mean, n.ln1_rstd, a.resid2, r,
                                    param(hn + "ln1_w"), param(hn + "ln1_b"), Nr, C);
  } else if (layout_.spec().has_head) {
    ops::residual_layernorm_forward(x_out, lnf_, lnf_mean_, lnf_rstd_, a.resid2, r, param("lnf_w"),
                                    param("lnf_b"), Nr, C);
  } else {
    ops::residual_forward(x_out, a.resid2, r);
  }
}

void Gpt::backward_block(SlotActs& s, int i) {
  const int l = layout_.spec().layer_begin + i;
  const std::string h = block(l);
  LayerActs& a = s.layers[i];
  const int N = N_, Nr = Nr_, C = C_, Cl = C_local_;

  // d(residual) -> the full-row gradient of a row-parallel output (SP: all-gather rows).
  auto output_grad = [&](TpSite site) {
    return tp_->row_parallel_output_backward(dresid_, full_a_, N, site, l);
  };
  // d(matmul input) partial sums -> all-reduce (SP: reduce-scatter) -> LN backward into dresid;
  // feeder_bias_grad (may be empty) takes the column sums of the updated dresid.
  auto norm_backward = [&](const Tensor& inp, const Tensor& mean, const Tensor& rstd,
                           const char* ln_name, TpSite site, const Tensor& feeder_bias_grad) {
    const Tensor dln = tp_->column_parallel_input_backward(full_b_, shard_, N, site, l);
    ops::layernorm_backward(dresid_, grad(h + ln_name + "_w"), grad(h + ln_name + "_b"), dln, inp,
                            param(h + ln_name + "_w"), mean, rstd, Nr, C, feeder_bias_grad);
  };
  // The row-parallel layers' bias gradients (fc2, proj) are column sums of dresid as it enters
  // them; where the LayerNorm backward that wrote it can add them on the way, it does.
  const bool fused = fuses_row_parallel_bias_grads();
  const bool fc2_bias_done = fused && (size_t(i) + 1 < s.layers.size() || layout_.spec().has_head);

  // MLP: dresid = d(x_out) flows unchanged into d(x2) and into the fc2 output. The fc2 bias
  // gradient is summed over every token row, so it is complete on every tp rank.
  Tensor dout = output_grad(TpSite::mlp_out);
  ops::matmul_gelu_backward(dfch_, grad(h + "fc2_w"), fc2_bias_done ? Tensor{} : grad(h + "fc2_b"),
                            dout, a.fch_gelu, param(h + "fc2_w"), a.fch, dfch_gelu_, N, 4 * Cl, C);
  ops::matmul_backward(full_b_, grad(h + "fc_w"), grad(h + "fc_b"), dfch_, a.ln2, param(h + "fc_w"),
                       N, C, 4 * Cl);
  norm_backward(a.resid2, a.ln2_mean, a.ln2_rstd, "ln2", TpSite::mlp_in,
                fused ? grad(h + "proj_b") : Tensor{});

  // Attention: dresid = d(x2) flows into d(x) and into the projection output.
  dout = output_grad(TpSite::attn_out);
  ops::matmul_backward(datty_, grad(h + "proj_w"), fused ? Tensor{} : grad(h + "proj_b"), dout,
                       a.atty, param(h + "proj_w"), N, Cl, C);
  ops::attention_backward(dqkv_, datty_, a.qkv, a.atty, a.att_saved, attn_scratch_, B_, T_, Cl,
                          NH_local_);
  ops::matmul_backward(full_b_, grad(h + "qkv_w"), grad(h + "qkv_b"), dqkv_, a.ln1,
                       param(h + "qkv_w"), N, C, 3 * Cl);
  // dresid now enters the previous block's fc2 (on this stage: else the previous stage's own
  // backward sums it).
  norm_backward(a.resid, a.ln1_mean, a.ln1_rstd, "ln1", TpSite::attn_in,
                fused && i > 0 ? grad(block(l - 1) + "fc2_b") : Tensor{});
}

// Final LayerNorm, tied head (vocab-parallel logits), vocab-parallel cross-entropy: the logits
// are never gathered; only per-row max, sum-exp and target logit are reduced over tp.
void Gpt::forward_head(SlotActs& s, float dloss) {
  const ParamInfo& wte = layout_.get("wte");
  const int vocab_start = tp_->rank() * V_local_;
  if (s.layers.empty())  // else the last block's residual add did it
    ops::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, s.resid_final, param("lnf_w"),
                           param("lnf_b"), Nr_, C_);
  tp_->column_parallel_input_forward(lnf_, lnf_full_, N_, TpSite::head_in, -1);
  ops::matmul_forward(logits_, lnf_full_, param(wte), Tensor{}, N_, C_, V_local_);
  dlogits_owner_ = nullptr;
  if (tp_->size() == 1) {
    // The whole vocabulary here: loss and, when a backward follows, dlogits in one pass.
    ops::fused_classifier(logits_, losses_, s.targets, dloss, N_, V_local_, wte.valid_rows, ce_max_,
                          ce_sumexp_, ce_target_);
    if (dloss != 0.f) {
      dlogits_owner_ = &s;
      dlogits_scale_ = dloss;
    }
  } else {
    ops::crossentropy_row_max(ce_max_, logits_, N_, V_local_, wte.valid_rows);
    tp_->all_reduce_max(ce_max_);
    ops::crossentropy_sumexp_target(ce_sumexp_, ce_target_, logits_, ce_max_, s.targets, N_,
                                    V_local_, wte.valid_rows, vocab_start);
    tp_->all_reduce_sum(ce_sumexp_);
    tp_->all_reduce_sum(ce_target_);
    ops::crossentropy_loss(losses_, ce_max_, ce_sumexp_, ce_target_, N_);
  }

  ops::add_sum(loss_sum_, losses_);  // read by take_loss_sum, once a step
}

void Gpt::backward_head(SlotActs& s, float dloss) {
  const ParamInfo& wte = layout_.get("wte");
  const int vocab_start = tp_->rank() * V_local_;
  // Cross-entropy writes dlogits over the logits (the fused classifier may have done so in the
  // forward); the head's backward gives d(lnf) and d(wte).
  if (tp_->size() == 1) {
    if (dlogits_owner_ == &s) {
      TACO_CHECK(dlogits_scale_ == dloss, "backward_stage: dloss differs from forward_stage's");
    } else {  // the forward ran without dloss: its logits are intact
      ops::fused_classifier(logits_, losses_, s.targets, dloss, N_, V_local_, wte.valid_rows,
                            ce_max_, ce_sumexp_, ce_target_);
    }
    dlogits_owner_ = nullptr;
  } else {
    ops::crossentropy_backward(logits_, ce_max_, ce_sumexp_, s.targets, dloss, N_, V_local_,
                               wte.valid_rows, vocab_start);
  }
  ops::matmul_backward(full_b_, grad(wte), Tensor{}, logits_, lnf_full_, param(wte), N_, C_,
                       V_local_);
  const Tensor dlnf = tp_->column_parallel_input_backward(full_b_, shard_, N_, TpSite::head_in, -1);
  ops::zero(dresid_);
  // dresid now enters the stage's last block's fc2 (backward_block leaves that bias to us).
  const int last_layer = layout_.spec().layer_end - 1;
  const bool feeds_fc2 = fuses_row_parallel_bias_grads() && !s.layers.empty();
  ops::layernorm_backward(dresid_, grad("lnf_w"), grad("lnf_b"), dlnf, s.resid_final,
                          param("lnf_w"), lnf_mean_, lnf_rstd_, Nr_, C_,
                          feeds_fc2 ? grad(block(last_layer) + "fc2_b") : Tensor{});
}

}  // namespace taco
