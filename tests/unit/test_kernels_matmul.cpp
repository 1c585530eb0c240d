// The cache-blocked matmul against a naive triple loop in double, at the demo's largest layer
// shape and at shapes that are no multiple of any register tile or cache block.
//
// Tolerances (relative L2): each output is a sum of K products, K <= 1024 here. fp32 rounding
// grows like sqrt(K) * 6e-8 <= 2e-6 on random inputs, under the 1e-5 bound; fp64 like
// sqrt(K) * 1.1e-16 ~ 4e-15, under 1e-12. A misplaced tile or a dropped block is O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "tests/unit/test_kernels_common.h"

namespace cpu = taco::cpu;
using namespace taco::test;

namespace {

struct Shape {
  int N, IC, OC;
};

struct Linear {
  std::vector<double> out, dinp, dweight, dbias;
};

// out = bias + inp weight^T; gradients added onto their starting values `start`.
Linear naive_linear(const std::vector<double>& inp, const std::vector<double>& weight,
                    const std::vector<double>& bias, const std::vector<double>& dout,
                    const Linear& start, Shape s) {
  Linear r = start;
  for (int n = 0; n < s.N; ++n) {
    for (int o = 0; o < s.OC; ++o) {
      double acc = bias[o];
      for (int i = 0; i < s.IC; ++i) acc += inp[n * s.IC + i] * weight[o * s.IC + i];
      r.out[n * s.OC + o] = acc;
    }
  }
  for (int n = 0; n < s.N; ++n) {
    for (int i = 0; i < s.IC; ++i) {
      double acc = 0;
      for (int o = 0; o < s.OC; ++o) acc += dout[n * s.OC + o] * weight[o * s.IC + i];
      r.dinp[n * s.IC + i] += acc;
    }
  }
  for (int o = 0; o < s.OC; ++o) {
    for (int i = 0; i < s.IC; ++i) {
      double acc = 0;
      for (int n = 0; n < s.N; ++n) acc += dout[n * s.OC + o] * inp[n * s.IC + i];
      r.dweight[o * s.IC + i] += acc;
    }
    for (int n = 0; n < s.N; ++n) r.dbias[o] += dout[n * s.OC + o];
  }
  return r;
}

template <typename Real>
std::vector<Real> as(const std::vector<double>& x) {
  return std::vector<Real>(x.begin(), x.end());
}

template <typename Real>
void check_against_naive(Shape s, double tolerance) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " shape N=" + std::to_string(s.N) +
               " IC=" + std::to_string(s.IC) + " OC=" + std::to_string(s.OC));
  const auto inp = random_double(size_t(s.N) * s.IC, seed);
  const auto weight = random_double(size_t(s.OC) * s.IC, seed + 1);
  const auto bias = random_double(s.OC, seed + 2);
  const auto dout = random_double(size_t(s.N) * s.OC, seed + 3);
  Linear start{std::vector<double>(dout.size()), random_double(inp.size(), seed + 4),
               random_double(weight.size(), seed + 5), random_double(bias.size(), seed + 6)};
  const Linear want = naive_linear(inp, weight, bias, dout, start, s);

  const auto inp_r = as<Real>(inp), weight_r = as<Real>(weight), bias_r = as<Real>(bias);
  const auto dout_r = as<Real>(dout);
  auto out = as<Real>(start.out), dinp = as<Real>(start.dinp);
  auto dweight = as<Real>(start.dweight), dbias = as<Real>(start.dbias);
  cpu::matmul_forward(out.data(), inp_r.data(), weight_r.data(), bias_r.data(), s.N, s.IC, s.OC);
  cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout_r.data(), inp_r.data(),
                       weight_r.data(), s.N, s.IC, s.OC);
  // The gradients are compared as increments, so the starting values cannot hide an error.
  EXPECT_LT(relative_l2(out, want.out), tolerance) << "out";
  EXPECT_LT(relative_l2(minus(to_double(dinp), start.dinp), minus(want.dinp, start.dinp)),
            tolerance)
      << "dinp";
  EXPECT_LT(
      relative_l2(minus(to_double(dweight), start.dweight), minus(want.dweight, start.dweight)),
      tolerance)
      << "dweight";
  EXPECT_LT(relative_l2(minus(to_double(dbias), start.dbias), minus(want.dbias, start.dbias)),
            tolerance)
      << "dbias";
}

constexpr Shape kDemoShape{1024, 128, 512};  // B*T = 8*128 tokens, d = 128, the MLP's 4d
constexpr double kFloatBound = 1e-5, kDoubleBound = 1e-12;

TEST(KernelMatmul, FloatMatchesNaiveDoubleAtTheDemoShape) {
  check_against_naive<float>(kDemoShape, kFloatBound);
}

TEST(KernelMatmul, DoubleMatchesNaiveDoubleAtTheDemoShape) {
  check_against_naive<double>(kDemoShape, kDoubleBound);
}

// 7 x 13 x 5 sits inside one partial tile; 67 x 259 x 70 crosses the 64-row, 64-column and
// 256-deep blocks by a few elements, 1 x 1 x 1 is the degenerate case. With only a handful of
// outputs, one sum that nearly cancels can dominate the norm: its fp32 error is
// eps * sum|terms| / |sum|, seen up to 6e-5 on fresh inputs, so the bound here is 5e-4 (a
// misplaced tile or a dropped block still shows as O(1)).
TEST(KernelMatmul, OddShapesMatchNaiveDouble) {
  for (Shape s : {Shape{7, 13, 5}, Shape{67, 259, 70}, Shape{1, 1, 1}, Shape{4, 8, 8}}) {
    check_against_naive<float>(s, 5e-4);
    check_against_naive<double>(s, kDoubleBound);
  }
}

// Informational: fp32 GFLOP/s at the demo shape with the threads OpenMP gives this process
// (2 N IC OC flops forward, twice that backward). Correctness is asserted above, not here; the
// test only checks that the timed calls produced finite numbers.
TEST(KernelMatmul, ReportsFloatThroughputAtTheDemoShape) {
  const Shape s = kDemoShape;
  const uint64_t seed = fresh_seed();
  const auto inp = random_normal(size_t(s.N) * s.IC, seed);
  const auto weight = random_normal(size_t(s.OC) * s.IC, seed + 1);
  const auto bias = random_normal(s.OC, seed + 2);
  const auto dout = random_normal(size_t(s.N) * s.OC, seed + 3);
  std::vector<float> out(dout.size()), dinp(inp.size()), dweight(weight.size()), dbias(s.OC);
  using clock = std::chrono::steady_clock;
  auto best = [](auto&& body) {
    double fastest = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = clock::now();
      body();
      fastest = std::min(fastest, std::chrono::duration<double>(clock::now() - t0).count());
    }
    return fastest;
  };
  const double fwd = best([&] {
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.IC, s.OC);
  });
  const double bwd = best([&] {
    cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                         weight.data(), s.N, s.IC, s.OC);
  });
  const double flops = 2.0 * s.N * s.IC * s.OC;
  std::printf("matmul fp32 N=%d IC=%d OC=%d: forward %.1f GFLOP/s, backward %.1f GFLOP/s\n", s.N,
              s.IC, s.OC, flops / fwd * 1e-9, 2 * flops / bwd * 1e-9);
  RecordProperty("forward_gflops", std::to_string(flops / fwd * 1e-9));
  RecordProperty("backward_gflops", std::to_string(2 * flops / bwd * 1e-9));
  const double checksum =
      dot(to_double(out), to_double(out)) + dot(to_double(dweight), to_double(dweight));
  EXPECT_TRUE(std::isfinite(checksum));
}

}  // namespace
