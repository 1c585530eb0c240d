// model/ops.h on both devices, one function per op. An op looks where its output lives: on the
// CPU it runs the fp32 (or fp64) reference of kernels/cpu; on a GPU the bf16 kernel of
// kernels/cuda, queued on ops::stream(): the legacy default stream, or a blocking stream made for
// the compute, either way ordered with the blocking device_copy() calls the model makes. Where a
// CUDA kernel does two things at once (embedding_backward: dwte and dwpe), the op passes nullptr
// for the other.
//
// Every CUDA call sits under `if constexpr (built_with_cuda())`: a CPU-only build compiles it out
// and links without the CUDA kernels. There on_gpu() refuses a CUDA tensor, the one place that
// says so for every op.
#include "model/ops.h"

#include <cstring>
#include <string>

#include "engine/runtime/memory.h"
#include "engine/runtime/step_graph.h"
#include "kernels/attention.h"
#include "kernels/check.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gradnorm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace taco::ops {

namespace {

Stream g_stream = nullptr;  // set_stream(); the legacy default stream until then

// Does `op` run on the GPU, i.e. is `device` (its output's) CUDA? A build without CUDA has no
// GPU path: a CUDA tensor is a UserError there.
bool on_gpu(DeviceKind device, const char* op) {
  if (device != DeviceKind::cuda) return false;
  if (!built_with_cuda())
    throw UserError(std::string("CUDA op ") + op +
                    ": this build has no CUDA backend; rebuild with CUDA or set train.device: cpu");
  return true;
}
bool on_gpu(const Tensor& t, const char* op) { return on_gpu(t.device, op); }

[[noreturn]] void unsupported(const char* op, const Tensor& t) {
  fail_status("taco", op, 0,
              std::string("no kernel for dtype ") + dtype_name(t.dtype) + " on " +
                  (t.device == DeviceKind::cpu ? "cpu" : "cuda"),
              __FILE__, __LINE__);
}

// CPU views: the element pointer, nullptr for an empty view.
template <class Real>
Real* ptr(const Tensor& t) {
  return static_cast<Real*>(t.data);
}

const int32_t* ids(const Tensor& t) { return static_cast<const int32_t*>(t.data); }

// CUDA views: the element pointer of a device view of `dtype`; nullptr for an empty view
// (optional inputs).
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
  if (on_gpu(t, "zero")) return device_memset_zero_async(t.data, t.bytes(), g_stream);
  std::memset(t.data, 0, t.bytes());
}

void copy(const Tensor& dst, const Tensor& src) {
  TACO_CHECK(dst.bytes() == src.bytes(), "ops::copy size mismatch");
  // Either side may be host memory; the copy orders itself with the default stream.
  if (on_gpu(dst, "copy") || on_gpu(src, "copy"))
    return device_copy(dst.data, src.data, src.bytes(), dst.device, src.device);
  std::memcpy(dst.data, src.data, src.bytes());
}

void copy_async(const Tensor& dst, const Tensor& src) {
  TACO_CHECK(dst.bytes() == src.bytes(), "ops::copy_async size mismatch");
  if (on_gpu(dst, "copy_async") || on_gpu(src, "copy_async"))
    return device_copy_async(dst.data, src.data, src.bytes(), g_stream);
  std::memcpy(dst.data, src.data, src.bytes());
}

