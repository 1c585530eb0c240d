// AdamW against a hand-written double reference of the formula in kernels/adamw.h, and the
// gradient-norm pieces (sum_of_squares, clip_scale) against naive sums and their definition.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/gradnorm.h"
#include "tests/unit/test_kernels_common.h"

namespace cpu = taco::cpu;
using namespace taco::test;

namespace {

// The formula of kernels/adamw.h, in double, one step.
struct AdamWReference {
  std::vector<double> params, m, v;

  void step(const std::vector<float>& grads, const cpu::AdamWParams& hp) {
    const double beta1 = hp.beta1, beta2 = hp.beta2;
    for (size_t i = 0; i < params.size(); ++i) {
      const double g = double(grads[i]) * double(hp.grad_scale);
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(beta1, hp.step));
      const double v_hat = v[i] / (1 - std::pow(beta2, hp.step));
      params[i] -= double(hp.lr) * (m_hat / (std::sqrt(v_hat) + double(hp.eps)) +
                                    double(hp.weight_decay) * params[i]);
    }
  }
};

// Runs `steps` AdamW steps from random parameters and zero moments, fp32 kernel and double
// reference on the same fp32 gradients. Tolerance: each step rounds params, m and v a few times
// in fp32 (6e-8 relative each); after <= 10 steps their relative L2 error stays below ~1e-6,
// while a wrong bias correction, decay or scale moves the parameters by lr * O(1) = 1e-2, i.e.
// 1e-2 relative.
void check_adamw(cpu::AdamWParams hp, int steps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " steps " + std::to_string(steps));
  const size_t n = 50000;  // above the kernel's parallel threshold
  std::vector<float> params = random_normal(n, seed), m(n, 0.f), v(n, 0.f);
  AdamWReference ref{to_double(params), std::vector<double>(n), std::vector<double>(n)};
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> grads = random_normal(n, seed + t, 0.1f, 1.f);
    hp.step = t;
    cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), n, hp);
    ref.step(grads, hp);
  }
  EXPECT_LT(relative_l2(m, ref.m), 2e-6) << "m";
  EXPECT_LT(relative_l2(v, ref.v), 2e-6) << "v";
  EXPECT_LT(relative_l2(params, ref.params), 2e-6) << "params";
}

constexpr cpu::AdamWParams kTypical{/*lr=*/1e-2f,  /*beta1=*/0.9f,        /*beta2=*/0.95f,
                                    /*eps=*/1e-8f, /*weight_decay=*/0.1f, /*grad_scale=*/1.f,
                                    /*step=*/1};

TEST(KernelAdamW, OneStepMatchesTheFormula) { check_adamw(kTypical, 1); }

TEST(KernelAdamW, SeveralStepsMatchTheFormula) { check_adamw(kTypical, 10); }

TEST(KernelAdamW, WithoutWeightDecayMatchesTheFormula) {
  cpu::AdamWParams hp = kTypical;
  hp.weight_decay = 0.f;
  check_adamw(hp, 5);
}

// grad_scale (clipping) multiplies the gradient before both moments; a large eps makes the
// difference between eps inside and outside the square root visible.
TEST(KernelAdamW, GradScaleAndLargeEpsMatchTheFormula) {
  cpu::AdamWParams hp = kTypical;
  hp.grad_scale = 0.37f;
  hp.eps = 0.05f;
  check_adamw(hp, 4);
}

// With a zero gradient both moments stay 0, so only the decoupled decay moves the parameters:
// p <- p - lr * wd * p, exactly what the fp32 formula computes.
TEST(KernelAdamW, ZeroGradientOnlyDecays) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t n = 1000;
  const std::vector<float> start = random_normal(n, seed), grads(n, 0.f);
  std::vector<float> params = start, m(n, 0.f), v(n, 0.f);
  cpu::AdamWParams hp = kTypical;
  hp.step = 3;
  cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), n, hp);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(m[i], 0.f);
    ASSERT_EQ(params[i], start[i] - hp.lr * (0.f + hp.weight_decay * start[i])) << i;
  }
  hp.weight_decay = 0.f;
  const std::vector<float> before = params;
  cpu::adamw_update(params.data(), grads.data(), m.data(), v.data(), n, hp);
  EXPECT_TRUE(bitwise_equal(params, before)) << "no gradient and no decay: no change";
}

// Naive sum in double; the kernel's blocked order differs only by rounding (~n * 1e-16).
TEST(KernelGradNorm, SumOfSquaresMatchesNaiveDoubleSum) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(100003)}) {
    const std::vector<float> x = random_normal(n, seed + n, 0.f, 3.f);
    const std::vector<double> xd = to_double(x);
    const double naive = dot(xd, xd);
    EXPECT_NEAR(cpu::sum_of_squares(x.data(), n), naive, 1e-12 * naive + 1e-300) << n;
    EXPECT_NEAR(cpu::sum_of_squares(xd.data(), n), naive, 1e-12 * naive + 1e-300) << n;
  }
}

// Accumulated in double, so splitting the range (as ranks and parameter groups do) changes the
// total only by double rounding, and the thread count changes nothing at all.
TEST(KernelGradNorm, SumOfSquaresIsSplitAndThreadIndependent) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t n = 200001, cut = 77777;
  const std::vector<float> x = random_normal(n, seed);
  const double whole = cpu::sum_of_squares(x.data(), n);
  const double parts =
      cpu::sum_of_squares(x.data(), cut) + cpu::sum_of_squares(x.data() + cut, n - cut);
  EXPECT_NEAR(parts, whole, 1e-12 * whole);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  const double other_threads = cpu::sum_of_squares(x.data(), n);
  omp_set_num_threads(threads);
  EXPECT_EQ(other_threads, whole);
  EXPECT_EQ(cpu::sum_of_squares(x.data(), n), whole);
}

TEST(KernelGradNorm, ClipScaleShrinksOnlyNormsAboveTheClip) {
  EXPECT_EQ(taco::clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(taco::clip_scale(1.0, 1.0), 1.0f);  // exactly at the clip: unchanged
  EXPECT_FLOAT_EQ(taco::clip_scale(4.0, 1.0), 0.25f);
  EXPECT_FLOAT_EQ(taco::clip_scale(3.0, 1.5), 0.5f);
  EXPECT_EQ(taco::clip_scale(1e6, 0.0), 1.0f);   // grad_clip 0 disables clipping
  EXPECT_EQ(taco::clip_scale(1e6, -1.0), 1.0f);  // so does a negative one
  // Scaled by clip_scale, any norm above the clip lands on the clip.
  const double norm = 7.3, clip = 2.0;
  EXPECT_NEAR(norm * taco::clip_scale(norm, clip), clip, 1e-6);
}

}  // namespace
