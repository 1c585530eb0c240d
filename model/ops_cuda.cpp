// CUDA side of model/ops.h. Until the bf16 kernels are wired in, every op reports that the
// CUDA training path is not available (tensors only reach here from a CUDA device).
#include "model/ops_cuda.h"

#include <string>

#include "kernels/check.h"

namespace taco::ops::cuda_ops {

namespace {
[[noreturn]] void not_wired(const char* op) {
  throw UserError(std::string("CUDA op ") + op +
                  " is not wired into the trainer yet; run with train.device: cpu");
}
}  // namespace

size_t attention_backward_scratch_bytes(int, int, int, int) { return 0; }

void zero(const Tensor& /*t*/) { not_wired("zero"); }

void copy(const Tensor& /*dst*/, const Tensor& /*src*/) { not_wired("copy"); }

void token_embedding_forward(const Tensor& /*out*/, const Tensor& /*tokens*/, const Tensor& /*wte*/,
                             int /*N*/, int /*C*/, int /*vocab_start*/, int /*V*/) {
  not_wired("token_embedding_forward");
}

void token_embedding_backward(const Tensor& /*dwte*/, const Tensor& /*dout*/,
                              const Tensor& /*tokens*/, int /*N*/, int /*C*/, int /*vocab_start*/,
                              int /*V*/) {
  not_wired("token_embedding_backward");
}

void position_embedding_forward(const Tensor& /*out*/, const Tensor& /*wpe*/, int /*B*/, int /*T*/,
                                int /*C*/) {
  not_wired("position_embedding_forward");
}

void position_embedding_backward(const Tensor& /*dwpe*/, const Tensor& /*dout*/, int /*B*/,
                                 int /*T*/, int /*C*/) {
  not_wired("position_embedding_backward");
}

void layernorm_forward(const Tensor& /*out*/, const Tensor& /*mean*/, const Tensor& /*rstd*/,
                       const Tensor& /*inp*/, const Tensor& /*weight*/, const Tensor& /*bias*/,
                       int /*N*/, int /*C*/) {
  not_wired("layernorm_forward");
}

void layernorm_backward(const Tensor& /*dinp*/, const Tensor& /*dweight*/, const Tensor& /*dbias*/,
                        const Tensor& /*dout*/, const Tensor& /*inp*/, const Tensor& /*weight*/,
                        const Tensor& /*mean*/, const Tensor& /*rstd*/, int /*N*/, int /*C*/) {
  not_wired("layernorm_backward");
}

void matmul_forward(const Tensor& /*out*/, const Tensor& /*inp*/, const Tensor& /*weight*/,
                    const Tensor& /*bias*/, int /*N*/, int /*IC*/, int /*OC*/) {
  not_wired("matmul_forward");
}

void matmul_backward(const Tensor& /*dinp*/, const Tensor& /*dweight*/, const Tensor& /*dbias*/,
                     const Tensor& /*dout*/, const Tensor& /*inp*/, const Tensor& /*weight*/,
                     int /*N*/, int /*IC*/, int /*OC*/) {
  not_wired("matmul_backward");
}

void attention_forward(const Tensor& /*out*/, const Tensor& /*saved*/, const Tensor& /*qkv*/,
                       int /*B*/, int /*T*/, int /*C*/, int /*NH*/) {
  not_wired("attention_forward");
}

void attention_backward(const Tensor& /*dqkv*/, const Tensor& /*dout*/, const Tensor& /*qkv*/,
                        const Tensor& /*out*/, const Tensor& /*saved*/, const Tensor& /*scratch*/,
                        int /*B*/, int /*T*/, int /*C*/, int /*NH*/) {
  not_wired("attention_backward");
}

void gelu_forward(const Tensor& /*out*/, const Tensor& /*inp*/) { not_wired("gelu_forward"); }

void gelu_backward(const Tensor& /*dinp*/, const Tensor& /*inp*/, const Tensor& /*dout*/) {
  not_wired("gelu_backward");
}

void residual_forward(const Tensor& /*out*/, const Tensor& /*a*/, const Tensor& /*b*/) {
  not_wired("residual_forward");
}

void add_inplace(const Tensor& /*y*/, const Tensor& /*x*/) { not_wired("add_inplace"); }

void crossentropy_row_max(const Tensor& /*row_max*/, const Tensor& /*logits*/, int /*N*/, int /*V*/,
                          int /*V_valid*/) {
  not_wired("crossentropy_row_max");
}

void crossentropy_sumexp_target(const Tensor& /*sumexp*/, const Tensor& /*target_logit*/,
                                const Tensor& /*logits*/, const Tensor& /*row_max*/,
                                const Tensor& /*targets*/, int /*N*/, int /*V*/, int /*V_valid*/,
                                int /*vocab_start*/) {
  not_wired("crossentropy_sumexp_target");
}

void crossentropy_loss(const Tensor& /*loss*/, const Tensor& /*row_max*/, const Tensor& /*sumexp*/,
                       const Tensor& /*target_logit*/, int /*N*/) {
  not_wired("crossentropy_loss");
}

void crossentropy_backward(const Tensor& /*logits*/, const Tensor& /*row_max*/,
                           const Tensor& /*sumexp*/, const Tensor& /*targets*/, float /*dloss*/,
                           int /*N*/, int /*V*/, int /*V_valid*/, int /*vocab_start*/) {
  not_wired("crossentropy_backward");
}

double sum_of_squares(const Tensor& /*x*/) { not_wired("sum_of_squares"); }

}  // namespace taco::ops::cuda_ops