void token_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, int N,
                             int C, int vocab_start, int V) {
  const char* op = "token_embedding_forward";
  if (on_gpu(out, op)) {
    // Without wpe the kernel's T only indexes positions, which it then skips: one row of N.
    if constexpr (built_with_cuda())
      cuda::embedding_forward(bf(out, op, "out"), i32(tokens, op, "tokens"), bf(wte, op, "wte"),
                              nullptr, 1, N, C, vocab_start, V, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out,
                cpu::token_embedding_forward(ptr<Real>(out), ids(tokens), ptr<Real>(wte), N, C,
                                             vocab_start, V));
}

void token_embedding_backward(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int N,
                              int C, int vocab_start, int V) {
  const char* op = "token_embedding_backward";
  if (on_gpu(dwte, op)) {
    if constexpr (built_with_cuda())
      cuda::embedding_backward(bf(dwte, op, "dwte"), nullptr, bf(dout, op, "dout"),
                               i32(tokens, op, "tokens"), 1, N, C, vocab_start, V, g_stream);
    return;
  }
  TACO_CPU_REAL(op, dwte,
                cpu::token_embedding_backward(ptr<Real>(dwte), ptr<Real>(dout), ids(tokens), N, C,
                                              vocab_start, V));
}

void position_embedding_forward(const Tensor& out, const Tensor& wpe, int B, int T, int C) {
  const char* op = "position_embedding_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::position_embedding_forward(bf(out, op, "out"), bf(wpe, op, "wpe"), B, T, C, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out, cpu::position_embedding_forward(ptr<Real>(out), ptr<Real>(wpe), B, T, C));
}

void position_embedding_backward(const Tensor& dwpe, const Tensor& dout, int B, int T, int C) {
  const char* op = "position_embedding_backward";
  if (on_gpu(dwpe, op)) {
    if constexpr (built_with_cuda())
      cuda::embedding_backward(nullptr, bf(dwpe, op, "dwpe"), bf(dout, op, "dout"), nullptr, B, T,
                               C, 0, 0, g_stream);
    return;
  }
  TACO_CPU_REAL(op, dwpe,
                cpu::position_embedding_backward(ptr<Real>(dwpe), ptr<Real>(dout), B, T, C));
}

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, int N, int C) {
  const char* op = "layernorm_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::layernorm_forward(bf(out, op, "out"), f32(mean, op, "mean"), f32(rstd, op, "rstd"),
                              bf(inp, op, "inp"), bf(weight, op, "weight"), bf(bias, op, "bias"), N,
                              C, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out,
                cpu::layernorm_forward(ptr<Real>(out), ptr<Real>(mean), ptr<Real>(rstd),
                                       ptr<Real>(inp), ptr<Real>(weight), ptr<Real>(bias), N, C));
}

void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, int N, int C,
                        const Tensor& dinp_column_sums) {
  const char* op = "layernorm_backward";
  if (on_gpu(dinp, op)) {
    if constexpr (built_with_cuda())
      cuda::layernorm_backward(
          bf(dinp, op, "dinp"), bf(dweight, op, "dweight"), bf(dbias, op, "dbias"),
          bf(dout, op, "dout"), bf(inp, op, "inp"), bf(weight, op, "weight"), f32(mean, op, "mean"),
          f32(rstd, op, "rstd"), N, C, g_stream, bf(dinp_column_sums, op, "dinp_column_sums"));
    return;
  }
  TACO_CHECK(dinp_column_sums.empty(),
             "layernorm_backward: dinp_column_sums is a CUDA fusion; the CPU reference takes the "
             "bias gradient from matmul_backward");
  TACO_CPU_REAL(op, dinp,
                cpu::layernorm_backward(ptr<Real>(dinp), ptr<Real>(dweight), ptr<Real>(dbias),
                                        ptr<Real>(dout), ptr<Real>(inp), ptr<Real>(weight),
                                        ptr<Real>(mean), ptr<Real>(rstd), N, C));
}

void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    int N, int IC, int OC) {
  const char* op = "matmul_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::matmul_forward(bf(out, op, "out"), bf(inp, op, "inp"), bf(weight, op, "weight"),
                           bf(bias, op, "bias"), N, IC, OC, /*pre_gelu=*/nullptr, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out,
                cpu::matmul_forward(ptr<Real>(out), ptr<Real>(inp), ptr<Real>(weight),
                                    ptr<Real>(bias), N, IC, OC));
}

void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, int N, int IC,
                     int OC) {
  const char* op = "matmul_backward";
  if (on_gpu(dweight, op)) {
    if constexpr (built_with_cuda())
      cuda::matmul_backward(bf(dinp, op, "dinp"), bf(dweight, op, "dweight"),
                            bf(dbias, op, "dbias"), bf(dout, op, "dout"), bf(inp, op, "inp"),
                            bf(weight, op, "weight"), N, IC, OC, /*pre_gelu=*/nullptr, g_stream);
    return;
  }
  zero(dinp);  // the CPU kernel adds; this level writes
  TACO_CPU_REAL(
      op, dweight,
      cpu::matmul_backward(ptr<Real>(dinp), ptr<Real>(dweight), ptr<Real>(dbias), ptr<Real>(dout),
                           ptr<Real>(inp), ptr<Real>(weight), N, IC, OC));
}

size_t attention_saved_numel(DeviceKind device, int B, int T, int NH) {
  if (device == DeviceKind::cuda) return size_t(B) * NH * T;
  return size_t(B) * NH * T * T;
}

void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int B, int T,
                       int C, int NH) {
  const char* op = "attention_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::attention_forward(bf(out, op, "out"), f32(saved, op, "lse"), bf(qkv, op, "qkv"), B, T,
                              C, NH, g_stream);
    return;
  }
  TACO_CPU_REAL(
      op, out,
      cpu::attention_forward(ptr<Real>(out), ptr<Real>(saved), ptr<Real>(qkv), B, T, C, NH));
}

