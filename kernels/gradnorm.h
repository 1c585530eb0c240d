// Global gradient norm and clipping. The norm of several ranges (and ranks) is
// sqrt(sum of each range's sum of squares); sums are accumulated in double so the result does
// not depend on how the ranges are split.
//   clip_scale = grad_clip / max(norm, grad_clip)   (1 when the norm is within the clip)
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco::cpu {

double sum_of_squares(const float* x, size_t n);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
double sum_of_squares(const double* x, size_t n);
}  // namespace taco::cpu

namespace taco {

inline float clip_scale(double norm, double grad_clip) {
  if (grad_clip <= 0.0 || !(norm > grad_clip)) return 1.0f;
  return float(grad_clip / norm);
}

}  // namespace taco

// CUDA (kernels/cuda/gradnorm.cu): *result (one double in device memory) = sum of x^2 over the n
// bf16 values of x, or += it with accumulate (for the next range of the same norm). Two stages of
// fixed shape, so the result is bit-identical from run to run; nothing is copied to the host.
namespace taco::cuda {

void sum_of_squares(double* result, const bf16* x, size_t n, bool accumulate, Stream stream);

// The same two stages for a plain sum of fp32 values (a step's per-token losses), so the loss
// stays on the device until the step reads it.
void sum(double* result, const float* x, size_t n, bool accumulate, Stream stream);

}  // namespace taco::cuda
