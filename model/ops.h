// The model's view of the kernels: each op on Tensor views, dispatched by device and dtype to
// kernels/cpu (fp32, or fp64 for gradient checks) or kernels/cuda (bf16). Shapes are passed
// explicitly, as in the kernel headers, whose comments give the math.
//
// Gradient semantics at this level (what layers rely on):
//   activation gradients are WRITTEN (=): matmul dinp, attention dqkv, gelu dinp, dlogits;
//   layernorm_backward ADDS into dinp (it feeds the residual stream);
//   parameter gradients are ADDED (+=), so micro-batches accumulate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/tensor.h"

namespace taco::ops {

// The stream every GPU op is queued on: the legacy default stream unless set. A stream made with
// create_compute_stream (engine/runtime/step_graph.h) is ordered with the legacy stream as that
// stream was, and can be captured into a CUDA graph. Set it before the first op (the kernels'
// workspaces are per stream) and from one thread.
void set_stream(Stream stream);
Stream stream();

// Owns such a stream: open() makes it and points the ops at it; destruction waits for it, points
// the ops back at the legacy stream and destroys it. Unopened it holds nothing. Declare it before
// the model and everything else that queues work on it, so it goes after them.
class ComputeStream {
 public:
  ComputeStream() = default;
  ~ComputeStream();
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;
  void open();
  Stream get() const { return stream_; }

 private:
  Stream stream_ = nullptr;
};

void zero(const Tensor& t);
void copy(const Tensor& dst, const Tensor& src);
// The same copy queued on stream() (a blocking copy cannot be captured into a CUDA graph).
void copy_async(const Tensor& dst, const Tensor& src);

void token_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, int N,
                             int C, int vocab_start, int V);
void token_embedding_backward(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int N,
                              int C, int vocab_start, int V);
void position_embedding_forward(const Tensor& out, const Tensor& wpe, int B, int T, int C);
void position_embedding_backward(const Tensor& dwpe, const Tensor& dout, int B, int T, int C);

void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, int N, int C);
// dinp_column_sums [C] (CUDA only; may be empty): also ADDS the column sums of the updated dinp,
// the bias gradient of the linear layer whose output feeds the residual stream there.
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, int N, int C,
                        const Tensor& dinp_column_sums = Tensor{});

// bias may be empty (no bias).
void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    int N, int IC, int OC);
// dinp and dbias may be empty (not wanted).
void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, int N, int IC,
                     int OC);

// `saved` is what the backward needs besides qkv and out: the CPU keeps the probabilities
// [B, NH, T, T]; CUDA keeps the log-sum-exp [B, NH, T]. attention_saved_numel says how much.
size_t attention_saved_numel(DeviceKind device, int B, int T, int NH);
void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int B, int T,
                       int C, int NH);
// Scratch the backward needs (bytes; 0 on the CPU), planned once by the caller.
size_t attention_backward_scratch_bytes(DeviceKind device, int B, int T, int C, int NH);
// Which attention engine runs these shapes (kernels/attention.h), for the run's log line.
std::string attention_engine_description(DeviceKind device, int B, int T, int C, int NH);
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& saved, const Tensor& scratch, int B, int T,
                        int C, int NH);

// The MLP's first layer and its GELU: pre_gelu = inp weight^T + bias and out = gelu(pre_gelu),
// both written. On CUDA one GEMM with a GELU epilogue; elsewhere matmul_forward + gelu_forward.
void matmul_gelu_forward(const Tensor& out, const Tensor& pre_gelu, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, int N, int IC, int OC);
// The MLP's second layer backward on through the GELU: dpre = (dout weight) * gelu'(pre_gelu)
// WRITTEN ([N, IC]); dweight, dbias ADDED; `inp` = gelu(pre_gelu). On CUDA one GEMM with a dGELU
// epilogue; elsewhere matmul_backward into `scratch` [N, IC], then gelu_backward.
void matmul_gelu_backward(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                          const Tensor& pre_gelu, const Tensor& scratch, int N, int IC, int OC);
// Is scratch needed by matmul_gelu_backward on this device?
bool matmul_gelu_backward_needs_scratch(DeviceKind device);

void gelu_forward(const Tensor& out, const Tensor& inp);
void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);

void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
// residual_out = a + b (may alias a or b, not out) and out = LayerNorm(residual_out); the same
// bits as residual_forward + layernorm_forward, in one kernel on CUDA.
void residual_layernorm_forward(const Tensor& residual_out, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& a, const Tensor& b,
                                const Tensor& weight, const Tensor& bias, int N, int C);
void add_inplace(const Tensor& y, const Tensor& x);
// out [N, C] += bias [C] on every row.
void bias_add(const Tensor& out, const Tensor& bias, int N, int C);

// Cross-entropy pieces (kernels/crossentropy.h); row statistics are fp32 on every device
// (fp64 in fp64 runs).
void crossentropy_row_max(const Tensor& row_max, const Tensor& logits, int N, int V, int V_valid);
void crossentropy_sumexp_target(const Tensor& sumexp, const Tensor& target_logit,
                                const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                                int N, int V, int V_valid, int vocab_start);
void crossentropy_loss(const Tensor& loss, const Tensor& row_max, const Tensor& sumexp,
                       const Tensor& target_logit, int N);
// Writes dlogits over logits in place.
void crossentropy_backward(const Tensor& logits, const Tensor& row_max, const Tensor& sumexp,
                           const Tensor& targets, float dloss, int N, int V, int V_valid,
                           int vocab_start);

// The whole vocabulary on this rank (no tp split of the head): loss [N] WRITTEN and, with
// dloss != 0, dlogits = d(sum(loss) * dloss)/dlogits written over the logits (else the logits
// are untouched). One kernel on CUDA; the four pieces above elsewhere, using the row-statistic
// buffers (each [N]).
void fused_classifier(const Tensor& logits, const Tensor& loss, const Tensor& targets, float dloss,
                      int N, int V, int V_valid, const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit);

// acc (one f64 element, on x's device) += the sum of x's elements in double: x's values summed
// first, then added to acc. On CUDA it runs on the device (the step's loss, read once a step).
void add_sum(const Tensor& acc, const Tensor& x);

// Sum of squares in double (for the global gradient norm).
double sum_of_squares(const Tensor& x);
// The same over several pieces with one host synchronization.
double sum_of_squares(const std::vector<Tensor>& pieces);
// The same left in acc (one f64 element on the pieces' device) with no host synchronization: the
// step's squared gradient norm for an update that reads it on the device.
void sum_of_squares_into(const Tensor& acc, const std::vector<Tensor>& pieces);

}  // namespace taco::ops