std::string attention_engine_description(DeviceKind device, int B, int T, int C, int NH) {
  if (!on_gpu(device, "attention_forward")) return "CPU reference";
  std::string forward, backward;
  if constexpr (built_with_cuda()) {
    forward = cuda::attention_engine_description(false, B, T, C, NH);
    backward = cuda::attention_engine_description(true, B, T, C, NH);
  }
  if (forward == backward) return forward;
  return "forward " + forward + ", backward " + backward;
}

size_t attention_backward_scratch_bytes(DeviceKind device, int B, int T, int C, int NH) {
  if (!on_gpu(device, "attention_backward")) return 0;
  if constexpr (built_with_cuda()) return cuda::attention_backward_scratch_bytes(B, T, C, NH);
  return 0;
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& saved, const Tensor& scratch, int B, int T,
                        int C, int NH) {
  const char* op = "attention_backward";
  if (on_gpu(dqkv, op)) {
    if constexpr (built_with_cuda()) {
      TACO_CHECK(scratch.bytes() >= cuda::attention_backward_scratch_bytes(B, T, C, NH),
                 "attention_backward: scratch smaller than attention_backward_scratch_bytes");
      cuda::attention_backward(bf(dqkv, op, "dqkv"), bf(dout, op, "dout"), bf(qkv, op, "qkv"),
                               bf(out, op, "out"), f32(saved, op, "lse"), B, T, C, NH, scratch.data,
                               g_stream);
    }
    return;
  }
  zero(dqkv);
  TACO_CPU_REAL(op, dqkv,
                cpu::attention_backward(ptr<Real>(dqkv), ptr<Real>(dout), ptr<Real>(qkv),
                                        ptr<Real>(saved), B, T, C, NH));
}

void matmul_gelu_forward(const Tensor& out, const Tensor& pre_gelu, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, int N, int IC, int OC) {
  const char* op = "matmul_gelu_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::matmul_forward(bf(out, op, "out"), bf(inp, op, "inp"), bf(weight, op, "weight"),
                           bf(bias, op, "bias"), N, IC, OC, bf(pre_gelu, op, "pre_gelu"), g_stream);
    return;
  }
  matmul_forward(pre_gelu, inp, weight, bias, N, IC, OC);
  gelu_forward(out, pre_gelu);
}

bool matmul_gelu_backward_needs_scratch(DeviceKind device) { return device != DeviceKind::cuda; }

void matmul_gelu_backward(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                          const Tensor& pre_gelu, const Tensor& scratch, int N, int IC, int OC) {
  const char* op = "matmul_gelu_backward";
  if (on_gpu(dpre, op)) {
    if constexpr (built_with_cuda())
      cuda::matmul_backward(bf(dpre, op, "dpre"), bf(dweight, op, "dweight"),
                            bf(dbias, op, "dbias"), bf(dout, op, "dout"), bf(inp, op, "inp"),
                            bf(weight, op, "weight"), N, IC, OC, bf(pre_gelu, op, "pre_gelu"),
                            g_stream);
    return;
  }
  TACO_CHECK(scratch.numel == size_t(N) * IC, "matmul_gelu_backward: scratch must be [N, IC]");
  matmul_backward(scratch, dweight, dbias, dout, inp, weight, N, IC, OC);
  gelu_backward(dpre, pre_gelu, scratch);
}

void gelu_forward(const Tensor& out, const Tensor& inp) {
  const char* op = "gelu_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::gelu_forward(bf(out, op, "out"), bf(inp, op, "inp"), out.numel, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out, cpu::gelu_forward(ptr<Real>(out), ptr<Real>(inp), out.numel));
}

void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward";
  if (on_gpu(dinp, op)) {
    if constexpr (built_with_cuda())
      cuda::gelu_backward(bf(dinp, op, "dinp"), bf(inp, op, "inp"), bf(dout, op, "dout"),
                          dinp.numel, g_stream);
    return;
  }
  zero(dinp);
  TACO_CPU_REAL(op, dinp,
                cpu::gelu_backward(ptr<Real>(dinp), ptr<Real>(inp), ptr<Real>(dout), dinp.numel));
}

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* op = "residual_forward";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::residual_forward(bf(out, op, "out"), bf(a, op, "a"), bf(b, op, "b"), out.numel,
                             g_stream);
    return;
  }
  TACO_CPU_REAL(op, out,
                cpu::residual_forward(ptr<Real>(out), ptr<Real>(a), ptr<Real>(b), out.numel));
}

