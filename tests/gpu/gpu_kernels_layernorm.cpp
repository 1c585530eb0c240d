// CUDA LayerNorm (kernels/cuda/layernorm.cu) against the CPU reference on the same bf16 values.
//
// Tolerances (relative L2 over the tensor):
//   out < 1e-2: fp32 math on both sides; the GPU rounds out to bf16 (2^-9 relative per element).
//   mean, rstd < 1e-5: fp32 on both sides, only the summation order differs (~1e-7).
//   dinp, dweight, dbias increments < 2e-2: fp32 math, one bf16 rounding of each accumulated
//   result (relative to the total, which is about as large as the increment here). A wrong term
//   in the gradient formula gives errors of order 1.
//   column sums of dinp, increment < 1e-2: fp32 sums of the same bf16 values against double, then
//   one bf16 rounding (2^-9); a missed or doubled row is of order 1/sqrt(N) (N <= 64 here).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/layernorm.h"
#include "kernels/residual.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

struct Shape {
  int N, C;
};

// Odd row counts; C = 200 leaves lanes idle; 256, 768 (GPT-2) and 1024 take the backward's
// register variant (2500 rows: more rows than warps in a wave, so warps add several rows and
// blocks several warps); 200, 2048 and 8192 its shared-memory variant, with smaller warp counts
// and, for 8192, more than 48 KiB of shared memory.
const std::vector<Shape> kShapes = {{37, 200},   {41, 256},  {64, 768}, {2500, 768},
                                    {300, 1024}, {17, 2048}, {9, 8192}};

std::string name(const Shape& s) { return test::describe("N", s.N, " C", s.C); }

TEST(CudaLayerNorm, ForwardMatchesCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(s), " seed ", seed));
    const size_t NC = size_t(s.N) * s.C;
    const auto inp = test::random_bf16_values(NC, seed, 0.5f, 2.f);  // nonzero mean
    const auto weight = test::random_bf16_values(s.C, seed + 1, 1.f, 0.2f);
    const auto bias = test::random_bf16_values(s.C, seed + 2, 0.f, 0.2f);
    std::vector<float> out_ref(NC), mean_ref(s.N), rstd_ref(s.N);
    cpu::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), inp.data(),
                           weight.data(), bias.data(), s.N, s.C);

    DeviceArray<bf16> d_inp(to_bf16(inp)), d_w(to_bf16(weight)), d_b(to_bf16(bias)), d_out(NC);
    DeviceArray<float> d_mean(s.N), d_rstd(s.N);
    cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(),
                            d_b.get(), s.N, s.C, nullptr);
    EXPECT_LT(test::relative_l2(to_float(d_out.download()), out_ref), 1e-2);
    EXPECT_LT(test::relative_l2(d_mean.download(), mean_ref), 1e-5);
    EXPECT_LT(test::relative_l2(d_rstd.download(), rstd_ref), 1e-5);
  }
}

TEST(CudaLayerNorm, FusedResidualForwardEqualsResidualThenLayerNorm) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(s), " seed ", seed));
    const size_t NC = size_t(s.N) * s.C;
    const auto a = test::random_bf16_values(NC, seed);
    const auto b = test::random_bf16_values(NC, seed + 1);
    const auto weight = test::random_bf16_values(s.C, seed + 2, 1.f, 0.2f);
    const auto bias = test::random_bf16_values(s.C, seed + 3, 0.f, 0.2f);
    std::vector<float> sum(NC);
    cpu::residual_forward(sum.data(), a.data(), b.data(), NC);

    DeviceArray<bf16> d_a(to_bf16(a)), d_b(to_bf16(b)), d_w(to_bf16(weight)), d_bias(to_bf16(bias)),
        d_res(NC), d_out(NC), d_out_unfused(NC);
    DeviceArray<float> d_mean(s.N), d_rstd(s.N), d_mean_unfused(s.N), d_rstd_unfused(s.N);
    cuda::fused_residual_layernorm_forward(d_res.get(), d_out.get(), d_mean.get(), d_rstd.get(),
                                           d_a.get(), d_b.get(), d_w.get(), d_bias.get(), s.N, s.C,
                                           nullptr);
    cuda::layernorm_forward(d_out_unfused.get(), d_mean_unfused.get(), d_rstd_unfused.get(),
                            d_res.get(), d_w.get(), d_bias.get(), s.N, s.C, nullptr);
    // residual_out is the bf16-rounded fp32 sum; the normalized output is bit for bit the
    // unfused kernel's on that residual.
    EXPECT_EQ(test::count_bit_differences(to_float(d_res.download()), test::rounded_to_bf16(sum)),
              0u);
    EXPECT_EQ(
        test::count_bit_differences(to_float(d_out.download()), to_float(d_out_unfused.download())),
        0u);
    EXPECT_EQ(test::count_bit_differences(d_mean.download(), d_mean_unfused.download()), 0u);
    EXPECT_EQ(test::count_bit_differences(d_rstd.download(), d_rstd_unfused.download()), 0u);

    // In place on the residual stream: residual_out aliases a.
    cuda::fused_residual_layernorm_forward(d_a.get(), d_out.get(), d_mean.get(), d_rstd.get(),
                                           d_a.get(), d_b.get(), d_w.get(), d_bias.get(), s.N, s.C,
                                           nullptr);
    EXPECT_EQ(test::count_bit_differences(to_float(d_a.download()), test::rounded_to_bf16(sum)),
              0u);
  }
}

