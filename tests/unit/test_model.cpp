// The GPT model on the CPU: whole-model gradients against finite differences (fp64), the
// untrained loss, and a parameter layout whose shards compose back into the unsharded model.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/arena.h"
#include "kernels/check.h"
#include "model/gpt.h"
#include "model/ops.h"
#include "model/param_layout.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

struct TinyModel {
  GptDims dims;
  ParamLayout layout;
  Arena arena{DeviceKind::cpu};
  Gpt model;
  TinyModel(GptDims d, int B, DType dtype)
      : dims(d),
        layout(d, LayoutSpec{1, 0, 0, d.n_layer, true, true}),
        model(layout, B, 1, DeviceKind::cpu, dtype, nullptr) {
    model.plan(arena);
    arena.allocate();
    model.bind(arena);
  }
};

std::vector<int32_t> random_tokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = pick(rng);
  return t;
}

TEST(Gpt, WholeModelGradientsMatchFiniteDifferencesInDouble) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  // Small enough for finite differences on a sample of every parameter tensor; vocab 11 pads to
  // 64, so the padded logits are exercised too.
  GptDims d = GptDims::make(/*n_layer=*/2, /*n_head=*/2, /*d_model=*/8, /*seq_len=*/6,
                            /*vocab_size=*/11, /*tp=*/1);
  const int B = 2, N = B * d.seq_len;
  TinyModel m(d, B, DType::f64);
  double* params = m.model.params().as<double>();
  // Random (not GPT-2) init with larger spread so every path carries signal, including the
  // LayerNorm weights and biases.
  auto init = test::random_normal(m.layout.total(), seed, 0.f, 0.3f);
  for (size_t i = 0; i < init.size(); ++i) params[i] = init[i];
  for (const ParamInfo& p : m.layout.params())
    if (p.name == "wte")
      for (size_t i = size_t(p.valid_rows) * p.cols; i < p.numel(); ++i) params[p.offset + i] = 0;
  auto inputs = random_tokens(N, d.vocab_size, seed + 1);
  auto targets = random_tokens(N, d.vocab_size, seed + 2);

  ops::zero(m.model.grads());
  m.model.forward(inputs.data(), targets.data());
  m.model.backward(1.0f);  // gradient of the summed loss
  std::vector<double> analytic(m.model.grads().as<double>(),
                               m.model.grads().as<double>() + m.layout.total());

  // Central differences with h = 1e-5: truncation ~h^2 * f''' ~ 1e-10 and rounding
  // ~eps * |loss| / h ~ 1e-10, so analytic and numeric agree to ~1e-8 relative; 1e-6 leaves
  // margin while any wrong term (a missing path, a wrong scale) shows up at 1e-2 or more.
  const double h = 1e-5;
  std::mt19937_64 rng(seed + 3);
  for (const ParamInfo& p : m.layout.params()) {
    SCOPED_TRACE(p.name);
    size_t limit = p.name == "wte" ? size_t(p.valid_rows) * p.cols : p.numel();
    std::uniform_int_distribution<size_t> pick(0, limit - 1);
    double num2 = 0, den2 = 0;
    for (int k = 0; k < 12; ++k) {
      size_t i = p.offset + pick(rng);
      double saved = params[i];
      params[i] = saved + h;
      double lp = m.model.forward(inputs.data(), targets.data());
      params[i] = saved - h;
      double lm = m.model.forward(inputs.data(), targets.data());
      params[i] = saved;
      double fd = (lp - lm) / (2 * h);
      num2 += (fd - analytic[i]) * (fd - analytic[i]);
      den2 += fd * fd;
    }
    ASSERT_GT(den2, 0.0) << "no gradient signal reached " << p.name;
    EXPECT_LT(std::sqrt(num2 / den2), 1e-6);
  }
  // Padded vocab rows never receive gradient.
  const ParamInfo& wte = m.layout.get("wte");
  for (size_t i = size_t(wte.valid_rows) * wte.cols; i < wte.numel(); ++i)
    ASSERT_EQ(analytic[wte.offset + i], 0.0);
}

