// div_by (kernels/cuda/codec_fp8_div_by.h), the device codecs' division by a per-group value,
// against IEEE division on the CPU: bit for bit within the stated bounds, on random operands, on
// quotients next to rounding midpoints and on signed zeros; and the FP8 code of the quantizer's
// y / q and the decode's x / a within the bounds the kernels check. The same source runs on the
// GPU (with __fmul_rn / __fmaf_rn), where gpu_codecs checks the kernels' bytes.
#include "kernels/cuda/codec_fp8_div_by.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec_fp8.h"

namespace {

using taco::cuda::codec::div_by;
using taco::cuda::codec::magnitude_within;
namespace codec = taco::cuda::codec;

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// A random float with exponent in [lo, hi] (normal), random mantissa and sign.
float random_float(std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> e(lo, hi);
  std::uniform_int_distribution<uint32_t> m(0, (1u << 23) - 1), s(0, 1);
  const uint32_t u = (s(rng) << 31) | (uint32_t(e(rng) + 127) << 23) | m(rng);
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(DivBy, EqualsIeeeDivisionWhereExponentsSumToAtLeastMinus103) {
  std::mt19937 rng(20261203);
  std::uniform_int_distribution<int> ed(-100, 100);
  int64_t mismatches = 0, product_mismatches = 0, n = 0;
  for (int i = 0; i < 2000000; ++i) {
    const int e_d = ed(rng);
    const int lo = std::max(-103 - e_d, -125), hi = std::min(120 - std::max(e_d, 0), 120);
    const float d = random_float(rng, e_d, e_d);
    const float z = random_float(rng, lo, hi);  // the quotient's scale
    const float y = z * d;
    if (!std::isnormal(y)) continue;
    const float rd = 1.f / d;
    ++n;
    mismatches += bits(div_by(y, d, rd)) != bits(y / d);
    product_mismatches += bits(y * rd) != bits(y / d);
  }
  EXPECT_EQ(mismatches, 0) << "of " << n;
  // The corrections matter: the plain product is wrong often enough to be seen here.
  EXPECT_GT(product_mismatches, n / 100) << "of " << n;
}

TEST(DivBy, EqualsIeeeDivisionNextToRoundingMidpoints) {
  // y chosen so that y / d is within about an ulp of a midpoint between two floats, where a
  // faithful but not correctly rounded quotient would differ. (One correction also passes these
  // random cases; the second is what makes the result provably, not probably, right.)
  std::mt19937 rng(7);
  int64_t mismatches = 0, n = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float d = random_float(rng, -20, 20);
    const float z = random_float(rng, -20, 20);
    const double mid = (double(z) + double(std::nextafter(z, 2 * z))) / 2;
    const float y = float(mid * double(d));
    if (!std::isnormal(y)) continue;
    ++n;
    mismatches += bits(div_by(y, d, 1.f / d)) != bits(y / d);
  }
  EXPECT_EQ(mismatches, 0) << "of " << n;
}

TEST(DivBy, KeepsTheSignOfZeroForPositiveDivisors) {
  for (const float d : {1.f, 448.f, 3.f, 1e-20f, 7e30f}) {
    EXPECT_EQ(bits(div_by(0.f, d, 1.f / d)), bits(0.f / d));
    EXPECT_EQ(bits(div_by(-0.f, d, 1.f / d)), bits(-0.f / d));
  }
}

TEST(DivBy, QuantizerCodesWithinItsBounds) {
  // q in [2^-85, 2^120] (kQuantizerMinExp/MaxExp), |y| <= fp8_max * q, y down to far below the
  // smallest FP8 step: the FP8 code of div_by's quotient is the code of y / q.
  std::mt19937 rng(11);
  for (const taco::Fp8Format f : {taco::Fp8Format::e4m3, taco::Fp8Format::e5m2}) {
    const float target = taco::fp8_max(f);
    int64_t mismatches = 0;
    for (int i = 0; i < 1000000; ++i) {
      const float q =
          std::fabs(random_float(rng, codec::kQuantizerMinExp, codec::kQuantizerMaxExp));
      std::uniform_int_distribution<int> depth(0, 60);
      const float y = std::fmod(random_float(rng, -126, 127), target * q) *
                      std::ldexp(1.f, -depth(rng));  // |y| < target q, often tiny
      mismatches += taco::float_to_fp8(div_by(y, q, 1.f / q), f) != taco::float_to_fp8(y / q, f);
    }
    EXPECT_EQ(mismatches, 0) << (f == taco::Fp8Format::e4m3 ? "e4m3" : "e5m2");
  }
}

TEST(DivBy, DecodeDivisionWithinItsBounds) {
  // a in [2^-10, 2^10], x zero or |x| in [2^-86, 2^78]: div_by(x, a) is x / a bit for bit.
  std::mt19937 rng(13);
  int64_t mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float a = std::fabs(random_float(rng, codec::kDecodeAMinExp, codec::kDecodeAMaxExp - 1));
    const float x = i % 1000 == 0 ? (i % 2000 == 0 ? 0.f : -0.f) : random_float(rng, -86, 77);
    mismatches += bits(div_by(x, a, 1.f / a)) != bits(x / a);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(DivBy, MagnitudeWithinIsInclusiveAndRejectsNaN) {
  EXPECT_TRUE((magnitude_within<-10, 10>(1.f)));
  EXPECT_TRUE((magnitude_within<-10, 10>(-1024.f)));  // 2^10
  EXPECT_FALSE((magnitude_within<-10, 10>(std::nextafter(1024.f, 2048.f))));
  EXPECT_TRUE((magnitude_within<-10, 10>(std::ldexp(1.f, -10))));
  EXPECT_FALSE((magnitude_within<-10, 10>(std::nextafter(std::ldexp(1.f, -10), 0.f))));
  EXPECT_FALSE((magnitude_within<-10, 10>(0.f)));
  EXPECT_FALSE((magnitude_within<-10, 10>(std::nanf(""))));
  EXPECT_FALSE((magnitude_within<-10, 10>(INFINITY)));
}

TEST(DivideU32, EqualsIntegerDivisionForEveryKindOfOperand) {
  // Edge divisors and numerators, then fresh random pairs over the whole range.
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 8, 641, 6700417, (1u << 31) - 1, 1u << 31};
  std::uniform_int_distribution<uint32_t> any_d(1, 1u << 31), any_n;
  for (int i = 0; i < 200; ++i) divisors.push_back(any_d(rng) >> (i % 31));
  int64_t mismatches = 0;
  for (uint32_t d : divisors) {
    if (d == 0) continue;
    const codec::DivideU32 fd = codec::divide_u32(d);
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0xFFFFFFFFu, 0xFFFFFFFFu - d}) {
      mismatches += codec::divide(n, fd) != n / d;
    }
    for (int k = 0; k < 20000; ++k) {
      const uint32_t n = any_n(rng);
      mismatches += codec::divide(n, fd) != n / d;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
