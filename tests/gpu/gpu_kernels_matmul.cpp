// CUDA linear layers through cuBLASLt (kernels/cuda/matmul.cu) against the CPU reference on the
// same bf16 values, with cuBLASLt's epilogues fused and with the separate kernels.
//
// Tolerances (relative L2 over the tensor):
//   out, pre_gelu, dinp < 1e-2: products of bf16 values are exact in fp32 and both sides
//     accumulate in fp32, so the difference is the final bf16 rounding (2^-9 relative per
//     element) plus summation order (~1e-6). A wrong transpose or bias gives errors of order 1.
//   dinp through dGELU < 2e-2: the separate path rounds dout W to bf16 before multiplying by
//     gelu'(pre_gelu), a second rounding; cuBLASLt's GELU may also differ from the tanh formula
//     in its last bits.
//   dweight, dbias increments < 2e-2: one bf16 rounding of the accumulated result, whose size
//     is comparable to the increment here (dbias also through BGRADB's bf16 column sums).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

struct Shape {
  int N, IC, OC;
};

std::string name(const Shape& s) { return test::describe("N", s.N, " IC", s.IC, " OC", s.OC); }

// Odd sizes (rows not 16-byte aligned; the GELU epilogues then fall back), GPT-2's attention
// QKV and MLP layers, and a small-batch tied LM head over the padded vocabulary.
const std::vector<Shape> kShapes = {
    {37, 53, 29}, {256, 768, 2304}, {128, 768, 3072}, {128, 3072, 768}};
const Shape kLmHead = {32, 768, 50304};

// Restores the default after each test, whatever it asserted.
class CudaMatmul : public ::testing::Test {
 protected:
  void TearDown() override {
    cuda::matmul_set_fused_epilogues(true);
    cuda::matmul_set_autotune(true);
    cuda::matmul_set_bias_grad_epilogue(false);
  }
};

struct Inputs {
  std::vector<float> inp, weight, bias;
};

Inputs random_inputs(const Shape& s, uint64_t seed) {
  // Weights of standard deviation 1/sqrt(IC), so outputs stay O(1) whatever IC is and the GELU
  // tests see both of its regimes.
  return {test::random_bf16_values(size_t(s.N) * s.IC, seed),
          test::random_bf16_values(size_t(s.OC) * s.IC, seed + 1, 0.f,
                                   float(1.0 / std::sqrt(double(s.IC)))),
          test::random_bf16_values(s.OC, seed + 2)};
}

TEST_F(CudaMatmul, ForwardMatchesCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  std::vector<Shape> shapes = kShapes;
  shapes.push_back(kLmHead);
  for (const Shape& s : shapes) {
    for (bool with_bias : {true, false}) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::describe(name(s), with_bias ? " bias" : " no bias", " seed ", seed));
      const Inputs in = random_inputs(s, seed);
      std::vector<float> ref(size_t(s.N) * s.OC);
      cpu::matmul_forward(ref.data(), in.inp.data(), in.weight.data(),
                          with_bias ? in.bias.data() : nullptr, s.N, s.IC, s.OC);

      DeviceArray<bf16> d_inp(to_bf16(in.inp)), d_w(to_bf16(in.weight)), d_b(to_bf16(in.bias)),
          d_out(ref.size());
      cuda::matmul_forward(d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr,
                           s.N, s.IC, s.OC, nullptr, nullptr);
      EXPECT_LT(test::relative_l2(to_float(d_out.download()), ref), 1e-2);
    }
  }
}

