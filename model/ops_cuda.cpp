// CUDA side of model/ops.h: each op checks the views (device, dtype) and calls the bf16 kernel of
// kernels/cuda on the legacy default stream, so it is ordered with the blocking device_copy()
// calls the model makes. The kernels' semantics (WRITE for activation gradients, ADD for
// parameter gradients and the residual stream) are those of model/ops.h; where a kernel does two
// things at once (embedding_backward: dwte and dwpe), the op passes nullptr for the other.
// In a build without CUDA every op throws (no tensor can live on a GPU there).
#include "model/ops_cuda.h"

#include <string>

#include "kernels/check.h"

#if TACO_HAVE_CUDA

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "engine/runtime/cuda_check.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gradnorm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace taco::ops::cuda_ops {

namespace {

constexpr Stream kStream = nullptr;  // the legacy default stream

// The element pointer of a device view of `dtype`; nullptr for an empty view (optional inputs).
template <class T>
T* typed(const Tensor& t, DType dtype, const char* op, const char* name) {
  if (t.empty()) return nullptr;
  if (t.device != DeviceKind::cuda || t.dtype != dtype) {
    fail_status("taco", op, 0,
                std::string(name) + " must be a CUDA " + dtype_name(dtype) + " tensor, got " +
                    dtype_name(t.dtype) + " on " + (t.device == DeviceKind::cuda ? "cuda" : "cpu"),
                __FILE__, __LINE__);
  }
  return static_cast<T*>(t.data);
}

bf16* bf(const Tensor& t, const char* op, const char* name) {
  return typed<bf16>(t, DType::bf16, op, name);
}
float* f32(const Tensor& t, const char* op, const char* name) {
  return typed<float>(t, DType::f32, op, name);
}
const int32_t* i32(const Tensor& t, const char* op, const char* name) {
  return typed<const int32_t>(t, DType::i32, op, name);
}

// One double in device memory per device for sum_of_squares, allocated on first use and kept.
double* norm_slot() {
  static std::mutex mutex;
  static std::map<int, double*> slots;
  int device = 0;
  TACO_CHECK_CUDA(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  double*& slot = slots[device];
  if (!slot) TACO_CHECK_CUDA(cudaMalloc(&slot, sizeof(double)));
  return slot;
}

}  // namespace

size_t attention_backward_scratch_bytes(int B, int T, int C, int NH) {
  return cuda::attention_backward_scratch_bytes(B, T, C, NH);
}

std::string attention_engine_description(int B, int T, int C, int NH) {
  const std::string forward = cuda::attention_engine_description(false, B, T, C, NH);
  const std::string backward = cuda::attention_engine_description(true, B, T, C, NH);
  if (forward == backward) return forward;
  return "forward " + forward + ", backward " + backward;
}

void zero(const Tensor& t) {
  TACO_CHECK(t.device == DeviceKind::cuda, "ops::zero: not a CUDA tensor");
  TACO_CHECK_CUDA(cudaMemsetAsync(t.data, 0, t.bytes(), kStream));
}

void copy(const Tensor& dst, const Tensor& src) {
  // Either side may be host memory; cudaMemcpy orders itself with the default stream.
  TACO_CHECK_CUDA(cudaMemcpy(dst.data, src.data, src.bytes(), cudaMemcpyDefault));
}

void token_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, int N,
                             int C, int vocab_start, int V) {
  const char* op = "token_embedding_forward";
  // Without wpe the kernel's T only indexes positions, which it then skips: one row of N.
  cuda::embedding_forward(bf(out, op, "out"), i32(tokens, op, "tokens"), bf(wte, op, "wte"),
                          nullptr, 1, N, C, vocab_start, V, kStream);
}

void token_embedding_backward(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int N,
                              int C, int vocab_start, int V) {
  const char* op = "token_embedding_backward";
  cuda::embedding_backward(bf(dwte, op, "dwte"), nullptr, bf(dout, op, "dout"),
                           i32(tokens, op, "tokens"), 1, N, C, vocab_start, V, kStream);
}

