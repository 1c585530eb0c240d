// CUDA optimizer kernels: fused AdamW with fp32 master weights (kernels/cuda/adamw.cu), the
// bf16 <-> fp32 conversions, and the gradient sum of squares (kernels/cuda/gradnorm.cu), against
// the CPU reference on the same values.
//
// Tolerances:
//   m, v: relative L2 < 1e-5. Same fp32 formula on both sides; the GPU may contract a * b + c
//     into one FMA (a few fp32 ulps).
//   master weights: relative L2 of the update (new - old) < 1e-4. The new master is stored in
//     fp32, so a one-ulp difference (~4e-9 at |w| ~ 0.05) is ~4e-6 of a ~1e-3 update.
//   bf16 parameters: exactly the master rounded to nearest even; without master weights, within
//     one bf16 ulp of the rounded CPU result (an ulp-level fp32 difference can flip a rounding).
//   stochastic rounding: on values a quarter ulp above a bf16 number, 25% +- 1% round up (the
//     binomial spread over 2^20 elements is 0.04%) and the mean error is under 1% of an ulp.
//   sum of squares: relative error < 1e-6 against the CPU's double sum (the GPU sums groups of 8
//     exact bf16 squares in fp32 before widening to double); the plain sum likewise (8 fp32
//     values of ~5 summed in fp32 lose at most a few ulps, ~1e-7 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/gradnorm.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

cpu::AdamWParams hyper(float weight_decay) {
  return {/*lr=*/1e-3f,        /*beta1=*/0.9f, /*beta2=*/0.95f, /*eps=*/1e-8f, weight_decay,
          /*grad_scale=*/0.7f, /*step=*/3};
}

struct State {
  std::vector<float> master, grads, m, v;
};

State random_state(size_t n, uint64_t seed) {
  State s{test::random_normal(n, seed, 0.f, 0.05f), test::random_bf16_values(n, seed + 1),
          test::random_normal(n, seed + 2, 0.f, 0.1f), test::random_normal(n, seed + 3)};
  for (auto& x : s.v) x = 0.01f * x * x;  // second moments are non-negative
  return s;
}

// One bf16 unit in the last place at x's magnitude.
float bf16_ulp(float x) {
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.f, e - 8);
}

// Two ranges of one flat buffer with different weight decay (as for weights and biases); the
// split at an odd index puts the second range off 16-byte alignment (the scalar path).
constexpr size_t kLength = 100003;
constexpr size_t kSplit = 50001;

TEST(CudaAdamW, MasterWeightUpdateMatchesCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const State s = random_state(kLength, seed);
  State ref = s;
  cpu::adamw_update(ref.master.data(), ref.grads.data(), ref.m.data(), ref.v.data(), kSplit,
                    hyper(0.1f));
  cpu::adamw_update(ref.master.data() + kSplit, ref.grads.data() + kSplit, ref.m.data() + kSplit,
                    ref.v.data() + kSplit, kLength - kSplit, hyper(0.f));

  DeviceArray<float> d_master(s.master), d_m(s.m), d_v(s.v);
  DeviceArray<bf16> d_grads(to_bf16(s.grads)), d_params(kLength);
  cuda::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), kSplit,
                     hyper(0.1f), cuda::kRoundToNearest, nullptr);
  cuda::adamw_update(d_params.get() + kSplit, d_master.get() + kSplit, d_grads.get() + kSplit,
                     d_m.get() + kSplit, d_v.get() + kSplit, kLength - kSplit, hyper(0.f),
                     cuda::kRoundToNearest, nullptr);
  const auto master = d_master.download();
  EXPECT_LT(test::relative_l2_of_increment(master, ref.master, s.master), 1e-4);
  EXPECT_LT(test::relative_l2(d_m.download(), ref.m), 1e-5);
  EXPECT_LT(test::relative_l2(d_v.download(), ref.v), 1e-5);
  EXPECT_EQ(
      test::count_bit_differences(to_float(d_params.download()), test::rounded_to_bf16(master)),
      0u);
}

