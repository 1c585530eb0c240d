// Building blocks of taco's eight-groups-at-a-time codecs (kernels/cpu/codec_taco_lanes.h): AVX2
// loads that put one element index of eight groups into one vector (lane l: group l), the
// butterflies on such vectors, the FP8 and bf16 conversions of the fast path, transpositions.
// Included by codec_taco_lanes_encode.cpp and codec_taco_lanes_decode.cpp after all their other
// headers: everything here has internal linkage and is compiled for AVX2 (the pragma), and those
// files are built without FMA contraction (kernels/CMakeLists.txt), so every step is the
// reference's fp32 operation.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/codec_fp8.h"
#include "kernels/cpu/codec_fp8_simd.h"
#include "kernels/dtype.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace taco::cpu::lanes {
namespace {

#define TACO_LANES_INLINE inline __attribute__((always_inline))

using V = __m256;
using VI = __m256i;

TACO_LANES_INLINE VI as_i(V v) { return _mm256_castps_si256(v); }
TACO_LANES_INLINE V as_f(VI v) { return _mm256_castsi256_ps(v); }
TACO_LANES_INLINE V splat(float f) { return _mm256_set1_ps(f); }
TACO_LANES_INLINE VI splat_i(uint32_t u) { return _mm256_set1_epi32(int(u)); }
TACO_LANES_INLINE V abs_of(V v) { return as_f(_mm256_and_si256(as_i(v), splat_i(0x7FFFFFFFu))); }
// Every lane's bits of a compare result set.
TACO_LANES_INLINE bool all(V mask) { return _mm256_movemask_ps(mask) == 0xFF; }
TACO_LANES_INLINE V normal(V v) {  // |v| a normal float (false for 0, subnormals, Inf, NaN)
  const V a = abs_of(v);
  return _mm256_and_ps(_mm256_cmp_ps(a, splat(0x1p-126f), _CMP_GE_OQ),
                       _mm256_cmp_ps(a, splat(0x1.fffffep127f), _CMP_LE_OQ));
}

constexpr int log2_of(int n) { return n <= 1 ? 0 : 1 + log2_of(n / 2); }

// Where a batch's eight groups are: element i of lane l at base + l * G + i along hidden (eight
// groups that follow each other in memory: cols % G == 0, or all eight in one row), at base + l +
// i * cols along tokens (eight neighbouring columns of one row block).
template <int kN, bool kTokens>
struct At {
  int64_t base, cols;
  TACO_LANES_INLINE int64_t operator()(int l, int64_t i) const {
    return kTokens ? base + l + i * cols : base + l * kN + i;
  }
};

// The first element of groups g .. g + 7 if they are eight full groups laid out as At says, else
// -1.
inline int64_t batch_base(const Fp8GroupSpec& s, int64_t g) {
  const int64_t G = s.group;
  if (!s.along_tokens) {
    const int64_t per_row = (s.cols + G - 1) / G, r = g / per_row, j = g % per_row;
    if (s.cols % G != 0 && (j + 8) * G > s.cols) return -1;
    return r * s.cols + j * G;  // with cols % G == 0, the groups after a row's last are the next's
  }
  const int64_t rb = g / s.cols, c = g % s.cols;
  if (c + 8 > s.cols || (rb + 1) * G > s.rows) return -1;
  return rb * G * s.cols + c;
}

// ---- Loads: v[k] lane l = x[at(l, i0 + k)], k < 8.

template <int kN, bool kTokens>
TACO_LANES_INLINE void load_block(const bf16* x, const At<kN, kTokens>& at, int64_t i0, V (&v)[8]) {
  if constexpr (kTokens) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + at(0, i0 + k)));
      v[k] = as_f(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
    }
  } else {
    // Rows of lanes l and l + 4 in one register; 16-bit and 32-bit interleaves transpose them,
    // and interleaving with zeros makes the bf16 halves floats (bf16 << 16).
    auto rows = [&](int l) {
      return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(x + at(l + 4, i0)),
                                 reinterpret_cast<const __m128i*>(x + at(l, i0)));
    };
    const VI r0 = rows(0), r1 = rows(1), r2 = rows(2), r3 = rows(3);
    const VI t0 = _mm256_unpacklo_epi16(r0, r1), t1 = _mm256_unpackhi_epi16(r0, r1);
    const VI t2 = _mm256_unpacklo_epi16(r2, r3), t3 = _mm256_unpackhi_epi16(r2, r3);
    const VI u[4] = {_mm256_unpacklo_epi32(t0, t2), _mm256_unpackhi_epi32(t0, t2),
                     _mm256_unpacklo_epi32(t1, t3), _mm256_unpackhi_epi32(t1, t3)};
    const VI z = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = as_f(_mm256_unpacklo_epi16(z, u[k]));
      v[2 * k + 1] = as_f(_mm256_unpackhi_epi16(z, u[k]));
    }
  }
}