// A backward's random inputs, with mean and rstd from the CPU forward. The accumulators already
// hold something: dinp the residual stream's gradient, dweight and dbias earlier micro-batches,
// sized like the increments so their rounding stays small.
struct BackwardInputs {
  std::vector<float> inp, weight, dout, dinp0, dweight0, dbias0, mean, rstd;
  BackwardInputs(const Shape& s, uint64_t seed)
      : inp(test::random_bf16_values(size_t(s.N) * s.C, seed, 0.5f, 2.f)),
        weight(test::random_bf16_values(s.C, seed + 1, 1.f, 0.2f)),
        dout(test::random_bf16_values(size_t(s.N) * s.C, seed + 3)),
        dinp0(test::random_bf16_values(size_t(s.N) * s.C, seed + 4)),
        dweight0(test::random_bf16_values(s.C, seed + 5, 0.f, 4.f)),
        dbias0(test::random_bf16_values(s.C, seed + 6, 0.f, 4.f)),
        mean(s.N),
        rstd(s.N) {
    const auto bias = test::random_bf16_values(s.C, seed + 2, 0.f, 0.2f);
    std::vector<float> out(inp.size());
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), s.N, s.C);
  }
};

TEST(CudaLayerNorm, BackwardAddsGradientsDeterministically) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(s), " seed ", seed));
    const BackwardInputs in(s, seed);
    const auto& [inp, weight, dout, dinp0, dweight0, dbias0, mean, rstd] = in;
    std::vector<float> dinp_ref = dinp0, dweight_ref = dweight0, dbias_ref = dbias0;
    cpu::layernorm_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(),
                            inp.data(), weight.data(), mean.data(), rstd.data(), s.N, s.C);

    DeviceArray<bf16> d_inp(to_bf16(inp)), d_w(to_bf16(weight)), d_dout(to_bf16(dout)),
        d_dinp(to_bf16(dinp0)), d_dw(to_bf16(dweight0)), d_db(to_bf16(dbias0));
    DeviceArray<float> d_mean(mean), d_rstd(rstd);
    auto run = [&] {
      cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                               d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C, nullptr);
    };
    run();
    const auto dinp = to_float(d_dinp.download());
    const auto dweight = to_float(d_dw.download());
    const auto dbias = to_float(d_db.download());
    EXPECT_LT(test::relative_l2_of_increment(dinp, dinp_ref, dinp0), 2e-2);
    EXPECT_LT(test::relative_l2_of_increment(dweight, dweight_ref, dweight0), 2e-2);
    EXPECT_LT(test::relative_l2_of_increment(dbias, dbias_ref, dbias0), 2e-2);

    d_dinp.upload(to_bf16(dinp0));
    d_dw.upload(to_bf16(dweight0));
    d_db.upload(to_bf16(dbias0));
    run();
    EXPECT_EQ(test::count_bit_differences(to_float(d_dinp.download()), dinp), 0u);
    EXPECT_EQ(test::count_bit_differences(to_float(d_dw.download()), dweight), 0u);
    EXPECT_EQ(test::count_bit_differences(to_float(d_db.download()), dbias), 0u);
  }
}

// With dinp_column_sums, the same gradients (bit for bit: the fusion only adds a sum) and the
// column sums of the updated dinp as stored in bf16, added into what the sums held: checked
// against the CPU's double column sums of the GPU's own dinp (the bias gradient a separate pass
// over dinp would give). C = 8192 takes the fewest warps and the most shared memory.
TEST(CudaLayerNorm, BackwardAlsoSumsTheUpdatedDinpColumns) {
  TACO_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(s), " seed ", seed));
    const BackwardInputs in(s, seed);
    const auto& [inp, weight, dout, dinp0, dweight0, dbias0, mean, rstd] = in;
    const auto sums0 = test::random_bf16_values(s.C, seed + 7, 0.f, 4.f);

    DeviceArray<bf16> d_inp(to_bf16(inp)), d_w(to_bf16(weight)), d_dout(to_bf16(dout)),
        d_dinp(to_bf16(dinp0)), d_dw(to_bf16(dweight0)), d_db(to_bf16(dbias0)),
        d_sums(to_bf16(sums0));
    DeviceArray<float> d_mean(mean), d_rstd(rstd);
    cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                             d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C, nullptr,
                             d_sums.get());
    const auto dinp = to_float(d_dinp.download());
    const auto dweight = to_float(d_dw.download()), dbias = to_float(d_db.download());
    std::vector<float> sums_ref = sums0;
    for (int c = 0; c < s.C; ++c) {
      double col = 0;
      for (int n = 0; n < s.N; ++n) col += dinp[size_t(n) * s.C + c];
      sums_ref[c] += float(col);
    }
    EXPECT_LT(test::relative_l2_of_increment(to_float(d_sums.download()), sums_ref, sums0), 1e-2);

    // The plain call on the same inputs gives the same bits for everything else.
    d_dinp.upload(to_bf16(dinp0));
    d_dw.upload(to_bf16(dweight0));
    d_db.upload(to_bf16(dbias0));
    cuda::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                             d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C, nullptr);
    EXPECT_EQ(test::count_bit_differences(to_float(d_dinp.download()), dinp), 0u);
    EXPECT_EQ(test::count_bit_differences(to_float(d_dw.download()), dweight), 0u);
    EXPECT_EQ(test::count_bit_differences(to_float(d_db.download()), dbias), 0u);
  }
}

#else

TEST(CudaLayerNorm, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