void position_embedding_forward(const Tensor& out, const Tensor& wpe, int B, int T, int C) {
  const char* op = "position_embedding_forward";
  cuda::position_embedding_forward(bf(out, op, "out"), bf(wpe, op, "wpe"), B, T, C, kStream);
}

void position_embedding_backward(const Tensor& dwpe, const Tensor& dout, int B, int T, int C) {
  const char* op = "position_embedding_backward";
  cuda::embedding_backward(nullptr, bf(dwpe, op, "dwpe"), bf(dout, op, "dout"), nullptr, B, T, C, 0,
                           0, kStream);
}

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, int N, int C) {
  const char* op = "layernorm_forward";
  cuda::layernorm_forward(bf(out, op, "out"), f32(mean, op, "mean"), f32(rstd, op, "rstd"),
                          bf(inp, op, "inp"), bf(weight, op, "weight"), bf(bias, op, "bias"), N, C,
                          kStream);
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, int N, int C,
                        const Tensor& dinp_column_sums) {
  const char* op = "layernorm_backward";
  cuda::layernorm_backward(bf(dinp, op, "dinp"), bf(dweight, op, "dweight"), bf(dbias, op, "dbias"),
                           bf(dout, op, "dout"), bf(inp, op, "inp"), bf(weight, op, "weight"),
                           f32(mean, op, "mean"), f32(rstd, op, "rstd"), N, C, kStream,
                           bf(dinp_column_sums, op, "dinp_column_sums"));
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    int N, int IC, int OC) {
  const char* op = "matmul_forward";
  cuda::matmul_forward(bf(out, op, "out"), bf(inp, op, "inp"), bf(weight, op, "weight"),
                       bf(bias, op, "bias"), N, IC, OC, /*pre_gelu=*/nullptr, kStream);
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, int N, int IC,
                     int OC) {
  const char* op = "matmul_backward";
  cuda::matmul_backward(bf(dinp, op, "dinp"), bf(dweight, op, "dweight"), bf(dbias, op, "dbias"),
                        bf(dout, op, "dout"), bf(inp, op, "inp"), bf(weight, op, "weight"), N, IC,
                        OC, /*pre_gelu=*/nullptr, kStream);
}

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int B, int T,
                       int C, int NH) {
  const char* op = "attention_forward";
  cuda::attention_forward(bf(out, op, "out"), f32(saved, op, "lse"), bf(qkv, op, "qkv"), B, T, C,
                          NH, kStream);
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& saved, const Tensor& scratch, int B, int T,
                        int C, int NH) {
  const char* op = "attention_backward";
  TACO_CHECK(scratch.bytes() >= cuda::attention_backward_scratch_bytes(B, T, C, NH),
             "attention_backward: scratch smaller than attention_backward_scratch_bytes");
  cuda::attention_backward(bf(dqkv, op, "dqkv"), bf(dout, op, "dout"), bf(qkv, op, "qkv"),
                           bf(out, op, "out"), f32(saved, op, "lse"), B, T, C, NH, scratch.data,
                           kStream);
}

void matmul_gelu_forward(const Tensor& out, const Tensor& pre_gelu, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, int N, int IC, int OC) {
  const char* op = "matmul_gelu_forward";
  cuda::matmul_forward(bf(out, op, "out"), bf(inp, op, "inp"), bf(weight, op, "weight"),
                       bf(bias, op, "bias"), N, IC, OC, bf(pre_gelu, op, "pre_gelu"), kStream);
}

