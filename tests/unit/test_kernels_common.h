// Shared by the CPU kernel tests (tests/unit/test_kernels_*.cpp): random inputs, finite
// differences, and the comparisons of analytic with numerical gradients and of fp32 with fp64.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace taco::test {

// Normal(0, stddev) samples drawn in float and widened, so an fp32 op and its fp64 twin can be
// fed exactly the same values.
inline std::vector<double> random_double(size_t n, uint64_t seed, double stddev = 1.0) {
  std::vector<float> f = random_normal(n, seed, 0.f, float(stddev));
  return std::vector<double>(f.begin(), f.end());
}

template <typename Real>
std::vector<double> to_double(const std::vector<Real>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// ||a - b|| / ||b|| in double (b is the reference).
template <typename A>
double relative_l2(const std::vector<A>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

template <typename Real>
bool bitwise_equal(const std::vector<Real>& a, const std::vector<Real>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Real)) == 0;
}

// Gradient checks run in double with central differences of step kFdStep. Their error is the
// truncation h^2 |L'''| / 6 ~ 1e-12 plus the rounding eps |L| / h ~ 1e-16 * 10 / 1e-6 = 1e-9
// (L = sum(out * r) over ~100 O(1) terms), both three orders below kGradTolerance, while a wrong
// term in a backward formula is an O(1) relative error.
constexpr double kFdStep = 1e-6;
constexpr double kGradTolerance = 1e-6;

// dL/dx by central differences (L(x + h e_i) - L(x - h e_i)) / 2h; x is restored afterwards.
inline std::vector<double> numerical_gradient(std::vector<double>& x,
                                              const std::function<double()>& loss) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double up = loss();
    x[i] = saved - kFdStep;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (2 * kFdStep);
  }
  return g;
}

// Every element of the analytic gradient within kGradTolerance of the numerical one, relative
// to the gradient's largest element (so entries that should be 0 must be 0 to that accuracy),
// and the gradient not trivially zero.
inline void expect_gradient_matches(const std::vector<double>& analytic,
                                    const std::vector<double>& numeric, const std::string& what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = 0;
  for (double g : numeric) scale = std::max(scale, std::abs(g));
  EXPECT_GT(scale, 1e-3) << what << ": the check needs a gradient that is not ~0";
  int shown = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double err = std::abs(analytic[i] - numeric[i]);
    if (!(err <= kGradTolerance * scale) && shown++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference "
                    << numeric[i] << " (max |grad| " << scale << ")";
    }
  }
  EXPECT_LT(relative_l2(analytic, numeric), kGradTolerance) << what;
}

// fp32 vs fp64 on the same inputs: each output is a reduction over at most a few hundred O(1)
// terms, whose fp32 rounding error grows like sqrt(K) * 6e-8 ~ 1e-6 (K*eps ~ 1.5e-5 in the worst
// case of all errors aligned, which random inputs do not produce); 1e-5 relative L2 keeps a
// margin while a formula error is O(1).
constexpr double kFloatTolerance = 1e-5;

}  // namespace taco::test