// The whole-buffer call: more ranges than one launch takes (kRangesPerLaunch = 48), lengths
// from 1 element to several chunks, odd offsets (scalar path) beside aligned ones, alternating
// weight decay, and state offsets shifted from the parameter offsets as under ZeRO-1 (the state
// holds only the shard [kShardBegin, end)). Gaps between ranges must stay untouched.
TEST(CudaAdamW, ManyRangesInFewLaunchesMatchTheCpuReferencePerRange) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  std::mt19937_64 rng(seed);
  constexpr size_t kShardBegin = 1000;
  std::vector<cuda::AdamWRange> ranges;
  size_t at = kShardBegin;
  for (int k = 0; k < 100; ++k) {
    const size_t lengths[] = {1, 7, 8, 768, 2304, 8191, 8192, 8200, 40000};
    const size_t numel = lengths[rng() % 9];
    const size_t gap = k % 5 == 0 ? rng() % 3 : 0;  // odd offsets now and then
    at += gap;
    ranges.push_back({at, at - kShardBegin, numel, k % 2 ? 0.f : 0.1f});
    at += numel;
  }
  const size_t total = at, shard = total - kShardBegin;
  const State s = random_state(total, seed);  // master, m, v index the shard; grads the buffer
  State ref = s;
  for (const cuda::AdamWRange& r : ranges) {
    cpu::adamw_update(ref.master.data() + r.state_offset, ref.grads.data() + r.offset,
                      ref.m.data() + r.state_offset, ref.v.data() + r.state_offset, r.numel,
                      hyper(r.weight_decay));
  }
  const std::vector<float> untouched = test::random_normal(total, seed + 7);
  DeviceArray<float> d_master(std::vector<float>(s.master.begin(), s.master.begin() + shard));
  DeviceArray<float> d_m(std::vector<float>(s.m.begin(), s.m.begin() + shard));
  DeviceArray<float> d_v(std::vector<float>(s.v.begin(), s.v.begin() + shard));
  DeviceArray<bf16> d_grads(to_bf16(s.grads)), d_params(to_bf16(untouched));
  cpu::AdamWParams hp = hyper(123.f);  // must be ignored: each range has its own decay
  cuda::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), ranges,
                     hp, cuda::kRoundToNearest, nullptr);
  const auto master = d_master.download(), m = d_m.download(),
             params = to_float(d_params.download());
  auto head = [&](const std::vector<float>& x) {
    return std::vector<float>(x.begin(), x.begin() + shard);
  };
  EXPECT_LT(test::relative_l2_of_increment(master, head(ref.master), head(s.master)), 1e-4);
  EXPECT_LT(test::relative_l2(m, head(ref.m)), 1e-5);
  EXPECT_LT(test::relative_l2(d_v.download(), head(ref.v)), 1e-5);
  // Parameters inside a range are the new master rounded; outside every range, what was there.
  std::vector<float> expected = test::rounded_to_bf16(untouched);
  for (const cuda::AdamWRange& r : ranges)
    for (size_t i = 0; i < r.numel; ++i)
      expected[r.offset + i] = bf16_to_float(float_to_bf16(master[r.state_offset + i]));
  EXPECT_EQ(test::count_bit_differences(params, expected), 0u);
}

