// FP8 conversion must equal CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt) bit for bit
// (round to nearest even, saturate to the largest finite value, NaN -> 0x7F), and the in-group
// Walsh-Hadamard transform must be the orthonormal Sylvester matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/codec_fp8.h"
#include "kernels/cpu/codec_fp8_simd.h"
#include "kernels/hadamard.h"
#include "tests/support/test_util.h"

using taco::float_to_fp8;
using taco::fp8_to_float;
using taco::Fp8Format;

namespace {

constexpr Fp8Format kFormats[] = {Fp8Format::e4m3, Fp8Format::e5m2};

struct FormatFacts {
  int man_bits, bias;
  uint8_t max_code;  // largest finite positive code
};

FormatFacts facts(Fp8Format f) {
  return f == Fp8Format::e4m3 ? FormatFacts{3, 7, 0x7E} : FormatFacts{2, 15, 0x7B};
}

// The value of a code from the format's definition, in double; NaN for NaN codes.
double reference_value(uint8_t code, Fp8Format f) {
  const FormatFacts ff = facts(f);
  const int e = (code & 0x7F) >> ff.man_bits;
  const int m = code & ((1 << ff.man_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int e_max = (1 << (7 - ff.man_bits)) - 1;
  if (f == Fp8Format::e4m3 && e == e_max && m == 7) return std::nan("");
  if (f == Fp8Format::e5m2 && e == e_max) {
    return m ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  }
  if (e == 0) return sign * std::ldexp(double(m), 1 - ff.bias - ff.man_bits);
  return sign * std::ldexp(1.0 + double(m) / (1 << ff.man_bits), e - ff.bias);
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Nearest finite code by search over every finite code, ties to the even code, |x| beyond the
// largest finite value saturating: the definition the conversion must meet.
class ReferenceConverter {
 public:
  explicit ReferenceConverter(Fp8Format f) : max_code_(facts(f).max_code) {
    for (int c = 0; c <= max_code_; ++c) values_.push_back(reference_value(uint8_t(c), f));
  }
  uint8_t operator()(float x) const {
    if (std::isnan(x)) return 0x7F;
    const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
    const double a = std::fabs(double(x));
    if (a >= values_.back()) return uint8_t(sign | max_code_);
    // Codes 0..max_code are increasing in value: the answer is the upper neighbour or the one
    // below it.
    const size_t up = size_t(std::lower_bound(values_.begin(), values_.end(), a) - values_.begin());
    if (values_[up] == a) return uint8_t(sign | up);
    const size_t down = up - 1;
    const double err_up = values_[up] - a, err_down = a - values_[down];
    const size_t best = err_up < err_down   ? up
                        : err_down < err_up ? down
                                            : (up % 2 == 0 ? up : down);
    return uint8_t(sign | best);
  }

 private:
  uint8_t max_code_;
  std::vector<double> values_;
};

const char* format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

}  // namespace

TEST(Fp8Conversion, AllCodesDecodeToTheFormatsValues) {
  for (Fp8Format f : kFormats) {
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
      const double want = reference_value(uint8_t(c), f);
      const float got = fp8_to_float(uint8_t(c), f);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "code " << c;
        ++nans;
      } else {
        EXPECT_EQ(double(got), want) << "code " << c;
      }
    }
    // E4M3 has NaN only at s.1111.111; E5M2 at s.11111.{01,10,11}.
    EXPECT_EQ(nans, f == Fp8Format::e4m3 ? 2 : 6);
  }
  EXPECT_EQ(fp8_to_float(0x7E, Fp8Format::e4m3), 448.f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::e4m3), std::ldexp(1.f, -9));
  EXPECT_EQ(fp8_to_float(0x7B, Fp8Format::e5m2), 57344.f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::e5m2), std::ldexp(1.f, -16));
  EXPECT_TRUE(std::isinf(fp8_to_float(0xFC, Fp8Format::e5m2)));
}

