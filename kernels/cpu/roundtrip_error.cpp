#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/check.h"
#include "kernels/roundtrip_error.h"

namespace taco::cpu {

namespace {

inline double widen(const float* p, size_t i) { return p[i]; }
inline double widen(const bf16* p, size_t i) { return bf16_to_float(p[i]); }

// Elements per block: large enough that a thread's share streams, small enough that two
// threads always have work for messages of a few hundred kB.
constexpr size_t kBlock = size_t(1) << 15;

template <class X, class Y>
void sums_of(const X* x, const Y* xhat, size_t n, double out[3]) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> part(3 * blocks, 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (size_t b = 0; b < blocks; ++b) {
    double err = 0, sig = 0, bad = 0;
    const size_t end = std::min(n, (b + 1) * kBlock);
    for (size_t i = b * kBlock; i < end; ++i) {
      const double a = widen(x, i), d = widen(xhat, i) - a;
      err += d * d;
      sig += a * a;
      bad += std::isfinite(a) ? 0.0 : 1.0;
    }
    part[3 * b] = err;
    part[3 * b + 1] = sig;
    part[3 * b + 2] = bad;
  }
  for (size_t b = 0; b < blocks; ++b)
    for (int k = 0; k < 3; ++k) out[k] += part[3 * b + size_t(k)];
}

template <class X>
void dispatch_xhat(const X* x, const void* xhat, DType xhat_dtype, size_t n, double out[3]) {
  if (xhat_dtype == DType::f32)
    sums_of(x, static_cast<const float*>(xhat), n, out);
  else
    sums_of(x, static_cast<const bf16*>(xhat), n, out);
}

}  // namespace

void roundtrip_error_sums(const void* x, DType x_dtype, const void* xhat, DType xhat_dtype,
                          size_t n, double sums[3]) {
  TACO_CHECK((x_dtype == DType::f32 || x_dtype == DType::bf16) &&
                 (xhat_dtype == DType::f32 || xhat_dtype == DType::bf16),
             "roundtrip_error_sums takes f32 or bf16");
  if (n == 0) return;
  if (x_dtype == DType::f32)
    dispatch_xhat(static_cast<const float*>(x), xhat, xhat_dtype, n, sums);
  else
    dispatch_xhat(static_cast<const bf16*>(x), xhat, xhat_dtype, n, sums);
}

}  // namespace taco::cpu
