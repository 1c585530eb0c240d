// Residual stream and elementwise helpers (kernels/residual.h).
#include "kernels/residual.h"

namespace taco::cpu {
namespace {

constexpr size_t kParallelMin = 1 << 16;  // below this, threads cost more than they save

template <typename Real>
void residual_forward_impl(Real* out, const Real* a, const Real* b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename Real>
void residual_backward_impl(Real* da, Real* db, const Real* dout, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <typename Real>
void add_inplace_impl(Real* y, const Real* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

template <typename Real>
void scale_inplace_impl(Real* y, Real s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) y[i] *= s;
}

template <typename Real>
void bias_add_impl(Real* out, const Real* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[size_t(n) * C + c] += bias[c];
}

}  // namespace

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  residual_forward_impl(out, a, b, n);
}
void residual_backward(float* da, float* db, const float* dout, size_t n) {
  residual_backward_impl(da, db, dout, n);
}
void add_inplace(float* y, const float* x, size_t n) { add_inplace_impl(y, x, n); }
void scale_inplace(float* y, float s, size_t n) { scale_inplace_impl(y, s, n); }
void bias_add(float* out, const float* bias, int N, int C) { bias_add_impl(out, bias, N, C); }

void residual_forward(double* out, const double* a, const double* b, size_t n) {
  residual_forward_impl(out, a, b, n);
}
void residual_backward(double* da, double* db, const double* dout, size_t n) {
  residual_backward_impl(da, db, dout, n);
}
void add_inplace(double* y, const double* x, size_t n) { add_inplace_impl(y, x, n); }
void scale_inplace(double* y, double s, size_t n) { scale_inplace_impl(y, s, n); }
void bias_add(double* out, const double* bias, int N, int C) { bias_add_impl(out, bias, N, C); }

}  // namespace taco::cpu
