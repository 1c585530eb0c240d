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

// CUDA: bf16 tensors in device memory, ops queued on `stream` (kernels/cuda/embedding.cu).
// C must be a multiple of 8 and the bf16 pointers 16-byte aligned (rows move as 16-byte vectors).
// Semantics differ from the CPU ops above on purpose:
//   embedding_forward WRITES out (token row, 0 for other shards' tokens, plus wpe[t] if given);
//   position_embedding_forward ADDS wpe[t] into out;
//   embedding_backward ADDS into dwte and dwpe (parameter gradients accumulate), deterministically:
//   a stable sort groups each vocab row's tokens, whose dout rows are summed in token order in
//   fp32 and added once (no float atomics).
namespace taco::cuda {

// out [B*T, C]; tokens [B*T] global ids; wte [V, C] this rank's shard, first id vocab_start;
// wpe [>= T, C] or nullptr (e.g. on all but one tensor-parallel rank).
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                       int T, int C, int vocab_start, int V, Stream stream);
void position_embedding_forward(bf16* out, const bf16* wpe, int B, int T, int C, Stream stream);
// dwte [V, C] and dwpe [>= T, C] (either may be nullptr) += the gradients of dout [B*T, C].
// Uses per-stream scratch of about 16 B*T bytes plus the sort's temporary storage.
void embedding_backward(bf16* dwte, bf16* dwpe, const bf16* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int V, Stream stream);

}  // namespace taco::cuda