void matmul_gelu_backward(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                          const Tensor& pre_gelu, int N, int IC, int OC) {
  const char* op = "matmul_gelu_backward";
  cuda::matmul_backward(bf(dpre, op, "dpre"), bf(dweight, op, "dweight"), bf(dbias, op, "dbias"),
                        bf(dout, op, "dout"), bf(inp, op, "inp"), bf(weight, op, "weight"), N, IC,
                        OC, bf(pre_gelu, op, "pre_gelu"), kStream);
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  cuda::gelu_forward(bf(out, op, "out"), bf(inp, op, "inp"), out.numel, kStream);
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  cuda::gelu_backward(bf(dinp, op, "dinp"), bf(inp, op, "inp"), bf(dout, op, "dout"), dinp.numel,
                      kStream);
}

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "residual_forward";
  cuda::residual_forward(bf(out, op, "out"), bf(a, op, "a"), bf(b, op, "b"), out.numel, kStream);
}

void residual_layernorm_forward(const Tensor& residual_out, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& a, const Tensor& b,
                                const Tensor& weight, const Tensor& bias, int N, int C) {
  const char* op = "residual_layernorm_forward";
  cuda::fused_residual_layernorm_forward(bf(residual_out, op, "residual_out"), bf(out, op, "out"),
                                         f32(mean, op, "mean"), f32(rstd, op, "rstd"),
                                         bf(a, op, "a"), bf(b, op, "b"), bf(weight, op, "weight"),
                                         bf(bias, op, "bias"), N, C, kStream);
}

void add_inplace(const Tensor& y, const Tensor& x) {
  const char* op = "add_inplace";
  cuda::add_inplace(bf(y, op, "y"), bf(x, op, "x"), y.numel, kStream);
}

void bias_add(const Tensor& out, const Tensor& bias, int N, int C) {
  const char* op = "bias_add";
  cuda::bias_add(bf(out, op, "out"), bf(bias, op, "bias"), N, C, kStream);
}

void crossentropy_row_max(const Tensor& row_max, const Tensor& logits, int N, int V, int V_valid) {
  const char* op = "crossentropy_row_max";
  cuda::crossentropy_row_max(f32(row_max, op, "row_max"), bf(logits, op, "logits"), N, V, V_valid,
                             kStream);
}

void crossentropy_sumexp_target(const Tensor& sumexp, const Tensor& target_logit,
                                const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                                int N, int V, int V_valid, int vocab_start) {
  const char* op = "crossentropy_sumexp_target";
  cuda::crossentropy_sumexp_target(f32(sumexp, op, "sumexp"), f32(target_logit, op, "target_logit"),
                                   bf(logits, op, "logits"), f32(row_max, op, "row_max"),
                                   i32(targets, op, "targets"), N, V, V_valid, vocab_start,
                                   kStream);
}

void crossentropy_loss(const Tensor& loss, const Tensor& row_max, const Tensor& sumexp,
                       const Tensor& target_logit, int N) {
  const char* op = "crossentropy_loss";
  cuda::crossentropy_loss(f32(loss, op, "loss"), f32(row_max, op, "row_max"),
                          f32(sumexp, op, "sumexp"), f32(target_logit, op, "target_logit"), N,
                          kStream);
}

void crossentropy_backward(const Tensor& logits, const Tensor& row_max, const Tensor& sumexp,
                           const Tensor& targets, float dloss, int N, int V, int V_valid,
                           int vocab_start) {
  const char* op = "crossentropy_backward";
  bf16* l = bf(logits, op, "logits");
  cuda::crossentropy_backward(l, l, f32(row_max, op, "row_max"), f32(sumexp, op, "sumexp"),
                              i32(targets, op, "targets"), dloss, N, V, V_valid, vocab_start,
                              kStream);
}

void fused_classifier(const Tensor& logits, const Tensor& loss, const Tensor& targets, float dloss,
                      int N, int V, int V_valid) {
  const char* op = "fused_classifier";
  cuda::fused_classifier(bf(logits, op, "logits"), f32(loss, op, "loss"),
                         i32(targets, op, "targets"), dloss, N, V, V_valid, dloss != 0.f, kStream);
}

void add_sum(const Tensor& acc, const Tensor& x) {
  cuda::sum(acc.as<double>(), f32(x, "add_sum", "x"), x.numel, /*accumulate=*/true, kStream);
}

double sum_of_squares(const Tensor& x) { return sum_of_squares(std::vector<Tensor>{x}); }

