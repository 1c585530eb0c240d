// CUDA token + position embeddings (kernels/cuda/embedding.cu) against the CPU reference on the
// same bf16 values.
//
// Tolerances:
//   forward: bit-exact. Both sides add the same two bf16 values in fp32; the GPU rounds the sum
//            to bf16 once, so it must equal the rounded CPU result.
//   backward: relative L2 of the increment (dwte_after - dwte_before) < 1e-2. Both sum the same
//            rows in fp32 in token order (the GPU sums first, then adds to the old value); the
//            only real difference is the one bf16 rounding of the result, 2^-9 relative per
//            element. A dropped or doubled row gives errors of order 1e-1 and more.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/embedding.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

struct Case {
  int B, T, C;
  int vocab_start, V;  // this shard: global ids [vocab_start, vocab_start + V)
  int vocab_total;     // tokens are drawn from [0, vocab_total)
};

std::string name(const Case& c) {
  return test::describe("B", c.B, " T", c.T, " C", c.C, " shard [", c.vocab_start, ", +", c.V,
                        ") of ", c.vocab_total);
}

// A third of the tokens are one hot token (a long run for the backward's bucketing), the rest
// uniform over the vocabulary.
std::vector<int32_t> random_tokens(size_t n, int vocab_total, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> uniform(0, vocab_total - 1);
  const int hot = uniform(rng);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = (rng() % 3 == 0) ? hot : uniform(rng);
  return tokens;
}

const std::vector<Case> kCases = {
    {3, 37, 200, 0, 512, 512},      // odd B*T, C not a multiple of 256
    {2, 64, 768, 0, 50304, 50257},  // GPT-2: C 768, vocabulary padded to 50304
    {2, 33, 64, 1000, 704, 3000},   // a vocab shard: most tokens belong to other ranks
};

TEST(CudaEmbedding, ForwardWritesTokenPlusPositionRowsExactly) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Case& c : kCases) {
    for (bool with_positions : {true, false}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(
          test::describe(name(c), with_positions ? " with wpe" : " without wpe", " seed ", seed));
      const size_t N = size_t(c.B) * c.T;
      const auto tokens = random_tokens(N, c.vocab_total, seed);
      const auto wte = test::random_bf16_values(size_t(c.V) * c.C, seed + 1);
      const auto wpe = test::random_bf16_values(size_t(c.T) * c.C, seed + 2);

      std::vector<float> expected(N * c.C);
      cpu::token_embedding_forward(expected.data(), tokens.data(), wte.data(), int(N), c.C,
                                   c.vocab_start, c.V);
      if (with_positions)
        cpu::position_embedding_forward(expected.data(), wpe.data(), c.B, c.T, c.C);

      DeviceArray<int32_t> d_tokens(tokens);
      DeviceArray<bf16> d_wte(to_bf16(wte)), d_wpe(to_bf16(wpe)), d_out(N * c.C);
      cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(),
                              with_positions ? d_wpe.get() : nullptr, c.B, c.T, c.C, c.vocab_start,
                              c.V, nullptr);
      const auto got = to_float(d_out.download());
      EXPECT_EQ(test::count_bit_differences(got, test::rounded_to_bf16(expected)), 0u);
    }
  }
}

TEST(CudaEmbedding, PositionForwardAddsPositionRowsExactly) {
  TACO_SKIP_WITHOUT_GPU();
  const int B = 3, T = 41, C = 768;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const auto out0 = test::random_bf16_values(size_t(B) * T * C, seed);
  const auto wpe = test::random_bf16_values(size_t(T) * C, seed + 1);
  std::vector<float> expected = out0;
  cpu::position_embedding_forward(expected.data(), wpe.data(), B, T, C);

  DeviceArray<bf16> d_out(to_bf16(out0)), d_wpe(to_bf16(wpe));
  cuda::position_embedding_forward(d_out.get(), d_wpe.get(), B, T, C, nullptr);
  EXPECT_EQ(
      test::count_bit_differences(to_float(d_out.download()), test::rounded_to_bf16(expected)), 0u);
}

