#include "model/ops.h"

#include <cstring>
#include <string>

#include "kernels/attention.h"
#include "kernels/check.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gradnorm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "model/ops_cuda.h"

namespace taco::ops {

namespace {

[[noreturn]] void unsupported(const char* op, const Tensor& t) {
  fail_status("taco", op, 0,
              std::string("no kernel for dtype ") + dtype_name(t.dtype) + " on " +
                  (t.device == DeviceKind::cpu ? "cpu" : "cuda"),
              __FILE__, __LINE__);
}

template <class Real>
Real* ptr(const Tensor& t) {
  return static_cast<Real*>(t.data);  // nullptr for an empty view
}

const int32_t* ids(const Tensor& t) { return static_cast<const int32_t*>(t.data); }

bool on_gpu(const Tensor& t) { return t.device == DeviceKind::cuda; }

}  // namespace

// Runs `body` with `Real` bound to the CPU element type of `t` (fp32 or fp64).
#define TACO_CPU_REAL(op, t, ...)         \
  do {                                    \
    if ((t).dtype == DType::f32) {        \
      using Real = float;                 \
      __VA_ARGS__;                        \
    } else if ((t).dtype == DType::f64) { \
      using Real = double;                \
      __VA_ARGS__;                        \
    } else {                              \
      unsupported(op, t);                 \
    }                                     \
  } while (0)

void zero(const Tensor& t) {
  if (t.empty()) return;
  if (on_gpu(t)) return cuda_ops::zero(t);
  std::memset(t.data, 0, t.bytes());
}

void copy(const Tensor& dst, const Tensor& src) {
  TACO_CHECK(dst.bytes() == src.bytes(), "ops::copy size mismatch");
  if (on_gpu(dst) || on_gpu(src)) return cuda_ops::copy(dst, src);
  std::memcpy(dst.data, src.data, src.bytes());
}

void token_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, int N,
                             int C, int vocab_start, int V) {
  if (on_gpu(out)) return cuda_ops::token_embedding_forward(out, tokens, wte, N, C, vocab_start, V);
  TACO_CPU_REAL("token_embedding_forward", out,
                cpu::token_embedding_forward(ptr<Real>(out), ids(tokens), ptr<Real>(wte), N, C,
                                             vocab_start, V));
}

void token_embedding_backward(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int N,
                              int C, int vocab_start, int V) {
  if (on_gpu(dwte))
    return cuda_ops::token_embedding_backward(dwte, dout, tokens, N, C, vocab_start, V);
  TACO_CPU_REAL("token_embedding_backward", dwte,
                cpu::token_embedding_backward(ptr<Real>(dwte), ptr<Real>(dout), ids(tokens), N, C,
                                              vocab_start, V));
}

void position_embedding_forward(const Tensor& out, const Tensor& wpe, int B, int T, int C) {
  if (on_gpu(out)) return cuda_ops::position_embedding_forward(out, wpe, B, T, C);
  TACO_CPU_REAL("position_embedding_forward", out,
                cpu::position_embedding_forward(ptr<Real>(out), ptr<Real>(wpe), B, T, C));
}

void position_embedding_backward(const Tensor& dwpe, const Tensor& dout, int B, int T, int C) {
  if (on_gpu(dwpe)) return cuda_ops::position_embedding_backward(dwpe, dout, B, T, C);
  TACO_CPU_REAL("position_embedding_backward", dwpe,
                cpu::position_embedding_backward(ptr<Real>(dwpe), ptr<Real>(dout), B, T, C));
}

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, int N, int C) {
  if (on_gpu(out)) return cuda_ops::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  TACO_CPU_REAL("layernorm_forward", out,
                cpu::layernorm_forward(ptr<Real>(out), ptr<Real>(mean), ptr<Real>(rstd),
                                       ptr<Real>(inp), ptr<Real>(weight), ptr<Real>(bias), N, C));
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, int N, int C,
                        const Tensor& dinp_column_sums) {
  if (on_gpu(dinp))
    return cuda_ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C,
                                        dinp_column_sums);
  TACO_CHECK(dinp_column_sums.empty(),
             "layernorm_backward: dinp_column_sums is a CUDA fusion; the CPU reference takes the "
             "bias gradient from matmul_backward");
  TACO_CPU_REAL("layernorm_backward", dinp,
                cpu::layernorm_backward(ptr<Real>(dinp), ptr<Real>(dweight), ptr<Real>(dbias),
                                        ptr<Real>(dout), ptr<Real>(inp), ptr<Real>(weight),
                                        ptr<Real>(mean), ptr<Real>(rstd), N, C));
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    int N, int IC, int OC) {
  if (on_gpu(out)) return cuda_ops::matmul_forward(out, inp, weight, bias, N, IC, OC);
  TACO_CPU_REAL("matmul_forward", out,
                cpu::matmul_forward(ptr<Real>(out), ptr<Real>(inp), ptr<Real>(weight),
                                    ptr<Real>(bias), N, IC, OC));
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, int N, int IC,
                     int OC) {
  if (on_gpu(dweight))
    return cuda_ops::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  zero(dinp);  // the CPU kernel adds; this level writes
  TACO_CPU_REAL(
      "matmul_backward", dweight,
      cpu::matmul_backward(ptr<Real>(dinp), ptr<Real>(dweight), ptr<Real>(dbias), ptr<Real>(dout),
                           ptr<Real>(inp), ptr<Real>(weight), N, IC, OC));
}

