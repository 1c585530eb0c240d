// Every CPU kernel with a backward, checked in double: the backward's analytic gradients of a
// random projection L = sum(out * r) (so dout = r) against central finite differences on every
// input element (tolerance and why: test_kernels_common.h). Gradient buffers start from random
// values, so the checks also hold the ops to adding into them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
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

// Small enough that two forward passes per input element stay in milliseconds.
constexpr int B = 2, T = 5, C = 8, NH = 2, N = B * T;

TEST(KernelGradients, TokenEmbeddingScattersIntoItsVocabShard) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int V = 6, vocab_start = 3;  // this shard holds global ids 3..8
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(N);
  for (auto& t : tokens) t = int32_t(rng() % 12);
  tokens[0] = tokens[1] = 4;    // a repeated token sums two rows of dout
  tokens[2] = 0;                // below the shard
  tokens[3] = 11;               // above the shard
  tokens[4] = vocab_start + V;  // the first id past the shard
  tokens[5] = vocab_start - 1;  // the last id before it
  auto wte = random_double(size_t(V) * C, seed + 1);
  auto r = random_double(size_t(N) * C, seed + 2);
  std::vector<double> out(size_t(N) * C);
  auto loss = [&] {
    cpu::token_embedding_forward(out.data(), tokens.data(), wte.data(), N, C, vocab_start, V);
    return dot(out, r);
  };
  loss();
  for (int n = 0; n < N; ++n) {
    const int row = tokens[n] - vocab_start;
    for (int c = 0; c < C; ++c) {
      const double expected = (row >= 0 && row < V) ? wte[row * C + c] : 0.0;
      ASSERT_EQ(out[n * C + c], expected) << "token " << tokens[n] << " column " << c;
    }
  }
  // dwte sits between guard rows that no token may touch.
  const auto guarded0 = random_double(size_t(V + 2) * C, seed + 3);
  auto guarded = guarded0;
  cpu::token_embedding_backward(guarded.data() + C, r.data(), tokens.data(), N, C, vocab_start, V);
  for (int c = 0; c < C; ++c) {
    ASSERT_EQ(guarded[c], guarded0[c]) << "row before the shard written";
    ASSERT_EQ(guarded[(V + 1) * C + c], guarded0[(V + 1) * C + c]) << "row after the shard written";
  }
  const std::vector<double> dwte(guarded.begin() + C, guarded.end() - C);
  const std::vector<double> dwte0(guarded0.begin() + C, guarded0.end() - C);
  expect_gradient_matches(minus(dwte, dwte0), numerical_gradient(wte, loss), "dwte");
}

TEST(KernelGradients, PositionEmbeddingAddsRowsAndSumsTheBatch) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int T_max = T + 2;  // wpe has rows the sequence does not reach: their gradient is 0
  auto wpe = random_double(size_t(T_max) * C, seed);
  const auto residual = random_double(size_t(N) * C, seed + 1);
  auto r = random_double(residual.size(), seed + 2);
  std::vector<double> out;
  auto loss = [&] {
    out = residual;
    cpu::position_embedding_forward(out.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  const auto dwpe0 = random_double(wpe.size(), seed + 3);
  auto dwpe = dwpe0;
  cpu::position_embedding_backward(dwpe.data(), r.data(), B, T, C);
  expect_gradient_matches(minus(dwpe, dwpe0), numerical_gradient(wpe, loss), "dwpe");
}

TEST(KernelGradients, LayerNormMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto inp = random_double(size_t(N) * C, seed, 2.0);
  auto weight = random_double(C, seed + 1);
  auto bias = random_double(C, seed + 2);
  auto r = random_double(inp.size(), seed + 3);
  std::vector<double> out(inp.size()), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), N, C);
    return dot(out, r);
  };
  loss();
  const auto dinp0 = random_double(inp.size(), seed + 4);
  const auto dweight0 = random_double(C, seed + 5), dbias0 = random_double(C, seed + 6);
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), r.data(), inp.data(),
                          weight.data(), mean.data(), rstd.data(), N, C);
  expect_gradient_matches(minus(dinp, dinp0), numerical_gradient(inp, loss), "dinp");
  expect_gradient_matches(minus(dweight, dweight0), numerical_gradient(weight, loss), "dweight");
  expect_gradient_matches(minus(dbias, dbias0), numerical_gradient(bias, loss), "dbias");
}

