// CUDA implementations behind model/ops.h: each converts the views to the bf16 kernels of
// kernels/cuda. In a build without CUDA they throw (no tensor can live on a GPU there).
#pragma once

#include <string>
#include <vector>

#include "engine/runtime/tensor.h"

namespace taco::ops::cuda_ops {

size_t attention_backward_scratch_bytes(int B, int T, int C, int NH);
std::string attention_engine_description(int B, int T, int C, int NH);

void zero(const Tensor& t);
void copy(const Tensor& dst, const Tensor& src);
void token_embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, int N,
                             int C, int vocab_start, int V);
void token_embedding_backward(const Tensor& dwte, const Tensor& dout, const Tensor& tokens, int N,
                              int C, int vocab_start, int V);
void position_embedding_forward(const Tensor& out, const Tensor& wpe, int B, int T, int C);
void position_embedding_backward(const Tensor& dwpe, const Tensor& dout, int B, int T, int C);
void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, int N, int C);
void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dout, const Tensor& inp, const Tensor& weight,
                        const Tensor& mean, const Tensor& rstd, int N, int C,
                        const Tensor& dinp_column_sums);
void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                    int N, int IC, int OC);
void matmul_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias,
                     const Tensor& dout, const Tensor& inp, const Tensor& weight, int N, int IC,
                     int OC);
void attention_forward(const Tensor& out, const Tensor& saved, const Tensor& qkv, int B, int T,
                       int C, int NH);
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& saved, const Tensor& scratch, int B, int T,
                        int C, int NH);
void matmul_gelu_forward(const Tensor& out, const Tensor& pre_gelu, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, int N, int IC, int OC);
void matmul_gelu_backward(const Tensor& dpre, const Tensor& dweight, const Tensor& dbias,
                          const Tensor& dout, const Tensor& inp, const Tensor& weight,
                          const Tensor& pre_gelu, int N, int IC, int OC);
void gelu_forward(const Tensor& out, const Tensor& inp);
void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout);
void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b);
void residual_layernorm_forward(const Tensor& residual_out, const Tensor& out, const Tensor& mean,
                                const Tensor& rstd, const Tensor& a, const Tensor& b,
                                const Tensor& weight, const Tensor& bias, int N, int C);
void add_inplace(const Tensor& y, const Tensor& x);
void bias_add(const Tensor& out, const Tensor& bias, int N, int C);
void crossentropy_row_max(const Tensor& row_max, const Tensor& logits, int N, int V, int V_valid);
void crossentropy_sumexp_target(const Tensor& sumexp, const Tensor& target_logit,
                                const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                                int N, int V, int V_valid, int vocab_start);
void crossentropy_loss(const Tensor& loss, const Tensor& row_max, const Tensor& sumexp,
                       const Tensor& target_logit, int N);
void crossentropy_backward(const Tensor& logits, const Tensor& row_max, const Tensor& sumexp,
                           const Tensor& targets, float dloss, int N, int V, int V_valid,
                           int vocab_start);
void fused_classifier(const Tensor& logits, const Tensor& loss, const Tensor& targets, float dloss,
                      int N, int V, int V_valid);
void add_sum(const Tensor& acc, const Tensor& x);
double sum_of_squares(const Tensor& x);
double sum_of_squares(const std::vector<Tensor>& pieces);

}  // namespace taco::ops::cuda_ops
