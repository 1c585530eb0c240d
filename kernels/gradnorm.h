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
