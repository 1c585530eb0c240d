#include "kernels/hadamard.h"

#include <cmath>

#include "kernels/check.h"

namespace taco {

float hadamard_scale(int n) { return float(1.0 / std::sqrt(double(n))); }

namespace cpu {

void hadamard_transform(float* x, int n) {
  hadamard_butterflies(x, n);
  const float scale = hadamard_scale(n);
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

void hadamard_butterflies(float* x, int n) {
  TACO_CHECK(n >= 1 && n <= (1 << 20) && (n & (n - 1)) == 0, "hadamard size must be 2^k");
  for (int h = 1; h < n; h *= 2) {
    for (int base = 0; base < n; base += 2 * h) {
      float* lo = x + base;
      float* hi = x + base + h;
      for (int i = 0; i < h; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a + b;
        hi[i] = a - b;
      }
    }
  }
}

}  // namespace cpu
}  // namespace taco
