// LayerNorm over the last dimension of N rows of C:
//   mean = sum(x) / C, rstd = 1 / sqrt(sum((x - mean)^2) / C + 1e-5)
//   out  = (x - mean) * rstd * weight + bias
// Shapes: inp, out [N, C]; weight, bias [C]; mean, rstd [N] (saved for backward).
// Backward adds into dinp [N, C], dweight [C], dbias [C].
#pragma once

#include "kernels/dtype.h"

namespace taco::cpu {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int N, int C);
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int N, int C);
}  // namespace taco::cpu