size_t attention_saved_numel(DeviceKind device, int B, int T, int NH) {
  if (device == DeviceKind::cuda) return size_t(B) * NH * T;
  return size_t(B) * NH * T * T;
}

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int B, int T,
                       int C, int NH) {
  if (on_gpu(out)) return cuda_ops::attention_forward(out, saved, qkv, B, T, C, NH);
  TACO_CPU_REAL(
      "attention_forward", out,
      cpu::attention_forward(ptr<Real>(out), ptr<Real>(saved), ptr<Real>(qkv), B, T, C, NH));
}

std::string attention_engine_description(DeviceKind device, int B, int T, int C, int NH) {
  if (device == DeviceKind::cuda) return cuda_ops::attention_engine_description(B, T, C, NH);
  return "CPU reference";
}

size_t attention_backward_scratch_bytes(DeviceKind device, int B, int T, int C, int NH) {
  if (device == DeviceKind::cuda) return cuda_ops::attention_backward_scratch_bytes(B, T, C, NH);
  return 0;
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& saved, const Tensor& scratch, int B, int T,
                        int C, int NH) {
  if (on_gpu(dqkv))
    return cuda_ops::attention_backward(dqkv, dout, qkv, out, saved, scratch, B, T, C, NH);
  zero(dqkv);
  TACO_CPU_REAL("attention_backward", dqkv,
                cpu::attention_backward(ptr<Real>(dqkv), ptr<Real>(dout), ptr<Real>(qkv),
                                        ptr<Real>(saved), B, T, C, NH));
}

void matmul_gelu_forward(const Tensor& out, const Tensor& pre_gelu, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, int N, int IC, int OC) {
  if (on_gpu(out))
    return cuda_ops::matmul_gelu_forward(out, pre_gelu, inp, weight, bias, N, IC, OC);
  matmul_forward(pre_gelu, inp, weight, bias, N, IC, OC);
  gelu_forward(out, pre_gelu);
}

bool matmul_gelu_backward_needs_scratch(DeviceKind device) { return device != DeviceKind::cuda; }

void matmul_gelu_backward(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                          const Tensor& pre_gelu, const Tensor& scratch, int N, int IC, int OC) {
  if (on_gpu(dpre))
    return cuda_ops::matmul_gelu_backward(dpre, dweight, dbias, dout, inp, weight, pre_gelu, N, IC,
                                          OC);
  TACO_CHECK(scratch.numel == size_t(N) * IC, "matmul_gelu_backward: scratch must be [N, IC]");
  matmul_backward(scratch, dweight, dbias, dout, inp, weight, N, IC, OC);
  gelu_backward(dpre, pre_gelu, scratch);
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  if (on_gpu(out)) return cuda_ops::gelu_forward(out, inp);
  TACO_CPU_REAL("gelu_forward", out, cpu::gelu_forward(ptr<Real>(out), ptr<Real>(inp), out.numel));
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  if (on_gpu(dinp)) return cuda_ops::gelu_backward(dinp, inp, dout);
  zero(dinp);
  TACO_CPU_REAL("gelu_backward", dinp,
                cpu::gelu_backward(ptr<Real>(dinp), ptr<Real>(inp), ptr<Real>(dout), dinp.numel));
}

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (on_gpu(out)) return cuda_ops::residual_forward(out, a, b);
  TACO_CPU_REAL("residual_forward", out,
                cpu::residual_forward(ptr<Real>(out), ptr<Real>(a), ptr<Real>(b), out.numel));
}

void residual_layernorm_forward(const Tensor& residual_out, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& a, const Tensor& b,
                                const Tensor& weight, const Tensor& bias, int N, int C) {
  TACO_CHECK(out.data != a.data && out.data != b.data,
             "residual_layernorm_forward: out may not alias an input");
  if (on_gpu(out))
    return cuda_ops::residual_layernorm_forward(residual_out, out, mean, rstd, a, b, weight, bias,
                                                N, C);
  residual_forward(residual_out, a, b);
  layernorm_forward(out, mean, rstd, residual_out, weight, bias, N, C);
}

