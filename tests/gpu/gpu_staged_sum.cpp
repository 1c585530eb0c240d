// staged_sum_async (parallel/staged_sum.h), the two-shot reduction of the host-staged backend,
// against a CPU reference on fresh random inputs: p = 1..5 copies, counts with tails after the
// 16-byte vectors, and buffers off 16-byte alignment (the element-by-element path), bf16 and
// fp32, in place and not.
// Tolerance: zero. The reference performs the kernel's operations in its order (fp32 adds from
// 0 in rank order, one round to nearest even for bf16), and IEEE fp32 addition is exact to the
// bit on both sides. As a check on the reference itself, it also lies within one bf16 rounding
// (2^-8 relative) plus p fp32 roundings of the fp64 sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/runtime/device.h"
#include "parallel/staged_sum.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA

template <class T>
float widen(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return bf16_to_float(x);
}
template <class T>
T narrow(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return float_to_bf16(x);
}

template <class T>
void check(int p, size_t n, size_t misalign, bool in_place, uint64_t seed) {
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::bf16;
  SCOPED_TRACE(test::describe("p ", p, " n ", n, " misalign ", misalign, " in place ", in_place,
                              " ", dtype_name(dtype), " seed ", seed));
  const int me = p / 2;
  // Slots 16-byte apart (a multiple of 8 elements) only when aligned.
  const size_t stride = (n + misalign + 7) / 8 * 8 + misalign;
  std::vector<T> own(n + misalign), slots(stride * size_t(p));
  const std::vector<float> a = test::random_normal(own.size(), seed);
  const std::vector<float> b = test::random_normal(slots.size(), seed + 1, 0.f, 3.f);
  for (size_t i = 0; i < own.size(); ++i) own[i] = narrow<T>(a[i]);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = narrow<T>(b[i]);

  std::vector<T> want(n);
  size_t far = 0;
  for (size_t i = 0; i < n; ++i) {
    float acc = 0.f;
    double exact = 0, mag = 0;
    for (int q = 0; q < p; ++q) {
      const float x = widen(q == me ? own[misalign + i] : slots[size_t(q) * stride + misalign + i]);
      acc += x;
      exact += x;
      mag += std::fabs(x);
    }
    want[i] = narrow<T>(acc);
    const double u = std::is_same_v<T, float> ? 0.0 : std::ldexp(1.0, -8);
    far += std::fabs(widen(want[i]) - exact) > u * std::fabs(exact) + p * std::ldexp(mag, -23);
  }
  EXPECT_EQ(far, 0u) << "the reference strays from the fp64 sum";

  test::DeviceArray<T> d_own(own), d_slots(slots), d_out(n + misalign);
  T* out = in_place ? d_own.get() + misalign : d_out.get() + misalign;
  staged_sum_async(d_own.get() + misalign, d_slots.get() + misalign, stride, p, me, out, n, dtype,
                   nullptr);
  test::device_synchronize();
  const std::vector<T> got = (in_place ? d_own : d_out).download();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += std::memcmp(&got[misalign + i], &want[i], sizeof(T)) != 0;
  EXPECT_EQ(wrong, 0u);
}

TEST(GpuStagedSum, MatchesTheRankOrderFp32SumBitForBit) {
  TACO_SKIP_WITHOUT_GPU();
  const uint64_t seed = test::fresh_seed();
  for (int p = 1; p <= 5; ++p) {
    for (size_t n : {size_t(1), size_t(13), size_t(4096), size_t(100003)}) {
      check<bf16>(p, n, 0, false, seed + n);
      check<float>(p, n, 0, p % 2 == 1, seed + n);
    }
  }
  // Off alignment: the element-by-element path, and its seam with the vector path.
  check<bf16>(3, 1001, 1, false, seed);
  check<bf16>(2, 1001, 3, true, seed + 1);
  check<float>(4, 999, 2, false, seed + 2);
}

#else

TEST(GpuStagedSum, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