// IC = 7 and OC = 9 are not multiples of the 4-wide double register tile, N = 10 not of its 4
// rows: both the full-tile and the edge code run.
void check_matmul_gradients(bool with_bias, bool with_dinp) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int IC = 7, OC = 9;
  auto inp = random_double(size_t(N) * IC, seed);
  auto weight = random_double(size_t(OC) * IC, seed + 1);
  auto bias = random_double(OC, seed + 2);
  auto r = random_double(size_t(N) * OC, seed + 3);
  std::vector<double> out(r.size());
  auto loss = [&] {
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N,
                        IC, OC);
    return dot(out, r);
  };
  const auto dinp0 = random_double(inp.size(), seed + 4);
  const auto dweight0 = random_double(weight.size(), seed + 5);
  const auto dbias0 = random_double(bias.size(), seed + 6);
  auto dinp = dinp0, dweight = dweight0, dbias = dbias0;
  cpu::matmul_backward(with_dinp ? dinp.data() : nullptr, dweight.data(),
                       with_bias ? dbias.data() : nullptr, r.data(), inp.data(), weight.data(), N,
                       IC, OC);
  expect_gradient_matches(minus(dweight, dweight0), numerical_gradient(weight, loss), "dweight");
  if (with_dinp) {
    expect_gradient_matches(minus(dinp, dinp0), numerical_gradient(inp, loss), "dinp");
  } else {
    EXPECT_TRUE(bitwise_equal(dinp, dinp0)) << "dinp == nullptr must skip dinp";
  }
  if (with_bias) {
    expect_gradient_matches(minus(dbias, dbias0), numerical_gradient(bias, loss), "dbias");
  } else {
    EXPECT_TRUE(bitwise_equal(dbias, dbias0)) << "dbias == nullptr must skip dbias";
  }
}

TEST(KernelGradients, MatmulWithBiasMatchesFiniteDifferences) {
  check_matmul_gradients(true, true);
}
TEST(KernelGradients, MatmulWithoutBiasMatchesFiniteDifferences) {
  check_matmul_gradients(false, true);
}
TEST(KernelGradients, MatmulWithoutInputGradientStillGivesWeightGradients) {
  check_matmul_gradients(true, false);
}

TEST(KernelGradients, AttentionMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto qkv = random_double(size_t(N) * 3 * C, seed);
  auto r = random_double(size_t(N) * C, seed + 1);
  std::vector<double> out(r.size()), att(size_t(B) * NH * T * T);
  auto loss = [&] {
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, r);
  };
  loss();
  // att rows are causal probability distributions.
  for (int row = 0; row < B * NH * T; ++row) {
    const int t = row % T;
    double sum = 0;
    for (int s = 0; s < T; ++s) {
      const double p = att[size_t(row) * T + s];
      if (s > t) {
        ASSERT_EQ(p, 0.0) << "att above the diagonal, row " << row << " s " << s;
      } else {
        ASSERT_GT(p, 0.0);
        sum += p;
      }
    }
    ASSERT_NEAR(sum, 1.0, 1e-14) << "row " << row;
  }
  const auto dqkv0 = random_double(qkv.size(), seed + 2);
  auto dqkv = dqkv0;
  cpu::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  expect_gradient_matches(minus(dqkv, dqkv0), numerical_gradient(qkv, loss), "dqkv");
}

TEST(KernelGradients, GeluMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t n = 64;
  auto inp = random_double(n, seed, 2.0);  // wide enough to reach both tails
  auto r = random_double(n, seed + 1);
  std::vector<double> out(n);
  auto loss = [&] {
    cpu::gelu_forward(out.data(), inp.data(), n);
    return dot(out, r);
  };
  const auto dinp0 = random_double(n, seed + 2);
  auto dinp = dinp0;
  cpu::gelu_backward(dinp.data(), inp.data(), r.data(), n);
  expect_gradient_matches(minus(dinp, dinp0), numerical_gradient(inp, loss), "dinp");
}