TEST(Fp8Conversion, EveryFiniteCodeRoundTrips) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_to_float(uint8_t(c), f);
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(float_to_fp8(v, f), c) << "code " << c << " value " << v;
    }
  }
}

TEST(Fp8Conversion, MidpointsRoundToTheEvenCode) {
  for (Fp8Format f : kFormats) {
    const uint8_t max_code = facts(f).max_code;
    for (uint8_t sign : {uint8_t(0x00), uint8_t(0x80)}) {
      for (int c = 0; c < max_code; ++c) {
        const uint8_t lo = uint8_t(sign | c), hi = uint8_t(sign | (c + 1));
        // Neighbouring FP8 values have at most 4 significant bits, so the midpoint is exact.
        const float mid = (fp8_to_float(lo, f) + fp8_to_float(hi, f)) / 2;
        const uint8_t even = (c & 1) ? hi : lo;
        EXPECT_EQ(float_to_fp8(mid, f), even) << "between codes " << int(lo) << " and " << int(hi);
        const float toward_hi = std::nextafter(mid, fp8_to_float(hi, f));
        const float toward_lo = std::nextafter(mid, fp8_to_float(lo, f));
        EXPECT_EQ(float_to_fp8(toward_hi, f), hi);
        EXPECT_EQ(float_to_fp8(toward_lo, f), lo);
      }
    }
  }
}

TEST(Fp8Conversion, SaturatesToTheLargestFiniteValue) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Fp8Format f : kFormats) {
    const uint8_t max_code = facts(f).max_code;
    const float max = taco::fp8_max(f);
    for (float x : {std::nextafter(max, inf), max * 1.03125f, max * 1.0625f, max * 2, 1e30f,
                    std::numeric_limits<float>::max(), inf}) {
      EXPECT_EQ(float_to_fp8(x, f), max_code) << x;
      EXPECT_EQ(float_to_fp8(-x, f), 0x80 | max_code) << -x;
    }
  }
}

TEST(Fp8Conversion, NaNBecomesTheCanonicalNaNCode) {
  for (Fp8Format f : kFormats) {
    for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FA00000u}) {
      EXPECT_EQ(float_to_fp8(bits_to_float(bits), f), 0x7F) << std::hex << bits;
    }
  }
}

TEST(Fp8Conversion, TinyValuesKeepTheirSignWhenFlushedToZero) {
  for (Fp8Format f : kFormats) {
    EXPECT_EQ(float_to_fp8(0.f, f), 0x00);
    EXPECT_EQ(float_to_fp8(-0.f, f), 0x80);
    EXPECT_EQ(float_to_fp8(-1e-30f, f), 0x80);
    EXPECT_EQ(float_to_fp8(std::numeric_limits<float>::denorm_min(), f), 0x00);
  }
}

