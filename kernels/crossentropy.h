// Softmax cross-entropy over a (possibly vocab-parallel) logits shard, in the pieces that
// Megatron's vocab-parallel cross-entropy needs between its reductions:
//
//   1. row_max[n]      = max_{v < V_valid} logits[n, v]                      (then all-reduce MAX)
//   2. sumexp[n]       = sum_{v < V_valid} exp(logits[n, v] - row_max[n])    (then all-reduce SUM)
//      target_logit[n] = logits[n, targets[n] - vocab_start] if in this shard else 0 (all-reduce
//      SUM)
//   3. loss[n]         = log(sumexp[n]) + row_max[n] - target_logit[n]
//   4. dlogits[n, v]   = (softmax[n, v] - [v == target]) * dloss   for v < V_valid, 0 on padding
//
// Shapes: logits [N, V] with V the (padded) shard width and V_valid <= V its real columns,
// targets [N] in global vocab ids, vocab_start the shard's first global id. Padded columns never
// contribute and never win. dlogits may alias logits (the fused classifier overwrites in place).
// With one rank the reductions are identities and this is plain cross-entropy.
#pragma once

#include "kernels/dtype.h"

namespace taco::cpu {

void crossentropy_row_max(float* row_max, const float* logits, int N, int V, int V_valid);
void crossentropy_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                                const float* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start);
void crossentropy_loss(float* loss, const float* row_max, const float* sumexp,
                       const float* target_logit, int N);
void crossentropy_backward(float* dlogits, const float* logits, const float* row_max,
                           const float* sumexp, const int32_t* targets, float dloss, int N, int V,
                           int V_valid, int vocab_start);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void crossentropy_row_max(double* row_max, const double* logits, int N, int V, int V_valid);
void crossentropy_sumexp_target(double* sumexp, double* target_logit, const double* logits,
                                const double* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start);
void crossentropy_loss(double* loss, const double* row_max, const double* sumexp,
                       const double* target_logit, int N);
void crossentropy_backward(double* dlogits, const double* logits, const double* row_max,
                           const double* sumexp, const int32_t* targets, double dloss, int N, int V,
                           int V_valid, int vocab_start);
}  // namespace taco::cpu

// CUDA: bf16 logits, fp32 statistics and losses, queued on `stream` (kernels/cuda/crossentropy.cu).
// V (the padded row width) must be a multiple of 8 and logits 16-byte aligned. The pieces have
// the CPU semantics above, with dlogits WRITTEN (it may alias logits).
namespace taco::cuda {

void crossentropy_row_max(float* row_max, const bf16* logits, int N, int V, int V_valid,
                          Stream stream);
void crossentropy_sumexp_target(float* sumexp, float* target_logit, const bf16* logits,
                                const float* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start, Stream stream);
void crossentropy_loss(float* loss, const float* row_max, const float* sumexp,
                       const float* target_logit, int N, Stream stream);
void crossentropy_backward(bf16* dlogits, const bf16* logits, const float* row_max,
                           const float* sumexp, const int32_t* targets, float dloss, int N, int V,
                           int V_valid, int vocab_start, Stream stream);

// The whole vocabulary on one rank (vocab_start = 0): steps 1-4 in one kernel that reads each
// row twice and writes it once. WRITES loss [N] and, with write_dlogits, dlogits over logits in
// place; without it (evaluation) the logits are left untouched.
void fused_classifier(bf16* logits, float* loss, const int32_t* targets, float dloss, int N, int V,
                      int V_valid, bool write_dlogits, Stream stream);

}  // namespace taco::cuda