template <int kN, bool kTokens>
TACO_LANES_INLINE void load_block(const float* x, const At<kN, kTokens>& at, int64_t i0,
                                  V (&v)[8]) {
  if constexpr (kTokens) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) v[k] = _mm256_loadu_ps(x + at(0, i0 + k));
  } else {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {  // elements i0 + 4h .. + 3: four 4 x 4 transpositions
      auto rows = [&](int l) {
        return _mm256_loadu2_m128(x + at(l + 4, i0 + 4 * h), x + at(l, i0 + 4 * h));
      };
      const V r0 = rows(0), r1 = rows(1), r2 = rows(2), r3 = rows(3);
      const __m256d t0 = _mm256_castps_pd(_mm256_unpacklo_ps(r0, r1));
      const __m256d t1 = _mm256_castps_pd(_mm256_unpackhi_ps(r0, r1));
      const __m256d t2 = _mm256_castps_pd(_mm256_unpacklo_ps(r2, r3));
      const __m256d t3 = _mm256_castps_pd(_mm256_unpackhi_ps(r2, r3));
      v[4 * h] = _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2));
      v[4 * h + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2));
      v[4 * h + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3));
      v[4 * h + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3));
    }
  }
}

// ---- Butterflies (kernels/hadamard.h's order of stages; each output is lo + hi or lo - hi).

TACO_LANES_INLINE void butterfly(V& lo, V& hi) {
  const V a = lo, c = hi;
  lo = _mm256_add_ps(a, c);
  hi = _mm256_sub_ps(a, c);
}

// Stages h = 1, 2, 4 .. 2^(kCount - 1) over m = 2^kCount vectors.
template <int kCount>
TACO_LANES_INLINE void butterflies(V* v) {
  constexpr int m = 1 << kCount;
#pragma GCC unroll 4
  for (int h = 1; h < m; h *= 2) {
#pragma GCC unroll 8
    for (int i = 0; i < m; i += 2 * h) {
#pragma GCC unroll 4
      for (int t = i; t < i + h; ++t) butterfly(v[t], v[t + h]);
    }
  }
}

// Stages kFirst .. kFirst + kCount - 1 on buf, 2^kCount vectors at a time in registers.
template <int kN, int kFirst, int kCount>
TACO_LANES_INLINE void stages(V* buf) {
  constexpr int h0 = 1 << kFirst, m = 1 << kCount;
  for (int hi = 0; hi < kN; hi += h0 * m) {
    for (int lo = 0; lo < h0; ++lo) {
      V v[m];
#pragma GCC unroll 8
      for (int j = 0; j < m; ++j) v[j] = buf[hi + lo + j * h0];
      butterflies<kCount>(v);
#pragma GCC unroll 8
      for (int j = 0; j < m; ++j) buf[hi + lo + j * h0] = v[j];
    }
  }
}