// Every float whose upper 16 bits take all 65536 values, with low halves that sit on, just off
// and between rounding boundaries, plus fresh random ones: the conversion must equal the
// nearest-code search with ties to even and saturation.
TEST(Fp8Conversion, MatchesNearestCodeSearchAcrossTheFloatRange) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng{static_cast<uint32_t>(seed)};
  for (Fp8Format f : kFormats) {
    const ReferenceConverter reference(f);
    int64_t checked = 0, mismatches = 0;
    for (uint32_t hi = 0; hi < 65536; ++hi) {
      for (uint32_t lo :
           {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, uint32_t(rng() & 0xFFFFu)}) {
        const float x = bits_to_float((hi << 16) | lo);
        const uint8_t want = reference(x);
        const uint8_t got = float_to_fp8(x, f);
        ++checked;
        if (got != want && ++mismatches <= 5) {
          ADD_FAILURE() << format_name(f) << " x=" << x << " bits 0x" << std::hex
                        << ((hi << 16) | lo) << " got 0x" << int(got) << " want 0x" << int(want);
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "of " << checked;
  }
}

// The CPU token-axis loops (kernels/cpu/codec_fp8_tokens.cpp) convert with to_fp8_in_range,
// valid for values that are not NaN and lie below the rounding boundary above the largest code
// (464, 61440): it must give float_to_fp8's code for every such float. Every positive float up to
// the boundary (the sign is one OR, checked on every 7th negative one), against the vectorized
// full conversion, itself checked against float_to_fp8 on all 2^32 floats (compression/README.md).
template <bool kE4m3>
int64_t in_range_mismatches(uint32_t bound, uint32_t sign, uint32_t step) {
  int64_t bad = 0;
#pragma omp simd reduction(+ : bad)
  for (uint32_t u = 0; u <= bound; u += step) {
    const float x = taco::cpu::simd::from_bits(u | sign);
    bad += taco::cpu::simd::to_fp8_in_range<kE4m3>(x) != taco::cpu::simd::to_fp8<kE4m3>(x);
  }
  return bad;
}

TEST(Fp8Conversion, InRangeConversionEqualsTheFullOneBelowTheBoundary) {
  constexpr uint32_t kE4m3Bound = 0x43E80000u, kE5m2Bound = 0x476FFFFFu;  // 464, 61440 - ulp
  EXPECT_EQ(in_range_mismatches<true>(kE4m3Bound, 0, 1), 0);
  EXPECT_EQ(in_range_mismatches<true>(kE4m3Bound, 0x80000000u, 7), 0);
  EXPECT_EQ(in_range_mismatches<false>(kE5m2Bound, 0, 1), 0);
  EXPECT_EQ(in_range_mismatches<false>(kE5m2Bound, 0x80000000u, 7), 0);
  // Past the boundary the two differ (480 saturates to 448 in the full conversion), so the
  // bound of the contract is the real one.
  EXPECT_NE(taco::cpu::simd::to_fp8_in_range<true>(480.f), taco::cpu::simd::to_fp8<true>(480.f));
}

TEST(Hadamard, MatchesTheOrthonormalSylvesterMatrix) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int n = 1; n <= 512; n *= 2) {
    std::vector<float> x = taco::test::random_normal(size_t(n), seed + uint64_t(n));
    std::vector<double> want(size_t(n), 0.0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        // Sylvester: H[i][j] = (-1)^popcount(i & j).
        const double h = (__builtin_popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0;
        want[size_t(i)] += h * double(x[size_t(j)]);
      }
      want[size_t(i)] /= std::sqrt(double(n));
    }
    taco::cpu::hadamard_transform(x.data(), n);
    double err = 0, ref = 0;
    for (int i = 0; i < n; ++i) {
      err += (double(x[size_t(i)]) - want[size_t(i)]) * (double(x[size_t(i)]) - want[size_t(i)]);
      ref += want[size_t(i)] * want[size_t(i)];
    }
    // log2(n) fp32 butterfly stages plus one scaling: a few fp32 epsilons (6e-8) each.
    EXPECT_LE(std::sqrt(err / ref), 1e-6) << "n=" << n;
  }
}

TEST(Hadamard, IsItsOwnInverseAndKeepsTheNorm) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (int n : {32, 64, 128, 256, 512}) {
    const std::vector<float> x = taco::test::random_normal(size_t(n), seed ^ uint64_t(n), 0, 3e-3f);
    std::vector<float> y = x;
    taco::cpu::hadamard_transform(y.data(), n);
    double nx = 0, ny = 0;
    for (int i = 0; i < n; ++i) {
      nx += double(x[size_t(i)]) * x[size_t(i)];
      ny += double(y[size_t(i)]) * y[size_t(i)];
    }
    EXPECT_NEAR(std::sqrt(ny / nx), 1.0, 1e-6) << "n=" << n;
    taco::cpu::hadamard_transform(y.data(), n);
    EXPECT_LE(taco::test::relative_l2(y.data(), x.data(), size_t(n)), 1e-6) << "n=" << n;
  }
}
