// Token and position embeddings (kernels/embedding.h).
//
// The backward passes sum many rows into one (repeated tokens into a wte row, the batch into a
// wpe row). Threads split the columns (token) or the positions (position) instead of the rows,
// so every sum runs in row order on one thread: results are bit-identical from run to run.
#include "kernels/embedding.h"

#include <algorithm>

namespace taco::cpu {
namespace {

template <typename Real>
void token_embedding_forward_impl(Real* out, const int32_t* tokens, const Real* wte, int N, int C,
                                  int vocab_start, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    Real* o = out + size_t(n) * C;
    const int row = tokens[n] - vocab_start;
    if (row >= 0 && row < V) {
      const Real* w = wte + size_t(row) * C;
      for (int c = 0; c < C; ++c) o[c] = w[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] = Real(0);
    }
  }
}

// dwte[tokens[n] - vocab_start, c] += dout[n, c] for the tokens in this shard.
template <typename Real>
void token_embedding_backward_impl(Real* dwte, const Real* dout, const int32_t* tokens, int N,
                                   int C, int vocab_start, int V) {
  constexpr int kCols = 32;
  const int blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (int bc = 0; bc < blocks; ++bc) {
    const int c0 = bc * kCols, c1 = std::min(C, c0 + kCols);
    for (int n = 0; n < N; ++n) {
      const int row = tokens[n] - vocab_start;
      if (row < 0 || row >= V) continue;
      Real* dw = dwte + size_t(row) * C;
      const Real* d = dout + size_t(n) * C;
      for (int c = c0; c < c1; ++c) dw[c] += d[c];
    }
  }
}

template <typename Real>
void position_embedding_forward_impl(Real* out, const Real* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      Real* o = out + (size_t(b) * T + t) * C;
      const Real* w = wpe + size_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] += w[c];
    }
  }
}

// dwpe[t, c] += sum_b dout[b, t, c], summed in b order.
template <typename Real>
void position_embedding_backward_impl(Real* dwpe, const Real* dout, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    Real* dw = dwpe + size_t(t) * C;
    for (int b = 0; b < B; ++b) {
      const Real* d = dout + (size_t(b) * T + t) * C;
      for (int c = 0; c < C; ++c) dw[c] += d[c];
    }
  }
}

}  // namespace

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C,
                             int vocab_start, int V) {
  token_embedding_forward_impl(out, tokens, wte, N, C, vocab_start, V);
}
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C,
                              int vocab_start, int V) {
  token_embedding_backward_impl(dwte, dout, tokens, N, C, vocab_start, V);
}
void position_embedding_forward(float* out, const float* wpe, int B, int T, int C) {
  position_embedding_forward_impl(out, wpe, B, T, C);
}
void position_embedding_backward(float* dwpe, const float* dout, int B, int T, int C) {
  position_embedding_backward_impl(dwpe, dout, B, T, C);
}

void token_embedding_forward(double* out, const int32_t* tokens, const double* wte, int N, int C,
                             int vocab_start, int V) {
  token_embedding_forward_impl(out, tokens, wte, N, C, vocab_start, V);
}
void token_embedding_backward(double* dwte, const double* dout, const int32_t* tokens, int N, int C,
                              int vocab_start, int V) {
  token_embedding_backward_impl(dwte, dout, tokens, N, C, vocab_start, V);
}
void position_embedding_forward(double* out, const double* wpe, int B, int T, int C) {
  position_embedding_forward_impl(out, wpe, B, T, C);
}
void position_embedding_backward(double* dwpe, const double* dout, int B, int T, int C) {
  position_embedding_backward_impl(dwpe, dout, B, T, C);
}

}  // namespace taco::cpu