// Stages 3 .. log2(kN) - 2: all but the first three (done at load) and the last (done with the
// absmax or the output).
template <int kN, int kFirst = 3>
TACO_LANES_INLINE void middle_stages(V* buf) {
  constexpr int last = log2_of(kN) - 1;
  if constexpr (kFirst < last) {
    constexpr int count = last - kFirst < 3 ? last - kFirst : 3;
    stages<kN, kFirst, count>(buf);
    middle_stages<kN, kFirst + count>(buf);
  }
}

// ---- Conversions (kernels/cpu/codec_fp8_simd.h's, for the values the fast path sees).

// FP8 code of y, for |y| below the rounding boundary above fp8_max (464, 61440) and not NaN:
// rounded to nearest even by adding C = 2^(e + 23 - mantissa bits), e the exponent of |y| but
// at least the smallest normal's, so that the float add rounds |y| to the FP8 step of its binade
// (subnormal steps included); the code is that count of steps plus the binade's first code. (The
// fast path's y = u * f is at most fp8_max times (1 + a few ulps): f = c / q, q = c max|u| /
// fp8_max, each rounded once.)
template <bool kE4m3>
TACO_LANES_INLINE VI fp8_code(V y) {
  constexpr uint32_t shift = kE4m3 ? 20u : 21u;                     // 23 - mantissa bits
  constexpr uint32_t min_norm = kE4m3 ? 0x3C800000u : 0x38800000u;  // 2^-6, 2^-14
  // code = steps + ((biased exponent of the binade) << (mantissa bits)) - this
  constexpr uint32_t first = kE4m3 ? 121u * 8u : 113u * 4u;
  const VI b = as_i(y);
  const VI a = _mm256_and_si256(b, splat_i(0x7FFFFFFFu));
  const VI ex = _mm256_max_epu32(_mm256_and_si256(b, splat_i(0x7F800000u)), splat_i(min_norm));
  const VI c = _mm256_add_epi32(ex, splat_i(shift << 23));
  const VI steps = _mm256_sub_epi32(as_i(_mm256_add_ps(as_f(a), as_f(c))), c);
  const VI code =
      _mm256_add_epi32(steps, _mm256_sub_epi32(_mm256_srli_epi32(ex, shift), splat_i(first)));
  return _mm256_or_si256(code, _mm256_srli_epi32(_mm256_xor_si256(b, a), 24));
}

// The value of a finite FP8 code (s: the code sign-extended to 32 bits): its exponent and
// mantissa placed in a float's, times 2^(127 - bias) (exact, subnormal codes included).
template <bool kE4m3>
TACO_LANES_INLINE V fp8_value(VI s) {
  const VI t = _mm256_slli_epi32(s, kE4m3 ? 20 : 21);
  const VI m = _mm256_and_si256(t, splat_i(kE4m3 ? 0x07F00000u : 0x0FE00000u));
  const V mag = _mm256_mul_ps(as_f(m), splat(kE4m3 ? 0x1p120f : 0x1p112f));
  return as_f(_mm256_or_si256(as_i(mag), _mm256_and_si256(t, splat_i(0x80000000u))));
}

// float -> bf16 bits (round to nearest even) of finite values, in the high half of each lane.
TACO_LANES_INLINE VI bf16_high(V v) {
  const VI u = as_i(v);
  const VI odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), splat_i(1));
  return _mm256_add_epi32(u, _mm256_add_epi32(odd, splat_i(0x7FFF)));
}

// 8 x 8 transposition of 32-bit lanes.
TACO_LANES_INLINE void transpose8(V (&r)[8]) {
  V t[8], s[8];
#pragma GCC unroll 4
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
#pragma GCC unroll 2
  for (int k = 0; k < 8; k += 4) {
    s[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    s[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    s[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    s[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(s[k], s[k + 4], 0x31);
  }
}

}  // namespace
}  // namespace taco::cpu::lanes

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
