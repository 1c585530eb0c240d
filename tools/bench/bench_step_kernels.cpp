// taco-bench step --per-kernel: where the time of one training step goes.
//
// Every op family the model calls (model/gpt.cpp, through model/ops.h) is timed alone with CUDA
// events on one transformer block's worth of buffers with the step's shapes (N = B*T rows,
// C = d_model), and multiplied by its calls per step (L blocks: 2L+1 LayerNorms, L of each
// matmul, ...). The optimizer pieces, and the whole forward and backward, are timed on the
// model itself, so the table shows both where the time goes and what lies between the ops
// (launch gaps, host copies and synchronizations). Last, alternatives the model does not call
// (fused kernels of kernels/cuda it does not use yet, and the GEMMs with separate kernels in
// place of their cuBLASLt epilogues) are timed on the same buffers, with the time each would save.
#if TACO_HAVE_CUDA

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "model/ops.h"
#include "tools/bench/bench_step.h"

namespace taco::bench::step_detail {
namespace {

// Device buffers planned by name into one arena, bound on allocate().
class Buffers {
 public:
  void want(Tensor& t, const std::string& name, DType dtype, size_t numel) {
    binds_.emplace_back(&t, arena_.reserve(name, dtype, numel));
  }
  void allocate() {
    arena_.allocate();
    for (auto& [t, handle] : binds_) *t = arena_.get(handle);
  }

