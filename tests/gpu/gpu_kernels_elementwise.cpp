// CUDA elementwise kernels, GELU (kernels/cuda/gelu.cu) and the residual add
// (kernels/cuda/residual.cu), against the CPU reference on the same bf16 values. Each runs on an
// odd length (the scalar tail after the 16-byte groups) and on pointers one element off 16-byte
// alignment (the all-scalar path).
//
// Tolerances:
//   gelu forward and backward: relative L2 < 1e-2. Both sides use the same fp32 formula; the GPU
//     rounds the result to bf16 (2^-9 relative) and its tanhf may differ from the host's in the
//     last fp32 bits. A wrong constant or derivative term gives errors of order 1e-1 or more.
//   residual: bit-exact. The fp32 sum of two bf16 values is rounded once, as on the host.
//   round-trip error sums (kernels/roundtrip_error.h): 1e-12 relative. Both sides square and add
//     the same doubles, in another order; a skipped, doubled or misread element moves a sum by
//     about 1/n ~ 1e-6 of it. The non-finite count is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gelu.h"
#include "kernels/residual.h"
#include "kernels/roundtrip_error.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;
using test::to_bf16;
using test::to_float;

constexpr size_t kLength = 1000003;  // odd: 125000 groups of 8 and a tail of 3

// Elements [offset, offset + n) of a device array, back on the host.
std::vector<float> download_range(const DeviceArray<bf16>& d, size_t offset, size_t n) {
  const auto all = to_float(d.download());
  return std::vector<float>(all.begin() + offset, all.begin() + offset + n);
}

std::vector<float> slice(const std::vector<float>& x, size_t offset, size_t n) {
  return std::vector<float>(x.begin() + offset, x.begin() + offset + n);
}

TEST(CudaGelu, ForwardAndBackwardMatchCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  for (size_t offset : {size_t(0), size_t(1)}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe("offset ", offset, " seed ", seed));
    const size_t n = kLength - offset;
    const auto inp = test::random_bf16_values(kLength, seed, 0.f, 3.f);
    const auto dout = test::random_bf16_values(kLength, seed + 1);
    std::vector<float> out_ref(n), dinp_ref(n, 0.f);
    cpu::gelu_forward(out_ref.data(), inp.data() + offset, n);
    cpu::gelu_backward(dinp_ref.data(), inp.data() + offset, dout.data() + offset, n);

    DeviceArray<bf16> d_inp(to_bf16(inp)), d_dout(to_bf16(dout)), d_out(kLength), d_dinp(kLength);
    cuda::gelu_forward(d_out.get() + offset, d_inp.get() + offset, n, nullptr);
    cuda::gelu_backward(d_dinp.get() + offset, d_inp.get() + offset, d_dout.get() + offset, n,
                        nullptr);
    const auto out = download_range(d_out, offset, n);
    const auto dinp = download_range(d_dinp, offset, n);
    EXPECT_EQ(test::count_nonfinite(out), 0u);
    EXPECT_EQ(test::count_nonfinite(dinp), 0u);
    EXPECT_LT(test::relative_l2(out, out_ref), 1e-2);
    EXPECT_LT(test::relative_l2(dinp, dinp_ref), 1e-2);
  }
}

TEST(CudaGelu, BackwardMayOverwriteItsIncomingGradient) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const auto inp = test::random_bf16_values(kLength, seed, 0.f, 3.f);
  const auto dout = test::random_bf16_values(kLength, seed + 1);
  DeviceArray<bf16> d_inp(to_bf16(inp)), d_dout(to_bf16(dout)), d_dinp(kLength);
  cuda::gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), kLength, nullptr);
  cuda::gelu_backward(d_dout.get(), d_inp.get(), d_dout.get(), kLength, nullptr);  // in place
  EXPECT_EQ(test::count_bit_differences(to_float(d_dout.download()), to_float(d_dinp.download())),
            0u);
}

TEST(CudaResidual, ForwardIsExactInPlaceAndOutOfPlace) {
  TACO_SKIP_WITHOUT_GPU();
  for (size_t offset : {size_t(0), size_t(1)}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe("offset ", offset, " seed ", seed));
    const size_t n = kLength - offset;
    const auto a = test::random_bf16_values(kLength, seed);
    const auto b = test::random_bf16_values(kLength, seed + 1, 0.f, 0.1f);
    std::vector<float> sum(n);
    cpu::residual_forward(sum.data(), a.data() + offset, b.data() + offset, n);
    const auto expected = test::rounded_to_bf16(sum);

    DeviceArray<bf16> d_a(to_bf16(a)), d_b(to_bf16(b)), d_out(kLength);
    cuda::residual_forward(d_out.get() + offset, d_a.get() + offset, d_b.get() + offset, n,
                           nullptr);
    EXPECT_EQ(test::count_bit_differences(download_range(d_out, offset, n), expected), 0u);

    cuda::add_inplace(d_a.get() + offset, d_b.get() + offset, n, nullptr);  // a += b
    EXPECT_EQ(test::count_bit_differences(download_range(d_a, offset, n), expected), 0u);
    // Elements outside the range are untouched.
    if (offset > 0) {
      EXPECT_EQ(to_float(d_a.download())[0], a[0]);
    }
  }
}