// The update with lr, step and clip read on the device (what a CUDA graph's step replays) gives
// the host-scalar update's bits exactly: the same lr, bias corrections and step, and the clip scale
// clip_scale(sqrt(sumsq), clip) computed on the device as the host computes it. Four cases: a
// sum of squares under the clip (scale 1), one over it (scale clip / norm), a non-finite one, and
// a finite one beside a non-finite loss; the last two must leave every buffer as it was (the step
// is skipped).
TEST(CudaAdamW, DeviceScalarsGiveTheHostScalarUpdateBitForBit) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  std::mt19937_64 rng(seed);
  const std::vector<cuda::AdamWRange> ranges = {{0, 0, kSplit, 0.1f},
                                                {kSplit, kSplit, kLength - kSplit, 0.f}};
  const double clip = 1.0;
  const double sums[] = {0.25 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng),
                         3.0 + 40 * std::uniform_real_distribution<double>(0, 1)(rng), NAN, 2.0};
  const double losses[] = {1e4, 2e4, 3e4, INFINITY};  // the step's summed loss
  for (int k = 0; k < 4; ++k) {
    const double sumsq = sums[k], loss = losses[k];
    const bool applied = std::isfinite(sumsq) && std::isfinite(loss);
    SCOPED_TRACE(test::describe("sum of squares ", sumsq, ", loss ", loss));
    const State s = random_state(kLength, seed + 16 * uint64_t(k));
    cpu::AdamWParams hp = hyper(0.f);
    hp.step = 1 + int(rng() % 5000);
    hp.lr = float(std::uniform_real_distribution<double>(1e-5, 1e-3)(rng));
    hp.grad_scale = clip_scale(std::sqrt(sumsq), clip);
    const std::vector<bf16> params0 = to_bf16(test::random_normal(kLength, seed + 9, 0.f, 0.05f));

    DeviceArray<float> h_master(s.master), h_m(s.m), h_v(s.v);
    DeviceArray<bf16> d_grads(to_bf16(s.grads)), h_params(params0);
    if (applied)
      cuda::adamw_update(h_params.get(), h_master.get(), d_grads.get(), h_m.get(), h_v.get(),
                         ranges, hp, cuda::kRoundToNearest, nullptr);

    DeviceArray<float> d_master(s.master), d_m(s.m), d_v(s.v);
    DeviceArray<bf16> d_params(params0);
    DeviceArray<cuda::AdamWStepScalars> d_step(
        std::vector<cuda::AdamWStepScalars>{cuda::adamw_step_scalars(hp)});
    DeviceArray<double> d_sumsq(std::vector<double>{sumsq}), d_loss(std::vector<double>{loss});
    cpu::AdamWParams ignored = hp;  // lr, grad_scale and step must come from the device
    ignored.lr = 1.f;
    ignored.grad_scale = 5.f;
    ignored.step = 1;
    cuda::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), ranges,
                       ignored, d_step.get(), d_sumsq.get(), d_loss.get(), clip,
                       cuda::kRoundToNearest, nullptr);
    EXPECT_EQ(test::count_bit_differences(d_master.download(), h_master.download()), 0u);
    EXPECT_EQ(test::count_bit_differences(d_m.download(), h_m.download()), 0u);
    EXPECT_EQ(test::count_bit_differences(d_v.download(), h_v.download()), 0u);
    EXPECT_EQ(
        test::count_bit_differences(to_float(d_params.download()), to_float(h_params.download())),
        0u);
    if (!applied) {
      EXPECT_EQ(test::count_bit_differences(d_master.download(), s.master), 0u);
      EXPECT_EQ(test::count_bit_differences(to_float(d_params.download()), to_float(params0)), 0u);
    } else {
      EXPECT_GT(test::count_bit_differences(d_master.download(), s.master), kLength / 2);
    }
  }
}

TEST(CudaAdamW, WithoutMasterWeightsUpdatesBf16ParametersDirectly) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  State s = random_state(kLength, seed);
  s.master = test::rounded_to_bf16(s.master);  // the bf16 parameters are the weights
  State ref = s;
  cpu::adamw_update(ref.master.data(), ref.grads.data(), ref.m.data(), ref.v.data(), kLength,
                    hyper(0.1f));
  const auto expected = test::rounded_to_bf16(ref.master);

  DeviceArray<float> d_m(s.m), d_v(s.v);
  DeviceArray<bf16> d_grads(to_bf16(s.grads)), d_params(to_bf16(s.master));
  cuda::adamw_update(d_params.get(), nullptr, d_grads.get(), d_m.get(), d_v.get(), kLength,
                     hyper(0.1f), cuda::kRoundToNearest, nullptr);
  const auto params = to_float(d_params.download());
  size_t beyond_one_ulp = 0;
  for (size_t i = 0; i < kLength; ++i)
    beyond_one_ulp += !(std::fabs(params[i] - expected[i]) <= bf16_ulp(expected[i]));
  EXPECT_EQ(beyond_one_ulp, 0u);
  EXPECT_LT(test::relative_l2(d_m.download(), ref.m), 1e-5);
}