TEST(KernelGradients, ResidualMatchesFiniteDifferences) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t n = size_t(N) * C;
  auto a = random_double(n, seed), b = random_double(n, seed + 1), r = random_double(n, seed + 2);
  std::vector<double> out(n);
  auto loss = [&] {
    cpu::residual_forward(out.data(), a.data(), b.data(), n);
    return dot(out, r);
  };
  const auto da0 = random_double(n, seed + 3), db0 = random_double(n, seed + 4);
  auto da = da0, db = db0;
  cpu::residual_backward(da.data(), db.data(), r.data(), n);
  expect_gradient_matches(minus(da, da0), numerical_gradient(a, loss), "da");
  expect_gradient_matches(minus(db, db0), numerical_gradient(b, loss), "db");
}

// The vocab-parallel cross-entropy chain over S shards of W columns: shard s holds global ids
// [s*W, (s+1)*W), of which those below `vocab` are real and the rest padding. The per-shard
// results are combined as the all-reduces would (MAX of row_max, SUM of sumexp and target_logit).
// With S = 1 it is the plain, unsplit cross-entropy.
struct CrossEntropyRun {
  std::vector<double> row_max, loss, dlogits;  // dlogits [N, S*W]
};

CrossEntropyRun cross_entropy_sharded(const std::vector<double>& logits,
                                      const std::vector<int32_t>& targets, int rows, int S, int W,
                                      int vocab, double dloss) {
  const int width = S * W;
  CrossEntropyRun run;
  run.row_max.assign(rows, -std::numeric_limits<double>::infinity());
  std::vector<double> sumexp(rows, 0.0), target_logit(rows, 0.0);
  std::vector<std::vector<double>> shards(S, std::vector<double>(size_t(rows) * W));
  std::vector<int> valid(S);
  for (int s = 0; s < S; ++s) {
    valid[s] = std::clamp(vocab - s * W, 0, W);
    for (int n = 0; n < rows; ++n)
      for (int v = 0; v < W; ++v) shards[s][n * W + v] = logits[size_t(n) * width + s * W + v];
  }
  std::vector<double> part_a(rows), part_b(rows);
  for (int s = 0; s < S; ++s) {
    cpu::crossentropy_row_max(part_a.data(), shards[s].data(), rows, W, valid[s]);
    for (int n = 0; n < rows; ++n) run.row_max[n] = std::max(run.row_max[n], part_a[n]);
  }
  for (int s = 0; s < S; ++s) {
    cpu::crossentropy_sumexp_target(part_a.data(), part_b.data(), shards[s].data(),
                                    run.row_max.data(), targets.data(), rows, W, valid[s], s * W);
    for (int n = 0; n < rows; ++n) {
      sumexp[n] += part_a[n];
      target_logit[n] += part_b[n];
    }
  }
  run.loss.resize(rows);
  cpu::crossentropy_loss(run.loss.data(), run.row_max.data(), sumexp.data(), target_logit.data(),
                         rows);
  run.dlogits.resize(logits.size());
  for (int s = 0; s < S; ++s) {
    // In place, as the fused classifier calls it: padding must be overwritten with 0.
    std::vector<double>& d = shards[s];
    cpu::crossentropy_backward(d.data(), d.data(), run.row_max.data(), sumexp.data(),
                               targets.data(), dloss, rows, W, valid[s], s * W);
    for (int n = 0; n < rows; ++n)
      for (int v = 0; v < W; ++v) run.dlogits[size_t(n) * width + s * W + v] = d[n * W + v];
  }
  return run;
}

double sum(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return s;
}

// Logits of `rows` x `width` with columns >= vocab set to a huge value: if padding took part in
// the max or the sum, the loss and every gradient would change completely.
std::vector<double> padded_logits(int rows, int width, int vocab, uint64_t seed) {
  auto logits = random_double(size_t(rows) * width, seed, 3.0);
  for (int n = 0; n < rows; ++n)
    for (int v = vocab; v < width; ++v) logits[size_t(n) * width + v] = 50.0 + v;
  return logits;
}

std::vector<int32_t> random_targets(int rows, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> targets(rows);
  for (auto& t : targets) t = int32_t(rng() % uint64_t(vocab));
  return targets;
}