double sum_of_squares(const std::vector<Tensor>& pieces) {
  double* slot = norm_slot();
  TACO_CHECK_CUDA(cudaMemsetAsync(slot, 0, sizeof(double), kStream));
  for (const Tensor& x : pieces)
    cuda::sum_of_squares(slot, bf(x, "sum_of_squares", "x"), x.numel, /*accumulate=*/true, kStream);
  double result = 0;
  TACO_CHECK_CUDA(cudaMemcpy(&result, slot, sizeof(double), cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace taco::ops::cuda_ops

#else  // !TACO_HAVE_CUDA

namespace taco::ops::cuda_ops {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw UserError(std::string("CUDA op ") + op +
                  ": this build has no CUDA backend; rebuild with CUDA or set train.device: cpu");
}
}  // namespace

size_t attention_backward_scratch_bytes(int, int, int, int) { no_cuda("attention_backward"); }
std::string attention_engine_description(int, int, int, int) { no_cuda("attention_forward"); }
void zero(const Tensor&) { no_cuda("zero"); }
void copy(const Tensor&, const Tensor&) { no_cuda("copy"); }
void token_embedding_forward(const Tensor&, const Tensor&, const Tensor&, int, int, int, int) {
  no_cuda("token_embedding_forward");
}
void token_embedding_backward(const Tensor&, const Tensor&, const Tensor&, int, int, int, int) {
  no_cuda("token_embedding_backward");
}
void position_embedding_forward(const Tensor&, const Tensor&, int, int, int) {
  no_cuda("position_embedding_forward");
}
void position_embedding_backward(const Tensor&, const Tensor&, int, int, int) {
  no_cuda("position_embedding_backward");
}
void layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, int, int) {
  no_cuda("layernorm_forward");
}
void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, int, int, const Tensor&) {
  no_cuda("layernorm_backward");
}
void matmul_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int, int, int) {
  no_cuda("matmul_forward");
}
void matmul_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, int, int, int) {
  no_cuda("matmul_backward");
}
void attention_forward(const Tensor&, const Tensor&, const Tensor&, int, int, int, int) {
  no_cuda("attention_forward");
}
void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, int, int, int, int) {
  no_cuda("attention_backward");
}
void matmul_gelu_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         int, int, int) {
  no_cuda("matmul_gelu_forward");
}
void matmul_gelu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, int, int, int) {
  no_cuda("matmul_gelu_backward");
}
void gelu_forward(const Tensor&, const Tensor&) { no_cuda("gelu_forward"); }
void gelu_backward(const Tensor&, const Tensor&, const Tensor&) { no_cuda("gelu_backward"); }
void residual_forward(const Tensor&, const Tensor&, const Tensor&) { no_cuda("residual_forward"); }
void residual_layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                                int) {
  no_cuda("residual_layernorm_forward");
}
void add_inplace(const Tensor&, const Tensor&) { no_cuda("add_inplace"); }
void bias_add(const Tensor&, const Tensor&, int, int) { no_cuda("bias_add"); }
void crossentropy_row_max(const Tensor&, const Tensor&, int, int, int) {
  no_cuda("crossentropy_row_max");
}
void crossentropy_sumexp_target(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, int, int, int, int) {
  no_cuda("crossentropy_sumexp_target");
}
void crossentropy_loss(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int) {
  no_cuda("crossentropy_loss");
}
void crossentropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, int,
                           int, int, int) {
  no_cuda("crossentropy_backward");
}
void fused_classifier(const Tensor&, const Tensor&, const Tensor&, float, int, int, int) {
  no_cuda("fused_classifier");
}
void add_sum(const Tensor&, const Tensor&) { no_cuda("add_sum"); }
double sum_of_squares(const Tensor&) { no_cuda("sum_of_squares"); }
double sum_of_squares(const std::vector<Tensor>&) { no_cuda("sum_of_squares"); }

}  // namespace taco::ops::cuda_ops

#endif  // TACO_HAVE_CUDA