TEST_F(CudaMatmul, ForwardWithGeluWritesActivationAndPreActivation) {
  TACO_SKIP_WITHOUT_GPU();
  for (bool fused : {true, false}) {
    cuda::matmul_set_fused_epilogues(fused);
    for (const Shape& s : kShapes) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::describe(name(s), fused ? " fused" : " separate", " seed ", seed));
      const Inputs in = random_inputs(s, seed);
      const size_t n_out = size_t(s.N) * s.OC;
      std::vector<float> pre_ref(n_out), out_ref(n_out);
      cpu::matmul_forward(pre_ref.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N,
                          s.IC, s.OC);
      cpu::gelu_forward(out_ref.data(), pre_ref.data(), n_out);

      DeviceArray<bf16> d_inp(to_bf16(in.inp)), d_w(to_bf16(in.weight)), d_b(to_bf16(in.bias)),
          d_out(n_out), d_pre(n_out);
      cuda::matmul_forward(d_out.get(), d_inp.get(), d_w.get(), d_b.get(), s.N, s.IC, s.OC,
                           d_pre.get(), nullptr);
      EXPECT_LT(test::relative_l2(to_float(d_pre.download()), pre_ref), 1e-2);
      EXPECT_LT(test::relative_l2(to_float(d_out.download()), out_ref), 1e-2);
    }
  }
}

// The first call of a shape times cuBLASLt's candidates on its own operands: the accumulated
// weight gradient must come out as if only the real call had run. A shape no other test uses
// (so this call is its first), with and without autotuning.
TEST_F(CudaMatmul, FirstCallTunesWithoutDisturbingTheAccumulatedGradient) {
  TACO_SKIP_WITHOUT_GPU();
  for (bool tune : {true, false}) {
    cuda::matmul_set_autotune(tune);
    const Shape s = tune ? Shape{1000, 96, 136} : Shape{1000, 104, 136};
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe(name(s), tune ? " tuned" : " heuristic", " seed ", seed));
    const Inputs in = random_inputs(s, seed);
    const auto dout = test::random_bf16_values(size_t(s.N) * s.OC, seed + 3);
    const auto dweight0 = test::random_bf16_values(size_t(s.OC) * s.IC, seed + 4, 0.f, 30.f);
    std::vector<float> dinp_ref(size_t(s.N) * s.IC, 0.f), dweight_ref = dweight0;
    cpu::matmul_backward(dinp_ref.data(), dweight_ref.data(), nullptr, dout.data(), in.inp.data(),
                         in.weight.data(), s.N, s.IC, s.OC);
    DeviceArray<bf16> d_inp(to_bf16(in.inp)), d_w(to_bf16(in.weight)), d_dout(to_bf16(dout)),
        d_dinp(dinp_ref.size()), d_dweight(to_bf16(dweight0));
    const int tuned_before = cuda::matmul_autotuned_shapes();
    cuda::matmul_backward(d_dinp.get(), d_dweight.get(), nullptr, d_dout.get(), d_inp.get(),
                          d_w.get(), s.N, s.IC, s.OC, nullptr, nullptr);
    const int tuned = cuda::matmul_autotuned_shapes() - tuned_before;
    // Two GEMMs (dinp, dweight); cuBLASLt offers several algorithms for shapes like these.
    if (tune) {
      EXPECT_GE(tuned, 1);
    } else {
      EXPECT_EQ(tuned, 0);
    }
    EXPECT_LT(test::relative_l2(to_float(d_dinp.download()), dinp_ref), 1e-2);
    EXPECT_LT(test::relative_l2_of_increment(to_float(d_dweight.download()), dweight_ref,
                                             test::rounded_to_bf16(dweight0)),
              2e-2);
  }
}