TEST(CudaEmbedding, BackwardAddsTokenAndPositionGradientsDeterministically) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Case& c : kCases) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(c), " seed ", seed));
    const size_t N = size_t(c.B) * c.T;
    const auto tokens = random_tokens(N, c.vocab_total, seed);
    const auto dout = test::random_bf16_values(N * c.C, seed + 1);
    // Gradients already hold earlier micro-batches: the kernel must add, not overwrite.
    const auto dwte0 = test::random_bf16_values(size_t(c.V) * c.C, seed + 2, 0.f, 0.5f);
    const auto dwpe0 = test::random_bf16_values(size_t(c.T) * c.C, seed + 3, 0.f, 0.5f);

    std::vector<float> dwte_ref = dwte0, dwpe_ref = dwpe0;
    cpu::token_embedding_backward(dwte_ref.data(), dout.data(), tokens.data(), int(N), c.C,
                                  c.vocab_start, c.V);
    cpu::position_embedding_backward(dwpe_ref.data(), dout.data(), c.B, c.T, c.C);

    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<bf16> d_dout(to_bf16(dout)), d_dwte(to_bf16(dwte0)), d_dwpe(to_bf16(dwpe0));
    cuda::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), c.B, c.T,
                             c.C, c.vocab_start, c.V, nullptr);
    const auto dwte = to_float(d_dwte.download());
    const auto dwpe = to_float(d_dwpe.download());

    EXPECT_LT(test::relative_l2_of_increment(dwte, dwte_ref, dwte0), 1e-2);
    EXPECT_LT(test::relative_l2_of_increment(dwpe, dwpe_ref, dwpe0), 1e-2);

    // Rows no token of this shard maps to are left exactly as they were.
    std::vector<bool> touched(c.V, false);
    for (int32_t t : tokens)
      if (t - c.vocab_start >= 0 && t - c.vocab_start < c.V) touched[t - c.vocab_start] = true;
    size_t changed_untouched = 0;
    for (int v = 0; v < c.V; ++v)
      if (!touched[v])
        for (int k = 0; k < c.C; ++k)
          changed_untouched += dwte[size_t(v) * c.C + k] != dwte0[size_t(v) * c.C + k];
    EXPECT_EQ(changed_untouched, 0u);

    // Same inputs, same bits.
    d_dwte.upload(to_bf16(dwte0));
    d_dwpe.upload(to_bf16(dwpe0));
    cuda::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), c.B, c.T,
                             c.C, c.vocab_start, c.V, nullptr);
    EXPECT_EQ(test::count_bit_differences(to_float(d_dwte.download()), dwte), 0u);
    EXPECT_EQ(test::count_bit_differences(to_float(d_dwpe.download()), dwpe), 0u);
  }
}

TEST(CudaEmbedding, BackwardSkipsGradientsPassedAsNull) {
  TACO_SKIP_WITHOUT_GPU();
  const Case c{2, 16, 64, 0, 96, 96};
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const size_t N = size_t(c.B) * c.T;
  const auto tokens = random_tokens(N, c.vocab_total, seed);
  const auto dout = test::random_bf16_values(N * c.C, seed + 1);
  const auto dwte0 = test::random_bf16_values(size_t(c.V) * c.C, seed + 2);
  std::vector<float> dwte_ref = dwte0;
  cpu::token_embedding_backward(dwte_ref.data(), dout.data(), tokens.data(), int(N), c.C,
                                c.vocab_start, c.V);

  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<bf16> d_dout(to_bf16(dout)), d_dwte(to_bf16(dwte0));
  cuda::embedding_backward(d_dwte.get(), nullptr, d_dout.get(), d_tokens.get(), c.B, c.T, c.C,
                           c.vocab_start, c.V, nullptr);
  EXPECT_LT(test::relative_l2_of_increment(to_float(d_dwte.download()), dwte_ref, dwte0), 1e-2);
}

#else

TEST(CudaEmbedding, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
