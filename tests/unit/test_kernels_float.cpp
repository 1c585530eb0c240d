// The fp32 CPU kernels against their fp64 twins on the same random inputs (within
// kFloatTolerance relative L2: see test_kernels_common.h), and their determinism: two calls give
// bit-identical outputs, and so does a call under another thread count (each op's summation
// order depends only on the shapes). Shapes cross the matmul's register tiles and cache blocks
// and the elementwise ops' parallel thresholds, so several threads really share the work.
#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "tests/unit/test_kernels_common.h"

namespace cpu = taco::cpu;
using namespace taco::test;

namespace {

constexpr int B = 4, T = 64, C = 64, NH = 4, N = B * T;

template <typename Real>
using Outputs = std::vector<std::pair<std::string, std::vector<Real>>>;

template <typename Real>
std::vector<Real> random_real(size_t n, uint64_t seed, double stddev = 1.0) {
  const auto x = random_double(n, seed, stddev);
  return std::vector<Real>(x.begin(), x.end());
}

std::vector<int32_t> random_ids(int n, int bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = int32_t(rng() % uint64_t(bound));
  return ids;
}

// Each op family runs forward then backward (dout random, gradients starting from random values)
// in precision Real and returns every output.
struct Embeddings {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const int V = 100, vocab_start = 50;  // tokens 0..199: half of them in another shard
    const auto tokens = random_ids(N, 200, seed);
    const auto wte = random_real<Real>(size_t(V) * C, seed + 1);
    const auto wpe = random_real<Real>(size_t(T) * C, seed + 2);
    const auto dout = random_real<Real>(size_t(N) * C, seed + 3);
    auto dwte = random_real<Real>(wte.size(), seed + 4);
    auto dwpe = random_real<Real>(wpe.size(), seed + 5);
    std::vector<Real> out(dout.size());
    cpu::token_embedding_forward(out.data(), tokens.data(), wte.data(), N, C, vocab_start, V);
    cpu::position_embedding_forward(out.data(), wpe.data(), B, T, C);
    cpu::token_embedding_backward(dwte.data(), dout.data(), tokens.data(), N, C, vocab_start, V);
    cpu::position_embedding_backward(dwpe.data(), dout.data(), B, T, C);
    return {{"out", out}, {"dwte", dwte}, {"dwpe", dwpe}};
  }
};

struct LayerNorm {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const auto inp = random_real<Real>(size_t(N) * C, seed, 3.0);
    const auto weight = random_real<Real>(C, seed + 1), bias = random_real<Real>(C, seed + 2);
    const auto dout = random_real<Real>(inp.size(), seed + 3);
    auto dinp = random_real<Real>(inp.size(), seed + 4);
    auto dweight = random_real<Real>(C, seed + 5), dbias = random_real<Real>(C, seed + 6);
    std::vector<Real> out(inp.size()), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C);
    cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), N, C);
    return {{"out", out},   {"mean", mean},       {"rstd", rstd},
            {"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}};
  }
};

// IC = 320 spans two K blocks (256), OC = 200 and N = 256 cross the 64-wide blocks unevenly.
struct Matmul {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const int IC = 320, OC = 200;
    const auto inp = random_real<Real>(size_t(N) * IC, seed);
    const auto weight = random_real<Real>(size_t(OC) * IC, seed + 1);
    const auto bias = random_real<Real>(OC, seed + 2);
    const auto dout = random_real<Real>(size_t(N) * OC, seed + 3);
    auto dinp = random_real<Real>(inp.size(), seed + 4);
    auto dweight = random_real<Real>(weight.size(), seed + 5);
    auto dbias = random_real<Real>(OC, seed + 6);
    std::vector<Real> out(dout.size());
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
    cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                         weight.data(), N, IC, OC);
    return {{"out", out}, {"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}};
  }
};

struct Attention {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const auto qkv = random_real<Real>(size_t(N) * 3 * C, seed);
    const auto dout = random_real<Real>(size_t(N) * C, seed + 1);
    auto dqkv = random_real<Real>(qkv.size(), seed + 2);
    std::vector<Real> out(dout.size()), att(size_t(B) * NH * T * T);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    return {{"out", out}, {"att", att}, {"dqkv", dqkv}};
  }
};

// n above the elementwise ops' parallel thresholds.
struct Elementwise {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const size_t n = size_t(1) << 17;
    const auto x = random_real<Real>(n, seed, 2.0), y = random_real<Real>(n, seed + 1);
    const auto dout = random_real<Real>(n, seed + 2);
    auto dx = random_real<Real>(n, seed + 3), dy = random_real<Real>(n, seed + 4);
    std::vector<Real> gelu(n), sum(n);
    cpu::gelu_forward(gelu.data(), x.data(), n);
    cpu::gelu_backward(dx.data(), x.data(), dout.data(), n);
    cpu::residual_forward(sum.data(), x.data(), y.data(), n);
    cpu::residual_backward(dx.data(), dy.data(), dout.data(), n);
    std::vector<Real> scaled = y;
    cpu::add_inplace(scaled.data(), x.data(), n);
    cpu::scale_inplace(scaled.data(), Real(-0.75), n);
    return {{"gelu", gelu}, {"sum", sum}, {"dx", dx}, {"dy", dy}, {"scaled", scaled}};
  }
};