void add_inplace(const Tensor& y, const Tensor& x) {
  if (on_gpu(y)) return cuda_ops::add_inplace(y, x);
  TACO_CPU_REAL("add_inplace", y, cpu::add_inplace(ptr<Real>(y), ptr<Real>(x), y.numel));
}

void bias_add(const Tensor& out, const Tensor& bias, int N, int C) {
  if (on_gpu(out)) return cuda_ops::bias_add(out, bias, N, C);
  TACO_CPU_REAL("bias_add", out, cpu::bias_add(ptr<Real>(out), ptr<Real>(bias), N, C));
}

void crossentropy_row_max(const Tensor& row_max, const Tensor& logits, int N, int V, int V_valid) {
  if (on_gpu(logits)) return cuda_ops::crossentropy_row_max(row_max, logits, N, V, V_valid);
  TACO_CPU_REAL("crossentropy_row_max", logits,
                cpu::crossentropy_row_max(ptr<Real>(row_max), ptr<Real>(logits), N, V, V_valid));
}

void crossentropy_sumexp_target(const Tensor& sumexp, const Tensor& target_logit,
                                const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                                int N, int V, int V_valid, int vocab_start) {
  if (on_gpu(logits))
    return cuda_ops::crossentropy_sumexp_target(sumexp, target_logit, logits, row_max, targets, N,
                                                V, V_valid, vocab_start);
  TACO_CPU_REAL("crossentropy_sumexp_target", logits,
                cpu::crossentropy_sumexp_target(ptr<Real>(sumexp), ptr<Real>(target_logit),
                                                ptr<Real>(logits), ptr<Real>(row_max), ids(targets),
                                                N, V, V_valid, vocab_start));
}

void crossentropy_loss(const Tensor& loss, const Tensor& row_max, const Tensor& sumexp,
                       const Tensor& target_logit, int N) {
  if (on_gpu(loss)) return cuda_ops::crossentropy_loss(loss, row_max, sumexp, target_logit, N);
  TACO_CPU_REAL("crossentropy_loss", loss,
                cpu::crossentropy_loss(ptr<Real>(loss), ptr<Real>(row_max), ptr<Real>(sumexp),
                                       ptr<Real>(target_logit), N));
}

void crossentropy_backward(const Tensor& logits, const Tensor& row_max, const Tensor& sumexp,
                           const Tensor& targets, float dloss, int N, int V, int V_valid,
                           int vocab_start) {
  if (on_gpu(logits))
    return cuda_ops::crossentropy_backward(logits, row_max, sumexp, targets, dloss, N, V, V_valid,
                                           vocab_start);
  TACO_CPU_REAL("crossentropy_backward", logits,
                cpu::crossentropy_backward(ptr<Real>(logits), ptr<Real>(logits), ptr<Real>(row_max),
                                           ptr<Real>(sumexp), ids(targets), Real(dloss), N, V,
                                           V_valid, vocab_start));
}

void fused_classifier(const Tensor& logits, const Tensor& loss, const Tensor& targets, float dloss,
                      int N, int V, int V_valid, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit) {
  if (on_gpu(logits))
    return cuda_ops::fused_classifier(logits, loss, targets, dloss, N, V, V_valid);
  crossentropy_row_max(row_max, logits, N, V, V_valid);
  crossentropy_sumexp_target(sumexp, target_logit, logits, row_max, targets, N, V, V_valid, 0);
  crossentropy_loss(loss, row_max, sumexp, target_logit, N);
  if (dloss != 0.f)
    crossentropy_backward(logits, row_max, sumexp, targets, dloss, N, V, V_valid, 0);
}

void add_sum(const Tensor& acc, const Tensor& x) {
  TACO_CHECK(acc.dtype == DType::f64 && acc.numel == 1 && acc.device == x.device,
             "add_sum: acc must be one f64 element on x's device");
  if (on_gpu(x)) return cuda_ops::add_sum(acc, x);
  double s = 0;
  TACO_CPU_REAL("add_sum", x, {
    const Real* p = ptr<Real>(x);
    for (size_t i = 0; i < x.numel; ++i) s += double(p[i]);
  });
  *acc.as<double>() += s;
}

double sum_of_squares(const std::vector<Tensor>& pieces) {
  if (pieces.empty()) return 0;
  if (on_gpu(pieces[0])) return cuda_ops::sum_of_squares(pieces);
  double r = 0;
  for (const Tensor& p : pieces) r += sum_of_squares(p);
  return r;
}

double sum_of_squares(const Tensor& x) {
  if (on_gpu(x)) return cuda_ops::sum_of_squares(x);
  double r = 0;
  TACO_CPU_REAL("sum_of_squares", x, r = cpu::sum_of_squares(ptr<Real>(x), x.numel));
  return r;
}

}  // namespace taco::ops
