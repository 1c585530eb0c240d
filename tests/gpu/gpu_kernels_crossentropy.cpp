// CUDA cross-entropy (kernels/cuda/crossentropy.cu): the vocab-parallel pieces and the fused
// classifier against the CPU pieces on the same bf16 logits.
//
// Tolerances:
//   row_max, target_logit: exact (a max and a lookup of the same values).
//   sumexp: relative error < 1e-5 per row against a double reference: the GPU's fp32 tree sum
//     and its fast exp (relative error ~1e-6 for arguments down to -20).
//   loss: |error| < 1e-4 (losses are ~11 at V = 50257). The fused kernel rescales its running
//     sum at each new maximum, adding ~1e-6 relative per rescale to the sum; 1e-4 leaves margin.
//   dlogits: relative L2 < 1e-2 (fp32 math, bf16 output: 2^-9 relative per element); padding
//     columns exactly 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/crossentropy.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

struct Case {
  int N, V, V_valid, vocab_start;
  int vocab_total;  // targets are drawn from [0, vocab_total)
};

std::string name(const Case& c) {
  return test::describe("N", c.N, " V", c.V, " valid ", c.V_valid, " start ", c.vocab_start);
}

// Logits with a few sharp rows (one large logit), so max and exp are exercised off the bulk.
std::vector<float> random_logits(const Case& c, uint64_t seed) {
  auto logits = test::random_normal(size_t(c.N) * c.V, seed, 0.f, 2.f);
  std::mt19937_64 rng(seed + 7);
  for (int n = 0; n < c.N; n += 5) logits[size_t(n) * c.V + rng() % c.V_valid] += 15.f;
  return test::rounded_to_bf16(logits);
}

std::vector<int32_t> random_targets(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(c.N);
  for (auto& x : t) x = int32_t(rng() % uint64_t(c.vocab_total));
  return t;
}

// Padding columns of dlogits are exactly zero.
size_t nonzero_padding(const std::vector<float>& dlogits, const Case& c) {
  size_t bad = 0;
  for (int n = 0; n < c.N; ++n)
    for (int v = c.V_valid; v < c.V; ++v) bad += dlogits[size_t(n) * c.V + v] != 0.f;
  return bad;
}

struct Reference {
  std::vector<float> row_max, sumexp, target_logit, loss, dlogits;
};

// The reference runs in double: a sequential fp32 sum over 50257 terms is itself off by up to
// ~3e-4 relative (measured), more than the GPU's tree-ordered fp32 sum.
Reference cpu_reference(const std::vector<float>& logits_f, const std::vector<int32_t>& targets,
                        const Case& c, float dloss) {
  const std::vector<double> logits(logits_f.begin(), logits_f.end());
  std::vector<double> row_max(c.N), sumexp(c.N), target_logit(c.N), loss(c.N),
      dlogits(logits.size());
  cpu::crossentropy_row_max(row_max.data(), logits.data(), c.N, c.V, c.V_valid);
  cpu::crossentropy_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), row_max.data(),
                                  targets.data(), c.N, c.V, c.V_valid, c.vocab_start);
  cpu::crossentropy_loss(loss.data(), row_max.data(), sumexp.data(), target_logit.data(), c.N);
  cpu::crossentropy_backward(dlogits.data(), logits.data(), row_max.data(), sumexp.data(),
                             targets.data(), double(dloss), c.N, c.V, c.V_valid, c.vocab_start);
  auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return Reference{f(row_max), f(sumexp), f(target_logit), f(loss), f(dlogits)};
}