void residual_layernorm_forward(const Tensor& residual_out, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& a, const Tensor& b,
                                const Tensor& weight, const Tensor& bias, int N, int C) {
  const char* op = "residual_layernorm_forward";
  TACO_CHECK(out.data != a.data && out.data != b.data,
             "residual_layernorm_forward: out may not alias an input");
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::fused_residual_layernorm_forward(
          bf(residual_out, op, "residual_out"), bf(out, op, "out"), f32(mean, op, "mean"),
          f32(rstd, op, "rstd"), bf(a, op, "a"), bf(b, op, "b"), bf(weight, op, "weight"),
          bf(bias, op, "bias"), N, C, g_stream);
    return;
  }
  residual_forward(residual_out, a, b);
  layernorm_forward(out, mean, rstd, residual_out, weight, bias, N, C);
}

void add_inplace(const Tensor& y, const Tensor& x) {
  const char* op = "add_inplace";
  if (on_gpu(y, op)) {
    if constexpr (built_with_cuda())
      cuda::add_inplace(bf(y, op, "y"), bf(x, op, "x"), y.numel, g_stream);
    return;
  }
  TACO_CPU_REAL(op, y, cpu::add_inplace(ptr<Real>(y), ptr<Real>(x), y.numel));
}

void bias_add(const Tensor& out, const Tensor& bias, int N, int C) {
  const char* op = "bias_add";
  if (on_gpu(out, op)) {
    if constexpr (built_with_cuda())
      cuda::bias_add(bf(out, op, "out"), bf(bias, op, "bias"), N, C, g_stream);
    return;
  }
  TACO_CPU_REAL(op, out, cpu::bias_add(ptr<Real>(out), ptr<Real>(bias), N, C));
}

void crossentropy_row_max(const Tensor& row_max, const Tensor& logits, int N, int V, int V_valid) {
  const char* op = "crossentropy_row_max";
  if (on_gpu(logits, op)) {
    if constexpr (built_with_cuda())
      cuda::crossentropy_row_max(f32(row_max, op, "row_max"), bf(logits, op, "logits"), N, V,
                                 V_valid, g_stream);
    return;
  }
  TACO_CPU_REAL(op, logits,
                cpu::crossentropy_row_max(ptr<Real>(row_max), ptr<Real>(logits), N, V, V_valid));
}

void crossentropy_sumexp_target(const Tensor& sumexp, const Tensor& target_logit,
                                const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                                int N, int V, int V_valid, int vocab_start) {
  const char* op = "crossentropy_sumexp_target";
  if (on_gpu(logits, op)) {
    if constexpr (built_with_cuda())
      cuda::crossentropy_sumexp_target(
          f32(sumexp, op, "sumexp"), f32(target_logit, op, "target_logit"),
          bf(logits, op, "logits"), f32(row_max, op, "row_max"), i32(targets, op, "targets"), N, V,
          V_valid, vocab_start, g_stream);
    return;
  }
  TACO_CPU_REAL(op, logits,
                cpu::crossentropy_sumexp_target(ptr<Real>(sumexp), ptr<Real>(target_logit),
                                                ptr<Real>(logits), ptr<Real>(row_max), ids(targets),
                                                N, V, V_valid, vocab_start));
}

void crossentropy_loss(const Tensor& loss, const Tensor& row_max, const Tensor& sumexp,
                       const Tensor& target_logit, int N) {
  const char* op = "crossentropy_loss";
  if (on_gpu(loss, op)) {
    if constexpr (built_with_cuda())
      cuda::crossentropy_loss(f32(loss, op, "loss"), f32(row_max, op, "row_max"),
                              f32(sumexp, op, "sumexp"), f32(target_logit, op, "target_logit"), N,
                              g_stream);
    return;
  }
  TACO_CPU_REAL(op, loss,
                cpu::crossentropy_loss(ptr<Real>(loss), ptr<Real>(row_max), ptr<Real>(sumexp),
                                       ptr<Real>(target_logit), N));
}

void crossentropy_backward(const Tensor& logits, const Tensor& row_max, const Tensor& sumexp,
                           const Tensor& targets, float dloss, int N, int V, int V_valid,
                           int vocab_start) {
  const char* op = "crossentropy_backward";
  if (on_gpu(logits, op)) {
    if constexpr (built_with_cuda()) {
      bf16* l = bf(logits, op, "logits");
      cuda::crossentropy_backward(l, l, f32(row_max, op, "row_max"), f32(sumexp, op, "sumexp"),
                                  i32(targets, op, "targets"), dloss, N, V, V_valid, vocab_start,
                                  g_stream);
    }
    return;
  }
  TACO_CPU_REAL(op, logits,
                cpu::crossentropy_backward(ptr<Real>(logits), ptr<Real>(logits), ptr<Real>(row_max),
                                           ptr<Real>(sumexp), ids(targets), Real(dloss), N, V,
                                           V_valid, vocab_start));
}

