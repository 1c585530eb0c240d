// GELU, tanh approximation (kernels/gelu.h). With u = sqrt(2/pi) (x + 0.044715 x^3):
//   gelu(x)  = 0.5 x (1 + tanh u)
//   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include "kernels/gelu.h"

#include <cmath>

namespace taco::cpu {
namespace {

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluCube = 0.044715;
constexpr size_t kParallelMin = 1 << 14;  // below this, threads cost more than they save

template <typename Real>
void gelu_forward_impl(Real* out, const Real* inp, size_t n) {
  const Real scale = Real(kGeluScale), cube = Real(kGeluCube);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    out[i] = Real(0.5) * x * (Real(1) + std::tanh(scale * (x + cube * x * x * x)));
  }
}

template <typename Real>
void gelu_backward_impl(Real* dinp, const Real* inp, const Real* dout, size_t n) {
  const Real scale = Real(kGeluScale), cube = Real(kGeluCube);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; ++i) {
    const Real x = inp[i];
    const Real th = std::tanh(scale * (x + cube * x * x * x));
    const Real grad = Real(0.5) * (Real(1) + th) + Real(0.5) * x * (Real(1) - th * th) * scale *
                                                       (Real(1) + Real(3) * cube * x * x);
    dinp[i] += grad * dout[i];
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) { gelu_forward_impl(out, inp, n); }
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  gelu_backward_impl(dinp, inp, dout, n);
}
void gelu_forward(double* out, const double* inp, size_t n) { gelu_forward_impl(out, inp, n); }
void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n) {
  gelu_backward_impl(dinp, inp, dout, n);
}

}  // namespace taco::cpu