TEST(CudaAdamW, StochasticRoundingIsUnbiasedAndRepeatable) {
  TACO_SKIP_WITHOUT_GPU();
  const size_t n = size_t(1) << 20;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  // master = a bf16 number b plus a quarter of its ulp (in magnitude): round-to-nearest always
  // gives b, stochastic rounding gives the next number up a quarter of the time.
  const auto base = to_bf16(test::random_normal(n, seed));
  std::vector<float> master(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = (uint32_t(base[i].bits) << 16) | 0x4000u;
    std::memcpy(&master[i], &bits, 4);
  }
  // lr = 0 and zero moments leave the master unchanged: the parameters are just its rounding.
  cpu::AdamWParams hp = hyper(0.f);
  hp.lr = 0.f;
  const std::vector<float> zeros(n, 0.f);
  DeviceArray<float> d_master(master), d_m(zeros), d_v(zeros);
  DeviceArray<bf16> d_grads(to_bf16(zeros)), d_params(n);
  const uint64_t rounding_seed = seed | 1;  // any nonzero seed
  auto run = [&](int step) {
    hp.step = step;
    cuda::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), n, hp,
                       rounding_seed, nullptr);
    return d_params.download();
  };
  const auto first = run(1);
  size_t up = 0, other = 0;
  double error_in_ulps = 0;
  for (size_t i = 0; i < n; ++i) {
    if (first[i].bits == base[i].bits + 1) {
      ++up;
      error_in_ulps += 0.75;
    } else if (first[i].bits == base[i].bits) {
      error_in_ulps -= 0.25;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(other, 0u);
  EXPECT_NEAR(double(up) / n, 0.25, 0.01);
  EXPECT_LT(std::fabs(error_in_ulps / n), 0.01);

  const auto again = run(1);
  EXPECT_EQ(std::memcmp(first.data(), again.data(), n * sizeof(bf16)), 0);
  const auto next_step = run(2);
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += first[i].bits != next_step[i].bits;
  EXPECT_GT(differ, n / 10);  // fresh random bits each step
}

TEST(CudaConvert, Bf16AndFp32RoundTripWithNearestEvenRounding) {
  TACO_SKIP_WITHOUT_GPU();
  for (size_t offset : {size_t(0), size_t(1)}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe("offset ", offset, " seed ", seed));
    const size_t n = kLength - offset;
    const auto x = test::random_normal(kLength, seed, 0.f, 10.f);
    DeviceArray<float> d_x(x), d_back(kLength);
    DeviceArray<bf16> d_h(kLength);
    cuda::convert_f32_to_bf16(d_h.get() + offset, d_x.get() + offset, n, nullptr);
    cuda::convert_bf16_to_f32(d_back.get() + offset, d_h.get() + offset, n, nullptr);
    const auto back = d_back.download();
    const std::vector<float> got(back.begin() + offset, back.end());
    const std::vector<float> want =
        test::rounded_to_bf16(std::vector<float>(x.begin() + offset, x.end()));
    EXPECT_EQ(test::count_bit_differences(got, want), 0u);
  }
}

TEST(CudaGradNorm, SumOfSquaresMatchesCpuAcrossRangesAndRepeats) {
  TACO_SKIP_WITHOUT_GPU();
  const size_t n = 3000017;
  const size_t split = 1000001;  // the second range starts off 16-byte alignment
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const auto x = test::random_bf16_values(n, seed, 0.f, 1e-2f);
  const double expected = cpu::sum_of_squares(x.data(), n);

  DeviceArray<bf16> d_x(to_bf16(x));
  DeviceArray<double> d_sum(1);
  auto run = [&] {
    cuda::sum_of_squares(d_sum.get(), d_x.get(), split, false, nullptr);
    cuda::sum_of_squares(d_sum.get(), d_x.get() + split, n - split, true, nullptr);
    return d_sum.download()[0];
  };
  const double got = run();
  EXPECT_LT(std::fabs(got - expected) / expected, 1e-6);
  const double again = run();
  EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0);

  // accumulate = false overwrites whatever the result held.
  cuda::sum_of_squares(d_sum.get(), d_x.get(), n, false, nullptr);
  EXPECT_LT(std::fabs(d_sum.download()[0] - expected) / expected, 1e-6);
}

// The plain fp32 sum the model keeps its loss in: positive values like per-token losses (so the
// relative error is well defined), an aligned and an unaligned range, accumulated.
TEST(CudaGradNorm, PlainSumMatchesCpuAcrossRangesAndRepeats) {
  TACO_SKIP_WITHOUT_GPU();
  const size_t n = 1000003;
  const size_t split = 16385;  // the second range starts off 16-byte alignment
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  std::vector<float> x = test::random_normal(n, seed, 0.f, 1.f);
  for (float& v : x) v = 5.f + std::fabs(v);  // a loss near ln(V) per token
  double expected = 0;
  for (float v : x) expected += v;

  DeviceArray<float> d_x(x);
  DeviceArray<double> d_sum(1);
  auto run = [&] {
    cuda::sum(d_sum.get(), d_x.get(), split, false, nullptr);
    cuda::sum(d_sum.get(), d_x.get() + split, n - split, true, nullptr);
    return d_sum.download()[0];
  };
  const double got = run();
  EXPECT_LT(std::fabs(got - expected) / expected, 1e-6);
  const double again = run();
  EXPECT_EQ(std::memcmp(&got, &again, sizeof(double)), 0);
}

#else

TEST(CudaAdamW, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