void fused_classifier(const Tensor& logits, const Tensor& loss, const Tensor& targets, float dloss,
                      int N, int V, int V_valid, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit) {
  const char* op = "fused_classifier";
  if (on_gpu(logits, op)) {
    if constexpr (built_with_cuda())
      cuda::fused_classifier(bf(logits, op, "logits"), f32(loss, op, "loss"),
                             i32(targets, op, "targets"), dloss, N, V, V_valid, dloss != 0.f,
                             g_stream);
    return;
  }
  crossentropy_row_max(row_max, logits, N, V, V_valid);
  crossentropy_sumexp_target(sumexp, target_logit, logits, row_max, targets, N, V, V_valid, 0);
  crossentropy_loss(loss, row_max, sumexp, target_logit, N);
  if (dloss != 0.f)
    crossentropy_backward(logits, row_max, sumexp, targets, dloss, N, V, V_valid, 0);
}

void add_sum(const Tensor& acc, const Tensor& x) {
  const char* op = "add_sum";
  TACO_CHECK(acc.dtype == DType::f64 && acc.numel == 1 && acc.device == x.device,
             "add_sum: acc must be one f64 element on x's device");
  if (on_gpu(x, op)) {
    if constexpr (built_with_cuda())
      cuda::sum(acc.as<double>(), f32(x, op, "x"), x.numel, /*accumulate=*/true, g_stream);
    return;
  }
  double s = 0;
  TACO_CPU_REAL(op, x, {
    const Real* p = ptr<Real>(x);
    for (size_t i = 0; i < x.numel; ++i) s += double(p[i]);
  });
  *acc.as<double>() += s;
}

namespace {

// Every piece adds into one double on the device.
void sum_of_squares_on_device(double* sum, const std::vector<Tensor>& pieces) {
  const char* op = "sum_of_squares";
  device_memset_zero_async(sum, sizeof(double), g_stream);
  if constexpr (built_with_cuda())
    for (const Tensor& x : pieces)
      cuda::sum_of_squares(sum, bf(x, op, "x"), x.numel, /*accumulate=*/true, g_stream);
}

}  // namespace

void set_stream(Stream stream) { g_stream = stream; }
Stream stream() { return g_stream; }

void ComputeStream::open() {
  TACO_CHECK(!stream_, "ComputeStream::open: already open");
  stream_ = create_compute_stream();
  set_stream(stream_);
}

ComputeStream::~ComputeStream() {
  if (!stream_) return;
  stream_synchronize(stream_);
  if (g_stream == stream_) set_stream(nullptr);
  destroy_compute_stream(stream_);
}

double sum_of_squares(const std::vector<Tensor>& pieces) {
  const char* op = "sum_of_squares";
  if (pieces.empty()) return 0;
  double r = 0;
  if (on_gpu(pieces[0], op)) {
    // Read back with one synchronization.
    double* sum = device_scalar_slot();
    sum_of_squares_on_device(sum, pieces);
    device_copy(&r, sum, sizeof(double), DeviceKind::cpu, DeviceKind::cuda);
    return r;
  }
  for (const Tensor& p : pieces) r += sum_of_squares(p);
  return r;
}

void sum_of_squares_into(const Tensor& acc, const std::vector<Tensor>& pieces) {
  const char* op = "sum_of_squares_into";
  TACO_CHECK(acc.dtype == DType::f64 && acc.numel == 1,
             "sum_of_squares_into: acc must be one f64 element");
  for (const Tensor& x : pieces)
    TACO_CHECK(x.device == acc.device, "sum_of_squares_into: a piece is on another device");
  if (on_gpu(acc, op)) return sum_of_squares_on_device(acc.as<double>(), pieces);
  double r = 0;
  for (const Tensor& p : pieces) r += sum_of_squares(p);
  *acc.as<double>() = r;
}

double sum_of_squares(const Tensor& x) {
  const char* op = "sum_of_squares";
  if (on_gpu(x, op)) return sum_of_squares(std::vector<Tensor>{x});
  double r = 0;
  TACO_CPU_REAL(op, x, r = cpu::sum_of_squares(ptr<Real>(x), x.numel));
  return r;
}

}  // namespace taco::ops