// The cross-entropy chain on one shard of a vocab-parallel head: V = 300 columns, 290 real,
// vocab_start 1000, targets partly in other shards.
struct CrossEntropy {
  template <typename Real>
  static Outputs<Real> run(uint64_t seed) {
    const int V = 300, V_valid = 290, vocab_start = 1000;
    const auto logits = random_real<Real>(size_t(N) * V, seed, 3.0);
    auto targets = random_ids(N, 2 * V_valid, seed + 1);
    for (auto& t : targets) t += vocab_start - V_valid / 2;
    std::vector<Real> row_max(N), sumexp(N), target_logit(N), loss(N), dlogits(logits.size());
    cpu::crossentropy_row_max(row_max.data(), logits.data(), N, V, V_valid);
    cpu::crossentropy_sumexp_target(sumexp.data(), target_logit.data(), logits.data(),
                                    row_max.data(), targets.data(), N, V, V_valid, vocab_start);
    cpu::crossentropy_loss(loss.data(), row_max.data(), sumexp.data(), target_logit.data(), N);
    cpu::crossentropy_backward(dlogits.data(), logits.data(), row_max.data(), sumexp.data(),
                               targets.data(), Real(1) / N, N, V, V_valid, vocab_start);
    return {{"row_max", row_max},
            {"sumexp", sumexp},
            {"target_logit", target_logit},
            {"loss", loss},
            {"dlogits", dlogits}};
  }
};

template <typename Op>
void check_fp32_against_fp64_and_determinism() {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Outputs<double> reference = Op::template run<double>(seed);
  const Outputs<float> first = Op::template run<float>(seed);
  const Outputs<float> second = Op::template run<float>(seed);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);  // an uneven split on any machine
  const Outputs<float> other_threads = Op::template run<float>(seed);
  omp_set_num_threads(threads);
  ASSERT_EQ(first.size(), reference.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const std::string& name = first[i].first;
    EXPECT_LT(relative_l2(first[i].second, reference[i].second), kFloatTolerance) << name;
    EXPECT_TRUE(bitwise_equal(first[i].second, second[i].second)) << name << ": second call";
    EXPECT_TRUE(bitwise_equal(first[i].second, other_threads[i].second)) << name << ": 3 threads";
  }
}

TEST(KernelFloat, EmbeddingsMatchDoubleAndRepeatBitwise) {
  check_fp32_against_fp64_and_determinism<Embeddings>();
}
TEST(KernelFloat, LayerNormMatchesDoubleAndRepeatsBitwise) {
  check_fp32_against_fp64_and_determinism<LayerNorm>();
}
TEST(KernelFloat, MatmulMatchesDoubleAndRepeatsBitwise) {
  check_fp32_against_fp64_and_determinism<Matmul>();
}
TEST(KernelFloat, AttentionMatchesDoubleAndRepeatsBitwise) {
  check_fp32_against_fp64_and_determinism<Attention>();
}
TEST(KernelFloat, GeluAndResidualMatchDoubleAndRepeatBitwise) {
  check_fp32_against_fp64_and_determinism<Elementwise>();
}
TEST(KernelFloat, CrossEntropyMatchesDoubleAndRepeatsBitwise) {
  check_fp32_against_fp64_and_determinism<CrossEntropy>();
}

// The fused classifier overwrites the logits with their gradient in place.
TEST(KernelFloat, CrossEntropyBackwardMayOverwriteItsLogits) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int rows = 16, V = 40, V_valid = 37;
  auto logits = random_real<float>(size_t(rows) * V, seed, 3.0);
  const auto targets = random_ids(rows, V_valid, seed + 1);
  std::vector<float> row_max(rows), sumexp(rows), target_logit(rows), dlogits(logits.size());
  cpu::crossentropy_row_max(row_max.data(), logits.data(), rows, V, V_valid);
  cpu::crossentropy_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), row_max.data(),
                                  targets.data(), rows, V, V_valid, 0);
  cpu::crossentropy_backward(dlogits.data(), logits.data(), row_max.data(), sumexp.data(),
                             targets.data(), 0.5f, rows, V, V_valid, 0);
  cpu::crossentropy_backward(logits.data(), logits.data(), row_max.data(), sumexp.data(),
                             targets.data(), 0.5f, rows, V, V_valid, 0);
  EXPECT_TRUE(bitwise_equal(logits, dlogits));
}

}  // namespace