// L = dloss * sum_n loss[n]: the backward takes one dloss for all rows.
void check_cross_entropy_gradient(int width, int vocab) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int rows = 6;
  auto logits = padded_logits(rows, width, vocab, seed);
  const auto targets = random_targets(rows, vocab, seed + 1);
  const double dloss = 0.5 + random_double(1, seed + 2)[0] * 0.1;
  const auto run = cross_entropy_sharded(logits, targets, rows, 1, width, vocab, dloss);
  for (int n = 0; n < rows; ++n) {
    double best = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < vocab; ++v) best = std::max(best, logits[size_t(n) * width + v]);
    EXPECT_EQ(run.row_max[n], best) << "row " << n << ": padding must never win the max";
  }
  auto loss = [&] {
    return dloss * sum(cross_entropy_sharded(logits, targets, rows, 1, width, vocab, 0.0).loss);
  };
  // Padded columns: the finite difference is exactly 0 there, and so must dlogits be.
  expect_gradient_matches(run.dlogits, numerical_gradient(logits, loss), "dlogits");
  for (int n = 0; n < rows; ++n)
    for (int v = vocab; v < width; ++v) EXPECT_EQ(run.dlogits[size_t(n) * width + v], 0.0);
}

TEST(KernelGradients, CrossEntropyChainMatchesFiniteDifferences) {
  check_cross_entropy_gradient(11, 11);
}

TEST(KernelGradients, CrossEntropyPaddedColumnsNeverWinAndGetNoGradient) {
  check_cross_entropy_gradient(12, 9);
}

// Vocabulary 15 padded to 16 and split into 2 shards of 8 (the second holds one padded column):
// the sharded chain equals the unsplit one up to the order of the sumexp additions (~1e-16
// relative per term in double, hence 1e-13).
TEST(KernelGradients, CrossEntropyTwoVocabShardsEqualTheUnsplitChain) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int rows = 8, W = 8, vocab = 15;
  const auto logits = padded_logits(rows, 2 * W, vocab, seed);
  auto targets = random_targets(rows, vocab, seed + 1);
  targets[0] = 2;   // in shard 0
  targets[1] = 14;  // the last real id, in shard 1
  const double dloss = 0.25;
  const auto whole = cross_entropy_sharded(logits, targets, rows, 1, 2 * W, vocab, dloss);
  const auto split = cross_entropy_sharded(logits, targets, rows, 2, W, vocab, dloss);
  EXPECT_EQ(split.row_max, whole.row_max);
  EXPECT_LT(relative_l2(split.loss, whole.loss), 1e-13);
  EXPECT_LT(relative_l2(split.dlogits, whole.dlogits), 1e-13);
  for (int n = 0; n < rows; ++n) EXPECT_EQ(split.dlogits[size_t(n) * 2 * W + 2 * W - 1], 0.0);
}

// A shard whose columns are all padding (more ranks than the vocabulary needs) contributes the
// identities: row_max -inf, sumexp 0, target_logit 0, and a zero gradient.
TEST(KernelGradients, CrossEntropyShardOfOnlyPaddingIsNeutral) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int rows = 4, W = 6, vocab = 10;
  const auto logits = padded_logits(rows, 3 * W, vocab, seed);
  const auto targets = random_targets(rows, vocab, seed + 1);
  const auto whole = cross_entropy_sharded(logits, targets, rows, 1, 3 * W, vocab, 1.0);
  const auto split = cross_entropy_sharded(logits, targets, rows, 3, W, vocab, 1.0);
  EXPECT_LT(relative_l2(split.loss, whole.loss), 1e-13);
  EXPECT_LT(relative_l2(split.dlogits, whole.dlogits), 1e-13);
  std::vector<double> row_max(rows), sumexp(rows), target_logit(rows);
  const std::vector<double> empty_shard(size_t(rows) * W, 1.0);
  cpu::crossentropy_row_max(row_max.data(), empty_shard.data(), rows, W, 0);
  cpu::crossentropy_sumexp_target(sumexp.data(), target_logit.data(), empty_shard.data(),
                                  whole.row_max.data(), targets.data(), rows, W, 0, 2 * W);
  for (int n = 0; n < rows; ++n) {
    EXPECT_EQ(row_max[n], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(sumexp[n], 0.0);
    EXPECT_EQ(target_logit[n], 0.0);
  }
}

}  // namespace