TEST(CudaResidual, ForwardMayWriteOverItsSecondInput) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(test::describe("seed ", seed));
  const auto a = test::random_bf16_values(kLength, seed);
  const auto b = test::random_bf16_values(kLength, seed + 1);
  std::vector<float> sum(kLength);
  cpu::residual_forward(sum.data(), a.data(), b.data(), kLength);
  DeviceArray<bf16> d_a(to_bf16(a)), d_b(to_bf16(b));
  cuda::residual_forward(d_b.get(), d_a.get(), d_b.get(), kLength, nullptr);
  EXPECT_EQ(test::count_bit_differences(to_float(d_b.download()), test::rounded_to_bf16(sum)), 0u);
  EXPECT_EQ(slice(to_float(d_a.download()), 0, 4), slice(a, 0, 4));
}

TEST(CudaRoundTripError, SumsMatchCpuReferenceForEveryDtypePair) {
  TACO_SKIP_WITHOUT_GPU();
  for (size_t offset : {size_t(0), size_t(1)}) {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(test::describe("offset ", offset, " seed ", seed));
    const size_t n = kLength - offset;
    // x and a perturbed copy xhat, with a few non-finite inputs that the count must find.
    std::vector<float> x = test::random_bf16_values(kLength, seed), xhat(kLength);
    const auto noise = test::random_bf16_values(kLength, seed + 1, 0.f, 0.03f);
    for (size_t i = 0; i < kLength; ++i) xhat[i] = x[i] + noise[i] * x[i];
    x[17] = std::nanf("");
    x[kLength / 2] = std::numeric_limits<float>::infinity();
    x[kLength - 2] = -std::numeric_limits<float>::infinity();
    const auto xb = to_bf16(x), yb = to_bf16(xhat);
    const auto yb_float = to_float(yb);  // what the bf16 device copy holds
    DeviceArray<float> d_xf(x), d_yf(xhat);
    DeviceArray<bf16> d_xb(xb), d_yb(yb);
    DeviceArray<double> d_sums(3);
    struct Case {
      const char* name;
      const void* x;
      DType xt;
      const void* y;
      DType yt;
      const void* hx;
      const void* hy;
    };
    const Case cases[] = {
        {"f32/f32", d_xf.get(), DType::f32, d_yf.get(), DType::f32, x.data(), xhat.data()},
        {"bf16/f32", d_xb.get(), DType::bf16, d_yf.get(), DType::f32, xb.data(), xhat.data()},
        {"bf16/bf16", d_xb.get(), DType::bf16, d_yb.get(), DType::bf16, xb.data(), yb.data()},
        {"f32/bf16", d_xf.get(), DType::f32, d_yb.get(), DType::bf16, x.data(), yb.data()},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name);
      double want[3] = {0, 0, 0};
      const size_t xs = dtype_size(c.xt), ys = dtype_size(c.yt);
      cpu::roundtrip_error_sums(static_cast<const uint8_t*>(c.hx) + offset * xs, c.xt,
                                static_cast<const uint8_t*>(c.hy) + offset * ys, c.yt, n, want);
      EXPECT_EQ(want[2], 3.0);
      d_sums.upload({0.0, 0.0, 0.0});
      cuda::roundtrip_error_sums(d_sums.get(), static_cast<const uint8_t*>(c.x) + offset * xs, c.xt,
                                 static_cast<const uint8_t*>(c.y) + offset * ys, c.yt, n, nullptr);
      const auto got = d_sums.download();
      EXPECT_EQ(got[2], want[2]);
      // With non-finite inputs both sums are non-finite on both sides.
      EXPECT_FALSE(std::isfinite(got[0]) || std::isfinite(got[1]));
    }
    // Finite inputs: the sums themselves, against the reference.
    for (size_t i : {size_t(17), size_t(kLength / 2), size_t(kLength - 2)}) x[i] = 0.5f;
    const auto xb2 = to_bf16(x);
    d_xb.upload(xb2);
    double want[3] = {0, 0, 0};
    cpu::roundtrip_error_sums(xb2.data() + offset, DType::bf16, xhat.data() + offset, DType::f32, n,
                              want);
    d_sums.upload({0.0, 0.0, 0.0});
    cuda::roundtrip_error_sums(d_sums.get(), d_xb.get() + offset, DType::bf16, d_yf.get() + offset,
                               DType::f32, n, nullptr);
    auto got = d_sums.download();
    EXPECT_GT(want[0], 0.0);
    EXPECT_NEAR(got[0], want[0], 1e-12 * want[0]);
    EXPECT_NEAR(got[1], want[1], 1e-12 * want[1]);
    EXPECT_EQ(got[2], 0.0);
    // The sums add into what is there.
    cuda::roundtrip_error_sums(d_sums.get(), d_xb.get() + offset, DType::bf16, d_yf.get() + offset,
                               DType::f32, n, nullptr);
    got = d_sums.download();
    EXPECT_NEAR(got[0], 2 * want[0], 2e-12 * want[0]);
  }
}

#else

TEST(CudaGelu, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