 private:
  Arena arena_{DeviceKind::cuda};
  std::vector<std::pair<Tensor*, size_t>> binds_;
};

bf16* bf(const Tensor& t) { return t.as<bf16>(); }

}  // namespace

std::vector<KernelRow> time_kernels(StepRunner& runner, int reps) {
  const GptDims& d = runner.dims();
  const Shape& s = runner.shape();
  const int B = s.batch, T = d.seq_len, C = d.d_model, NH = d.n_head, L = d.n_layer;
  const int N = B * T, Vp = d.padded_vocab, V = d.vocab_size;
  const double n = N, c = C, vp = Vp, t = T, bytes = 2;  // bf16
  const DeviceKind dev = DeviceKind::cuda;

  // One block's parameters (and the embeddings) from the same init as the model.
  const GptDims d1 = GptDims::make(1, NH, C, T, V, 1);
  const ParamLayout layout(d1, LayoutSpec{1, 0, 0, 1, true, true});
  Tensor params, grads, staging, tokens, targets;
  Tensor x, x2, ln, mean, rstd, qkv, atty, lse, proj_out, fch, fch_gelu, logits;
  Tensor ce_max, ce_sumexp, ce_target, losses, dx, dln, dqkv, datty, dfch, scratch;
  Buffers buf;
  buf.want(params, "params", DType::bf16, layout.total());
  buf.want(grads, "grads", DType::bf16, layout.total());
  buf.want(staging, "staging", DType::f32, layout.total());
  buf.want(tokens, "tokens", DType::i32, N);
  buf.want(targets, "targets", DType::i32, N);
  for (Tensor* a : {&x, &x2, &ln, &proj_out, &dx, &dln, &atty, &datty})
    buf.want(*a, "act", DType::bf16, size_t(N) * C);
  for (Tensor* a : {&mean, &rstd, &ce_max, &ce_sumexp, &ce_target, &losses})
    buf.want(*a, "row", DType::f32, N);
  for (Tensor* a : {&qkv, &dqkv}) buf.want(*a, "qkv", DType::bf16, size_t(N) * 3 * C);
  for (Tensor* a : {&fch, &fch_gelu, &dfch}) buf.want(*a, "fch", DType::bf16, size_t(N) * 4 * C);
  buf.want(lse, "lse", DType::f32, ops::attention_saved_numel(dev, B, T, NH));
  buf.want(logits, "logits", DType::bf16, size_t(N) * Vp);
  buf.want(scratch, "attn_scratch", DType::u8,
           ops::attention_backward_scratch_bytes(dev, B, T, C, NH));
  buf.allocate();

  std::vector<float> init(layout.total());
  init_params_gpt2(layout, 1234, init.data());
  device_copy(staging.data, init.data(), init.size() * sizeof(float), dev, DeviceKind::cpu);
  cuda::convert_f32_to_bf16(bf(params), staging.as<float>(), layout.total(), nullptr);
  std::vector<int32_t> ids(N);
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int32_t> pick(0, V - 1);
  for (auto& id : ids) id = pick(rng);
  device_copy(tokens.data, ids.data(), N * sizeof(int32_t), dev, DeviceKind::cpu);
  for (auto& id : ids) id = pick(rng);
  device_copy(targets.data, ids.data(), N * sizeof(int32_t), dev, DeviceKind::cpu);

  auto P = [&](const std::string& name) {
    const ParamInfo& p = layout.get(name);
    return params.slice(p.offset, p.numel());
  };
  auto G = [&](const std::string& name) {
    const ParamInfo& p = layout.get(name);
    return grads.slice(p.offset, p.numel());
  };
  const Tensor wte = P("wte"), wpe = P("wpe"), ln_w = P("h0.ln1_w"), ln_b = P("h0.ln1_b");
  const Tensor qkv_w = P("h0.qkv_w"), qkv_b = P("h0.qkv_b"), proj_w = P("h0.proj_w");
  const Tensor proj_b = P("h0.proj_b"), fc_w = P("h0.fc_w"), fc_b = P("h0.fc_b");
  const Tensor fc2_w = P("h0.fc2_w"), fc2_b = P("h0.fc2_b");
  const float dloss = float(1.0 / N);

  std::vector<KernelRow> rows;
  auto add = [&](const char* phase, const char* op, int calls, double flops, double moved,
                 const std::function<void()>& f, const char* replaces = "") {
    rows.push_back({phase, op, calls, time_on_device(reps, f), flops, moved, replaces});
  };
  auto gemm = [&](double ic, double oc) { return 2 * n * ic * oc; };
  const double attn_fwd = 2 * B * t * t * c;  // causal half of QK^T and PV

  // Forward, in the model's order; each op also leaves realistic inputs for the next. Each
  // residual add runs fused with the LayerNorm after it (LN2, the next block's LN1, the final
  // LN); only a stage's first LN1 runs alone.
  add("forward", "embedding forward", 1, 0, bytes * (5 * n * c + t * c), [&] {
    ops::token_embedding_forward(x, tokens, wte, N, C, 0, V);
    ops::position_embedding_forward(x, wpe, B, T, C);
  });
  add("forward", "layernorm forward", 1, 0, bytes * 2 * n * c,
      [&] { ops::layernorm_forward(ln, mean, rstd, x, ln_w, ln_b, N, C); });
  add("forward", "matmul qkv forward", L, gemm(c, 3 * c), 0,
      [&] { ops::matmul_forward(qkv, ln, qkv_w, qkv_b, N, C, 3 * C); });
  add("forward", "attention forward", L, attn_fwd, 0,
      [&] { ops::attention_forward(atty, lse, qkv, B, T, C, NH); });
  add("forward", "matmul proj forward", L, gemm(c, c), 0,
      [&] { ops::matmul_forward(proj_out, atty, proj_w, proj_b, N, C, C); });
  add("forward", "residual + layernorm forward", 2 * L, 0, bytes * 4 * n * c,
      [&] { ops::residual_layernorm_forward(x2, ln, mean, rstd, x, proj_out, ln_w, ln_b, N, C); });
  add("forward", "matmul fc + GELU forward", L, gemm(c, 4 * c), 0,
      [&] { ops::matmul_gelu_forward(fch_gelu, fch, ln, fc_w, fc_b, N, C, 4 * C); });
  add("forward", "matmul fc2 forward", L, gemm(4 * c, c), 0,
      [&] { ops::matmul_forward(proj_out, fch_gelu, fc2_w, fc2_b, N, 4 * C, C); });
  add("forward", "matmul lm head forward", 1, gemm(c, vp), 0,
      [&] { ops::matmul_forward(logits, ln, wte, Tensor{}, N, C, Vp); });
  // Loss and dlogits in one pass; on fresh logits each time (the pass overwrites them).
  add("forward", "fused classifier (loss + dlogits)", 1, 0, bytes * 3 * n * vp, [&] {
    ops::fused_classifier(logits, losses, targets, dloss, N, Vp, V, ce_max, ce_sumexp, ce_target);
  });

  // Backward, in the model's order. dx stands for the residual-stream gradient.
  ops::copy(dx, x);
  add("backward", "matmul lm head backward", 1, 2 * gemm(c, vp), 0,
      [&] { ops::matmul_backward(dln, G("wte"), Tensor{}, logits, ln, wte, N, C, Vp); });
  // As the model runs them: each LayerNorm backward but one also sums its dresid columns into
  // the fc2 or proj bias gradient, which the matmul backward of those two then leaves out.
  add("backward", "layernorm backward (+ bias grad)", 2 * L + 1, 0, bytes * 4 * n * c, [&] {
    ops::layernorm_backward(dx, G("h0.ln1_w"), G("h0.ln1_b"), dln, x, ln_w, mean, rstd, N, C,
                            G("h0.proj_b"));
  });
  add("backward", "matmul fc2 + dGELU backward", L, 2 * gemm(4 * c, c), 0, [&] {
    ops::matmul_gelu_backward(dfch, G("h0.fc2_w"), Tensor{}, dx, fch_gelu, fc2_w, fch, Tensor{}, N,
                              4 * C, C);
  });
  add("backward", "matmul fc backward", L, 2 * gemm(c, 4 * c), 0,
      [&] { ops::matmul_backward(dln, G("h0.fc_w"), G("h0.fc_b"), dfch, ln, fc_w, N, C, 4 * C); });
  add("backward", "matmul proj backward", L, 2 * gemm(c, c), 0,
      [&] { ops::matmul_backward(datty, G("h0.proj_w"), Tensor{}, dx, atty, proj_w, N, C, C); });
  add("backward", "attention backward", L, 2.5 * attn_fwd, 0,
      [&] { ops::attention_backward(dqkv, datty, qkv, atty, lse, scratch, B, T, C, NH); });
  add("backward", "matmul qkv backward", L, 2 * gemm(c, 3 * c), 0, [&] {
    ops::matmul_backward(dln, G("h0.qkv_w"), G("h0.qkv_b"), dqkv, ln, qkv_w, N, C, 3 * C);
  });
  add("backward", "embedding backward", 1, 0, bytes * (4 * n * c + 2 * t * c), [&] {
    ops::position_embedding_backward(G("wpe"), dx, B, T, C);
    ops::token_embedding_backward(G("wte"), dx, tokens, N, C, 0, V);
  });

  // Optimizer pieces and the whole forward / backward, on the model itself.
  const double total_params = double(runner.layout().total());
  const double lr = s.lr;
  add("optimizer", "zero grads", 1, 0, bytes * total_params, [&] { runner.zero_grads(); });
  add("optimizer", "grad norm (sum of squares, to host)", 1, 0, bytes * total_params,
      [&] { runner.grad_norm(); });
  add("optimizer", "AdamW (fp32 master, bf16 params)", 1, 0, 28 * total_params,
      [&] { runner.update(1000, lr, 1.0); });
  const double fwd = time_on_device(reps, [&] { runner.forward(); });
  const double fwd_bwd = time_on_device(reps, [&] {
    runner.forward();
    runner.backward();
  });
  const double opt = time_on_device(reps, [&] {
    runner.zero_grads();
    runner.update(1000, lr, runner.grad_norm());
  });
  rows.push_back({"measured", "forward", 1, fwd, 0, 0, ""});
  rows.push_back({"measured", "backward", 1, fwd_bwd - fwd, 0, 0, ""});
  rows.push_back({"measured", "optimizer", 1, opt, 0, 0, ""});

  // Fused kernels of kernels/cuda that model/gpt.cpp does not call yet.
  add(
      "fused", "embedding_forward with wpe", 1, 0, bytes * (3 * n * c + t * c),
      [&] {
        cuda::embedding_forward(bf(x), tokens.as<int32_t>(), bf(wte), bf(wpe), B, T, C, 0, V,
                                nullptr);
      },
      "|embedding forward|");
  // The cuBLASLt epilogues (GELU with its pre-activation as aux output, dGELU) against the same
  // GEMMs with separate kernels for those parts.
  cuda::matmul_set_fused_epilogues(false);
  add(
      "fused", "fc, GELU by its own kernel", L, 0, 0,
      [&] { ops::matmul_gelu_forward(fch_gelu, fch, ln, fc_w, fc_b, N, C, 4 * C); },
      "|matmul fc + GELU forward|");
  add(
      "fused", "fc2 backward, dGELU by its own kernel", L, 0, 0,
      [&] {
        ops::matmul_gelu_backward(dfch, G("h0.fc2_w"), Tensor{}, dx, fch_gelu, fc2_w, fch, Tensor{},
                                  N, 4 * C, C);
      },
      "|matmul fc2 + dGELU backward|");
  cuda::matmul_set_fused_epilogues(true);
  // cuBLASLt's bias-gradient epilogue (BGRADB) against our column-sum kernel.
  cuda::matmul_set_bias_grad_epilogue(true);
  add(
      "fused", "fc backward, BGRADB epilogue", L, 0, 0,
      [&] { ops::matmul_backward(dln, G("h0.fc_w"), G("h0.fc_b"), dfch, ln, fc_w, N, C, 4 * C); },
      "|matmul fc backward|");
  add(
      "fused", "qkv backward, BGRADB epilogue", L, 0, 0,
      [&] {
        ops::matmul_backward(dln, G("h0.qkv_w"), G("h0.qkv_b"), dqkv, ln, qkv_w, N, C, 3 * C);
      },
      "|matmul qkv backward|");
  cuda::matmul_set_bias_grad_epilogue(false);
  return rows;
}

}  // namespace taco::bench::step_detail

#endif  // TACO_HAVE_CUDA