TEST_F(CudaMatmul, BackwardWritesDinpAndAddsWeightAndBiasGradients) {
  TACO_SKIP_WITHOUT_GPU();
  std::vector<Shape> shapes = kShapes;
  shapes.push_back(kLmHead);
  // fused: the bias gradient from cuBLASLt's BGRADB epilogue (opt-in), else our kernel.
  for (bool fused : {true, false}) {
    cuda::matmul_set_bias_grad_epilogue(fused);
    for (const Shape& s : shapes) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::describe(name(s), fused ? " BGRADB" : " own bias kernel", " seed ", seed));
      const Inputs in = random_inputs(s, seed);
      const auto dout = test::random_bf16_values(size_t(s.N) * s.OC, seed + 3);
      // Earlier micro-batches' gradients, about as large as this one's (sqrt(N) per element).
      const float acc_std = float(std::sqrt(double(s.N)));
      const auto dweight0 = test::random_bf16_values(size_t(s.OC) * s.IC, seed + 4, 0.f, acc_std);
      const auto dbias0 = test::random_bf16_values(s.OC, seed + 5, 0.f, acc_std);

      std::vector<float> dinp_ref(size_t(s.N) * s.IC, 0.f), dweight_ref = dweight0,
                                                            dbias_ref = dbias0;
      cpu::matmul_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(),
                           in.inp.data(), in.weight.data(), s.N, s.IC, s.OC);

      DeviceArray<bf16> d_inp(to_bf16(in.inp)), d_w(to_bf16(in.weight)), d_dout(to_bf16(dout)),
          d_dinp(dinp_ref.size()), d_dw(to_bf16(dweight0)), d_db(to_bf16(dbias0));
      auto run = [&] {
        cuda::matmul_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(),
                              d_w.get(), s.N, s.IC, s.OC, nullptr, nullptr);
      };
      run();
      const auto dinp = to_float(d_dinp.download());
      const auto dweight = to_float(d_dw.download());
      const auto dbias = to_float(d_db.download());
      EXPECT_LT(test::relative_l2(dinp, dinp_ref), 1e-2);
      EXPECT_LT(test::relative_l2_of_increment(dweight, dweight_ref, dweight0), 2e-2);
      EXPECT_LT(test::relative_l2_of_increment(dbias, dbias_ref, dbias0), 2e-2);

      // Same inputs, same bits (cuBLASLt is deterministic for a fixed algorithm, our bias
      // reduction by construction).
      d_dinp.poison();
      d_dw.upload(to_bf16(dweight0));
      d_db.upload(to_bf16(dbias0));
      run();
      EXPECT_EQ(test::count_bit_differences(to_float(d_dinp.download()), dinp), 0u);
      EXPECT_EQ(test::count_bit_differences(to_float(d_dw.download()), dweight), 0u);
      EXPECT_EQ(test::count_bit_differences(to_float(d_db.download()), dbias), 0u);
    }
  }
}

TEST_F(CudaMatmul, BackwardThroughGeluMultipliesByItsDerivative) {
  TACO_SKIP_WITHOUT_GPU();
  for (bool fused : {true, false}) {
    cuda::matmul_set_fused_epilogues(fused);
    for (const Shape& s : kShapes) {
      const uint64_t seed = test::fresh_seed();
      SCOPED_TRACE(test::describe(name(s), fused ? " fused" : " separate", " seed ", seed));
      const Inputs in = random_inputs(s, seed);
      const auto dout = test::random_bf16_values(size_t(s.N) * s.OC, seed + 3);
      const auto pre_gelu = test::random_bf16_values(size_t(s.N) * s.IC, seed + 4);
      // dinp = (dout W) * gelu'(pre_gelu); the weight and bias gradients are checked above.
      const size_t n_in = size_t(s.N) * s.IC;
      std::vector<float> dact(n_in, 0.f), dweight_unused(size_t(s.OC) * s.IC, 0.f),
          dinp_ref(n_in, 0.f);
      cpu::matmul_backward(dact.data(), dweight_unused.data(), nullptr, dout.data(), in.inp.data(),
                           in.weight.data(), s.N, s.IC, s.OC);
      cpu::gelu_backward(dinp_ref.data(), pre_gelu.data(), dact.data(), n_in);

      DeviceArray<bf16> d_inp(to_bf16(in.inp)), d_w(to_bf16(in.weight)), d_dout(to_bf16(dout)),
          d_pre(to_bf16(pre_gelu)), d_dinp(n_in);
      cuda::matmul_backward(d_dinp.get(), nullptr, nullptr, d_dout.get(), d_inp.get(), d_w.get(),
                            s.N, s.IC, s.OC, d_pre.get(), nullptr);
      EXPECT_LT(test::relative_l2(to_float(d_dinp.download()), dinp_ref), 2e-2);
    }
  }
}

#else

TEST(CudaMatmul, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
