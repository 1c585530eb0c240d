// LayerNorm forward and backward (kernels/layernorm.h), after llm.c's train_gpt2.c.
//
// With norm = (x - mean) * rstd and dnorm = dout * weight, per row:
//   dinp    += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
//   dweight += dout * norm,  dbias += dout   (summed over rows)
// Rows are independent for out and dinp; dweight and dbias are split over threads by column
// blocks and summed in row order, so results are bit-identical from run to run.
#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>

namespace taco::cpu {
namespace {

template <typename Real>
void layernorm_forward_impl(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                            const Real* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + size_t(n) * C;
    Real sum = 0;
    for (int c = 0; c < C; ++c) sum += x[c];
    const Real m = sum / Real(C);
    Real var = 0;
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const Real s = Real(1) / std::sqrt(var / Real(C) + Real(kLayerNormEps));
    Real* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename Real>
void layernorm_backward_impl(Real* dinp, Real* dweight, Real* dbias, const Real* dout,
                             const Real* inp, const Real* weight, const Real* mean,
                             const Real* rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const Real* x = inp + size_t(n) * C;
    const Real* d = dout + size_t(n) * C;
    const Real m = mean[n], s = rstd[n];
    Real dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const Real dnorm = weight[c] * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= Real(C);
    dnorm_norm_mean /= Real(C);
    Real* dx = dinp + size_t(n) * C;
    for (int c = 0; c < C; ++c) {
      const Real norm = (x[c] - m) * s;
      dx[c] += s * (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }

  constexpr int kCols = 32;
  const int blocks = (C + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (int bc = 0; bc < blocks; ++bc) {
    const int c0 = bc * kCols, c1 = std::min(C, c0 + kCols);
    for (int n = 0; n < N; ++n) {
      const Real* x = inp + size_t(n) * C;
      const Real* d = dout + size_t(n) * C;
      const Real m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; ++c) {
        dweight[c] += d[c] * (x[c] - m) * s;
        dbias[c] += d[c];
      }
    }
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int N, int C) {
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, N, C);
}
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int N, int C) {
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

}  // namespace taco::cpu
