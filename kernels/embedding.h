// Token and position embeddings.
//
//   token:    out[n, :] = wte[tokens[n] - vocab_start, :]  if vocab_start <= tokens[n] <
//   vocab_start + V
//                       = 0                               otherwise (another tp rank's vocab shard)
//   position: out[b, t, :] += wpe[t, :]
//
// Shapes: tokens [N] (N = B*T), wte [V, C] (this rank's vocab shard), wpe [T_max, C], out [N, C].
// Backward ops add into their gradient outputs (+=); callers zero gradients once per step.
#pragma once

#include "kernels/dtype.h"

namespace taco::cpu {

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C,
                             int vocab_start, int V);
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C,
                              int vocab_start, int V);
void position_embedding_forward(float* out, const float* wpe, int B, int T, int C);
void position_embedding_backward(float* dwpe, const float* dout, int B, int T, int C);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void token_embedding_forward(double* out, const int32_t* tokens, const double* wte, int N, int C,
                             int vocab_start, int V);
void token_embedding_backward(double* dwte, const double* dout, const int32_t* tokens, int N, int C,
                              int vocab_start, int V);
void position_embedding_forward(double* out, const double* wpe, int B, int T, int C);
void position_embedding_backward(double* dwpe, const double* dout, int B, int T, int C);
}  // namespace taco::cpu
