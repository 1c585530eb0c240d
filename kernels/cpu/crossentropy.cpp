// Softmax cross-entropy in vocab-parallel pieces (kernels/crossentropy.h). Each piece is
// independent per row n; only the first V_valid of the V columns of a row are read, so padding
// never contributes nor wins the max. A shard with no valid columns reports row_max = -inf and
// sumexp = 0, the identities of the MAX and SUM all-reduces that follow.
#include "kernels/crossentropy.h"

#include <cmath>
#include <limits>

namespace taco::cpu {
namespace {

// The local column of global vocab id `target`, or -1 when another shard (or padding) holds it.
inline int local_target(int32_t target, int vocab_start, int V_valid) {
  const int64_t v = int64_t(target) - vocab_start;
  return (v >= 0 && v < V_valid) ? int(v) : -1;
}

template <typename Real>
void crossentropy_row_max_impl(Real* row_max, const Real* logits, int N, int V, int V_valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* l = logits + size_t(n) * V;
    Real m = -std::numeric_limits<Real>::infinity();
    for (int v = 0; v < V_valid; ++v) m = l[v] > m ? l[v] : m;
    row_max[n] = m;
  }
}

template <typename Real>
void crossentropy_sumexp_target_impl(Real* sumexp, Real* target_logit, const Real* logits,
                                     const Real* row_max, const int32_t* targets, int N, int V,
                                     int V_valid, int vocab_start) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* l = logits + size_t(n) * V;
    const Real m = row_max[n];
    Real sum = 0;
    for (int v = 0; v < V_valid; ++v) sum += std::exp(l[v] - m);
    sumexp[n] = sum;
    const int t = local_target(targets[n], vocab_start, V_valid);
    target_logit[n] = t >= 0 ? l[t] : Real(0);
  }
}

template <typename Real>
void crossentropy_loss_impl(Real* loss, const Real* row_max, const Real* sumexp,
                            const Real* target_logit, int N) {
  for (int n = 0; n < N; ++n) loss[n] = std::log(sumexp[n]) + row_max[n] - target_logit[n];
}

// dlogits may alias logits: each element is read once, then overwritten.
template <typename Real>
void crossentropy_backward_impl(Real* dlogits, const Real* logits, const Real* row_max,
                                const Real* sumexp, const int32_t* targets, Real dloss, int N,
                                int V, int V_valid, int vocab_start) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* l = logits + size_t(n) * V;
    Real* dl = dlogits + size_t(n) * V;
    const Real m = row_max[n];
    const Real inv_sum = Real(1) / sumexp[n];
    const int t = local_target(targets[n], vocab_start, V_valid);
    for (int v = 0; v < V_valid; ++v) {
      const Real prob = std::exp(l[v] - m) * inv_sum;
      dl[v] = (prob - (v == t ? Real(1) : Real(0))) * dloss;
    }
    for (int v = V_valid; v < V; ++v) dl[v] = 0;
  }
}

}  // namespace

void crossentropy_row_max(float* row_max, const float* logits, int N, int V, int V_valid) {
  crossentropy_row_max_impl(row_max, logits, N, V, V_valid);
}
void crossentropy_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                                const float* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start) {
  crossentropy_sumexp_target_impl(sumexp, target_logit, logits, row_max, targets, N, V, V_valid,
                                  vocab_start);
}
void crossentropy_loss(float* loss, const float* row_max, const float* sumexp,
                       const float* target_logit, int N) {
  crossentropy_loss_impl(loss, row_max, sumexp, target_logit, N);
}
void crossentropy_backward(float* dlogits, const float* logits, const float* row_max,
                           const float* sumexp, const int32_t* targets, float dloss, int N, int V,
                           int V_valid, int vocab_start) {
  crossentropy_backward_impl(dlogits, logits, row_max, sumexp, targets, dloss, N, V, V_valid,
                             vocab_start);
}

void crossentropy_row_max(double* row_max, const double* logits, int N, int V, int V_valid) {
  crossentropy_row_max_impl(row_max, logits, N, V, V_valid);
}
void crossentropy_sumexp_target(double* sumexp, double* target_logit, const double* logits,
                                const double* row_max, const int32_t* targets, int N, int V,
                                int V_valid, int vocab_start) {
  crossentropy_sumexp_target_impl(sumexp, target_logit, logits, row_max, targets, N, V, V_valid,
                                  vocab_start);
}
void crossentropy_loss(double* loss, const double* row_max, const double* sumexp,
                       const double* target_logit, int N) {
  crossentropy_loss_impl(loss, row_max, sumexp, target_logit, N);
}
void crossentropy_backward(double* dlogits, const double* logits, const double* row_max,
                           const double* sumexp, const int32_t* targets, double dloss, int N, int V,
                           int V_valid, int vocab_start) {
  crossentropy_backward_impl(dlogits, logits, row_max, sumexp, targets, dloss, N, V, V_valid,
                             vocab_start);
}

}  // namespace taco::cpu