double max_relative_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - ref[i]) / std::fabs(double(ref[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

double max_abs_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - ref[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

TEST(CudaCrossEntropy, VocabParallelPiecesMatchCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  const std::vector<Case> cases = {
      {37, 136, 131, 0, 131},        // odd sizes, one shard
      {16, 50304, 50257, 0, 50257},  // GPT-2, one shard
      {37, 136, 100, 200, 600},      // a shard: most targets belong to other ranks
  };
  for (const Case& c : cases) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(c), " seed ", seed));
    const auto logits = random_logits(c, seed);
    const auto targets = random_targets(c, seed + 1);
    const float dloss = 1.f / c.N;
    const Reference ref = cpu_reference(logits, targets, c, dloss);

    DeviceArray<bf16> d_logits(to_bf16(logits));
    DeviceArray<int32_t> d_targets(targets);
    DeviceArray<float> d_max(c.N), d_sum(c.N), d_target(c.N), d_loss(c.N);
    cuda::crossentropy_row_max(d_max.get(), d_logits.get(), c.N, c.V, c.V_valid, nullptr);
    cuda::crossentropy_sumexp_target(d_sum.get(), d_target.get(), d_logits.get(), d_max.get(),
                                     d_targets.get(), c.N, c.V, c.V_valid, c.vocab_start, nullptr);
    cuda::crossentropy_loss(d_loss.get(), d_max.get(), d_sum.get(), d_target.get(), c.N, nullptr);
    // In place, as the trainer runs it.
    cuda::crossentropy_backward(d_logits.get(), d_logits.get(), d_max.get(), d_sum.get(),
                                d_targets.get(), dloss, c.N, c.V, c.V_valid, c.vocab_start,
                                nullptr);
    EXPECT_EQ(test::count_bit_differences(d_max.download(), ref.row_max), 0u);
    EXPECT_EQ(test::count_bit_differences(d_target.download(), ref.target_logit), 0u);
    EXPECT_LT(max_relative_error(d_sum.download(), ref.sumexp), 1e-5);
    EXPECT_LT(max_abs_error(d_loss.download(), ref.loss), 1e-4);
    const auto dlogits = to_float(d_logits.download());
    EXPECT_LT(test::relative_l2(dlogits, ref.dlogits), 1e-2);
    EXPECT_EQ(nonzero_padding(dlogits, c), 0u);
  }
}

TEST(CudaCrossEntropy, ShardOfOnlyPaddingReportsReductionIdentities) {
  TACO_SKIP_WITHOUT_GPU();
  const Case c{5, 64, 0, 50304, 50257};
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const auto logits = test::random_bf16_values(size_t(c.N) * c.V, seed);
  const auto targets = random_targets(c, seed + 1);
  DeviceArray<bf16> d_logits(to_bf16(logits));
  DeviceArray<int32_t> d_targets(targets);
  DeviceArray<float> d_max(c.N), d_sum(c.N), d_target(c.N);
  cuda::crossentropy_row_max(d_max.get(), d_logits.get(), c.N, c.V, c.V_valid, nullptr);
  cuda::crossentropy_sumexp_target(d_sum.get(), d_target.get(), d_logits.get(), d_max.get(),
                                   d_targets.get(), c.N, c.V, c.V_valid, c.vocab_start, nullptr);
  cuda::crossentropy_backward(d_logits.get(), d_logits.get(), d_max.get(), d_sum.get(),
                              d_targets.get(), 1.f, c.N, c.V, c.V_valid, c.vocab_start, nullptr);
  for (float m : d_max.download()) EXPECT_EQ(m, -INFINITY);
  for (float s : d_sum.download()) EXPECT_EQ(s, 0.f);
  for (float t : d_target.download()) EXPECT_EQ(t, 0.f);
  EXPECT_EQ(nonzero_padding(to_float(d_logits.download()), c), 0u);
}

TEST(CudaCrossEntropy, FusedClassifierMatchesPiecesAndWritesGradientInPlace) {
  TACO_SKIP_WITHOUT_GPU();
  // Rows held in registers (136, 50304 columns) and a row too wide for that (73728), read twice.
  const std::vector<Case> cases = {
      {37, 136, 131, 0, 131}, {64, 50304, 50257, 0, 50257}, {5, 73728, 73700, 0, 73700}};
  for (const Case& c : cases) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(c), " seed ", seed));
    const auto logits = random_logits(c, seed);
    const auto targets = random_targets(c, seed + 1);
    const float dloss = 1.f / c.N;
    const Reference ref = cpu_reference(logits, targets, c, dloss);

    DeviceArray<bf16> d_logits(to_bf16(logits));
    DeviceArray<int32_t> d_targets(targets);
    DeviceArray<float> d_loss(c.N);
    // Evaluation: losses only, logits untouched.
    cuda::fused_classifier(d_logits.get(), d_loss.get(), d_targets.get(), dloss, c.N, c.V,
                           c.V_valid, false, nullptr);
    EXPECT_LT(max_abs_error(d_loss.download(), ref.loss), 1e-4);
    EXPECT_EQ(test::count_bit_differences(to_float(d_logits.download()), logits), 0u);

    d_loss.poison();
    cuda::fused_classifier(d_logits.get(), d_loss.get(), d_targets.get(), dloss, c.N, c.V,
                           c.V_valid, true, nullptr);
    EXPECT_LT(max_abs_error(d_loss.download(), ref.loss), 1e-4);
    const auto dlogits = to_float(d_logits.download());
    EXPECT_LT(test::relative_l2(dlogits, ref.dlogits), 1e-2);
    EXPECT_EQ(nonzero_padding(dlogits, c), 0u);
  }
}

#else

TEST(CudaCrossEntropy, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