TEST(Gpt, UntrainedLossIsNearLogVocab) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  GptDims d = GptDims::make(4, 4, 128, 64, 256, 1);
  const int B = 4, N = B * d.seq_len;
  TinyModel m(d, B, DType::f32);
  init_params_gpt2(m.layout, seed, m.model.params().as<float>());
  auto inputs = random_tokens(N, d.vocab_size, seed + 1);
  auto targets = random_tokens(N, d.vocab_size, seed + 2);
  double loss = m.model.forward(inputs.data(), targets.data()) / N;
  // GPT-2 init (std 0.02) gives near-uniform predictions: loss ~ ln(256) = 5.545. The bar.
  EXPECT_NEAR(loss, std::log(256.0), 0.1);
}

TEST(ParamLayout, TensorParallelShardsComposeTheUnshardedInit) {
  GptDims d = GptDims::make(2, 4, 16, 8, 300, 2);  // vocab 300 pads to 512 for tp = 2
  const uint64_t seed = test::fresh_seed();
  ParamLayout full(d, LayoutSpec{1, 0, 0, 2, true, true});
  std::vector<float> whole(full.total());
  init_params_gpt2(full, seed, whole.data());
  for (int r = 0; r < 2; ++r) {
    ParamLayout shard(d, LayoutSpec{2, r, 0, 2, true, true});
    std::vector<float> part(shard.total());
    init_params_gpt2(shard, seed, part.data());
    for (const ParamInfo& p : shard.params()) {
      const ParamInfo& f = full.get(p.name);
      for (int i = 0; i < p.rows; ++i)
        for (int j = 0; j < p.cols; ++j) {
          int fr, fc;
          shard.to_logical(p, i, j, &fr, &fc);
          ASSERT_EQ(part[p.offset + size_t(i) * p.cols + j],
                    whole[f.offset + size_t(fr) * f.cols + fc])
              << p.name << " rank " << r << " (" << i << "," << j << ")";
        }
    }
  }
  // The qkv shard of rank 1 starts with query row C/2 (its first head), keys at C + C/2.
  ParamLayout r1(d, LayoutSpec{2, 1, 0, 2, true, true});
  int fr, fc;
  r1.to_logical(r1.get("h0.qkv_w"), 0, 0, &fr, &fc);
  EXPECT_EQ(fr, 8);
  r1.to_logical(r1.get("h0.qkv_w"), 8, 0, &fr, &fc);
  EXPECT_EQ(fr, 16 + 8);
}

TEST(ParamLayout, PaddedVocabIsAMultipleOf64OrOf128TimesTp) {
  EXPECT_EQ(GptDims::make(1, 1, 8, 8, 50257, 1).padded_vocab, 50304);
  EXPECT_EQ(GptDims::make(1, 1, 8, 8, 256, 1).padded_vocab, 256);
  EXPECT_EQ(GptDims::make(1, 1, 8, 8, 50257, 2).padded_vocab, 50432);
}

// ops.cpp compiles its CUDA calls out of a CPU-only build; a CUDA tensor reaching an op there is
// the one UserError that names the op, never a CPU kernel on a device pointer.
TEST(Ops, WithoutCudaACudaTensorIsAUserError) {
  if (built_with_cuda()) GTEST_SKIP() << "a CUDA build runs these ops (tests/gpu)";
  float x[4] = {1, 2, 3, 4};
  const Tensor on_gpu{x, DType::bf16, DeviceKind::cuda, 4};
  const Tensor on_cpu{x, DType::f32, DeviceKind::cpu, 4};
  try {
    ops::gelu_forward(on_gpu, on_gpu);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA op gelu_forward: this build has no CUDA backend"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::copy(on_cpu.slice(0, 2), on_gpu.slice(0, 4)), UserError);
  EXPECT_THROW(ops::sum_of_squares(on_gpu), UserError);
  EXPECT_EQ(x[0], 1.f);  // nothing ran on the memory
}

}  // namespace
}  // namespace taco
