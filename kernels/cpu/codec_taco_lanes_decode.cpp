// taco's decode, eight groups at a time (kernels/cpu/codec_taco_lanes.h): the eight groups'
// factors at once, the codes' values with the first three butterfly stages, the middle stages in
// registers, and the last stage with the multiply and the output.
#include <cstring>

#include "kernels/cpu/codec_taco_lanes.h"
#include "kernels/hadamard.h"
// after every other header (see the file)
#include "kernels/cpu/codec_taco_lanes_simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace taco::cpu::lanes {
namespace {

// Whether a code of the eight groups is NaN or Inf (E4M3: s1111111; E5M2: s11111xx), which no
// encoder writes (a damaged payload): such batches take the per-group path.
template <int kN, bool kTokens>
TACO_LANES_INLINE bool any_special_code(const uint8_t* codes, const At<kN, kTokens>& at,
                                        bool e4m3) {
  const char mask = e4m3 ? 0x7F : 0x7C;
  if constexpr (kTokens) {
    const __m128i m = _mm_set1_epi8(mask);
    __m128i hit = _mm_setzero_si128();
    for (int i = 0; i < kN; ++i) {
      const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + at(0, i)));
      hit = _mm_or_si128(hit, _mm_cmpeq_epi8(_mm_and_si128(c, m), m));
    }
    return !_mm_testz_si128(hit, hit);
  } else {  // the eight groups' codes are 8 G consecutive bytes
    const VI m = _mm256_set1_epi8(mask);
    VI hit = _mm256_setzero_si256();
    for (int i = 0; i < 8 * kN; i += 32) {
      const VI c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + at(0, i)));
      hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_and_si256(c, m), m));
    }
    return !_mm256_testz_si256(hit, hit);
  }
}

// Codes of elements i0 .. i0 + 7 of the eight groups, sign-extended: c[k] lane l is code
// base[l] + (i0 + k) * stride.
template <int kN, bool kTokens>
TACO_LANES_INLINE void load_codes(const uint8_t* codes, const At<kN, kTokens>& at, int64_t i0,
                                  VI (&c)[8]) {
  if constexpr (kTokens) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      c[k] = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + at(0, i0 + k))));
    }
  } else {
    __m128i r[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; ++l) {
      r[l] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + at(l, i0)));
    }
    const __m128i x01 = _mm_unpacklo_epi8(r[0], r[1]), x23 = _mm_unpacklo_epi8(r[2], r[3]);
    const __m128i x45 = _mm_unpacklo_epi8(r[4], r[5]), x67 = _mm_unpacklo_epi8(r[6], r[7]);
    const __m128i y0 = _mm_unpacklo_epi16(x01, x23), y1 = _mm_unpackhi_epi16(x01, x23);
    const __m128i y2 = _mm_unpacklo_epi16(x45, x67), y3 = _mm_unpackhi_epi16(x45, x67);
    const __m128i z[4] = {_mm_unpacklo_epi32(y0, y2), _mm_unpackhi_epi32(y0, y2),
                          _mm_unpacklo_epi32(y1, y3), _mm_unpackhi_epi32(y1, y3)};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {  // z[k]: elements 2k and 2k + 1, eight bytes each
      c[2 * k] = _mm256_cvtepi8_epi32(z[k]);
      c[2 * k + 1] = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(z[k], z[k]));
    }
  }
}

// The outputs: v[k] lane l is element i0 + k of group l.
template <bool kTokens, bool kAccumulate>
struct ToF32 {
  static constexpr bool tokens = kTokens;
  float* out;
  template <int kN>
  TACO_LANES_INLINE void operator()(const At<kN, kTokens>& at, int64_t i0, V (&v)[8]) const {
    if constexpr (kTokens) {
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) put(out + at(0, i0 + k), v[k]);
    } else {
      transpose8(v);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) put(out + at(l, i0), v[l]);
    }
  }
  TACO_LANES_INLINE static void put(float* p, V v) {
    if constexpr (kAccumulate) v = _mm256_add_ps(_mm256_loadu_ps(p), v);
    _mm256_storeu_ps(p, v);
  }
  // A buffer of n staged outputs (decode_batch) -> out[base, base + n).
  static constexpr bool staged = true;
  TACO_LANES_INLINE ToF32<kTokens, false> into(float* stage) const { return {stage}; }
  TACO_LANES_INLINE void flush(const float* stage, int64_t base, int n) const {
    for (int i = 0; i < n; i += 8) put(out + base + i, _mm256_load_ps(stage + i));
  }
};

template <bool kTokens>
struct ToBf16 {
  static constexpr bool tokens = kTokens;
  bf16* out;
  static constexpr bool staged = false;  // measured: slower through the stage (decode_batch)
  template <int kN>
  TACO_LANES_INLINE void operator()(const At<kN, kTokens>& at, int64_t i0, V (&v)[8]) const {
    VI r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) r[k] = bf16_high(v[k]);
    if constexpr (kTokens) {
#pragma GCC unroll 4
      for (int k = 0; k < 8; k += 2) {
        const VI p = _mm256_permute4x64_epi64(
            _mm256_packus_epi32(_mm256_srli_epi32(r[k], 16), _mm256_srli_epi32(r[k + 1], 16)),
            0xD8);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at(0, i0 + k)),
                         _mm256_castsi256_si128(p));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at(0, i0 + k + 1)),
                         _mm256_extracti128_si256(p, 1));
      }
    } else {
      // x[j] lane l: elements 2j and 2j + 1 of group l; then a 4 x 4 transposition of 32-bit
      // words in each half: row[k] holds group k's eight values (low half), group k + 4's (high).
      VI x[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        x[j] = _mm256_blend_epi16(_mm256_srli_epi32(r[2 * j], 16), r[2 * j + 1], 0xAA);
      }
      const VI t0 = _mm256_unpacklo_epi32(x[0], x[1]), t1 = _mm256_unpackhi_epi32(x[0], x[1]);
      const VI t2 = _mm256_unpacklo_epi32(x[2], x[3]), t3 = _mm256_unpackhi_epi32(x[2], x[3]);
      const VI row[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                         _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at(k, i0)),
                         _mm256_castsi256_si128(row[k]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + at(k + 4, i0)),
                         _mm256_extracti128_si256(row[k], 1));
      }
    }
  }
};

// The eight groups' decode factors mul (kernels/codec_fp8.h), or false where a lane needs the
// per-group path: poisoned, a tiny factor (subnormal, or 0 from a non-zero scale), or one that
// could take an output past 2^127 (n_t * fp8_max * |mul| >= 2^127, n_t = G, or 1 for
// coefficients).
template <int kN, bool kCoeffs>
TACO_LANES_INLINE bool factors(const uint8_t* scales, const Fp8GroupSpec& s, int64_t g, float h,
                               V& mul) {
  V q;
  if (s.scales == Fp8Scales::e8m0) {
    const VI b =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + g)));
    // 0 (2^-127, subnormal) and 0xFF (poisoned) take the per-group path
    const VI odd = _mm256_or_si256(_mm256_cmpeq_epi32(b, _mm256_setzero_si256()),
                                   _mm256_cmpeq_epi32(b, splat_i(0xFF)));
    if (!_mm256_testz_si256(odd, odd)) return false;
    q = as_f(_mm256_slli_epi32(b, 23));
    mul = _mm256_mul_ps(q, splat(h));
  } else {
    q = _mm256_loadu_ps(reinterpret_cast<const float*>(scales + 4 * g));
    if (s.scales == Fp8Scales::dual) {
      const V a =
          _mm256_loadu_ps(reinterpret_cast<const float*>(scales + 4 * (s.num_groups() + g)));
      if (_mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q)) != 0) return false;
      mul = _mm256_mul_ps(q, _mm256_div_ps(splat(h), a));
    } else {
      mul = _mm256_mul_ps(q, splat(h));
    }
  }
  const V zero = _mm256_setzero_ps();
  const V zero_of_zero =
      _mm256_and_ps(_mm256_cmp_ps(mul, zero, _CMP_EQ_OQ), _mm256_cmp_ps(q, zero, _CMP_EQ_OQ));
  const V bound = _mm256_mul_ps(splat(float(kCoeffs ? 1 : kN) * fp8_max(s.format)), abs_of(mul));
  const V within = _mm256_cmp_ps(bound, splat(0x1p127f), _CMP_LT_OQ);  // false for NaN
  return all(_mm256_and_ps(_mm256_or_ps(normal(mul), zero_of_zero), within));
}

// cols: the row length along tokens (s.cols, or a strip's width where codes and out are staged).
// kCoeffs: the outputs are transform coefficients (spec.coefficients): no butterflies, h = 1.
template <int kN, bool kE4m3, bool kCoeffs, class Out>
TACO_LANES_INLINE bool decode_batch(const uint8_t* codes, const uint8_t* scales,
                                    const Fp8GroupSpec& s, int64_t base, int64_t cols, int64_t g,
                                    float h, const Out& out) {
  constexpr bool kTokens = Out::tokens;
  const At<kN, kTokens> at{base, cols};
  V mul;
  if (!factors<kN, kCoeffs>(scales, s, g, h, mul)) return false;
  if (any_special_code(codes, at, kE4m3)) return false;
  V buf[kN];
  for (int b = 0; b < kN / 8; ++b) {
    VI c[8];
    V v[8];
    load_codes(codes, at, 8 * b, c);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) v[k] = fp8_value<kE4m3>(c[k]);
    if constexpr (!kCoeffs) butterflies<3>(v);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) buf[8 * b + k] = v[k];
  }
  if constexpr (!kCoeffs) middle_stages<kN>(buf);
  auto last_stage = [&](const auto& sink, const auto& where) {
    for (int b = 0; b < kN / 2; b += 8) {  // the last stage pairs block b with block b + kN / 2
      V lo[8], hi[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        lo[k] = buf[b + k];
        hi[k] = buf[b + kN / 2 + k];
        if constexpr (!kCoeffs) butterfly(lo[k], hi[k]);
        lo[k] = _mm256_mul_ps(lo[k], mul);
        hi[k] = _mm256_mul_ps(hi[k], mul);
      }
      sink(where, b, lo);
      sink(where, b + kN / 2, hi);
    }
  };
  if constexpr (kTokens || !Out::staged) {
    last_stage(out, at);
  } else {
    // fp32 along hidden: the eight groups' outputs are 8 kN consecutive floats, put together in
    // L1 in output order first and then written (added) in one sequential pass, which memory
    // takes faster than eight interleaved rows (one thread, [8192, 1024], G = 128: decode 0.82 ->
    // 0.45 ns per element, decode-accumulate 0.94 -> 0.41; bf16 outputs were slower this way).
    alignas(32) float stage[8 * kN];
    last_stage(out.into(stage), At<kN, false>{0, s.cols});
    out.flush(stage, base, 8 * kN);
  }
  return true;
}

template <int kN, class Out>
bool decode_sized(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s, int64_t base,
                  int64_t cols, int64_t g, float h, const Out& out) {
  const bool e4m3 = s.format == Fp8Format::e4m3;
  if (s.coefficients) {
    return e4m3 ? decode_batch<kN, true, true>(codes, scales, s, base, cols, g, 1.f, out)
                : decode_batch<kN, false, true>(codes, scales, s, base, cols, g, 1.f, out);
  }
  return e4m3 ? decode_batch<kN, true, false>(codes, scales, s, base, cols, g, h, out)
              : decode_batch<kN, false, false>(codes, scales, s, base, cols, g, h, out);
}

template <template <bool...> class Out, class T, bool... kMore>
bool decode_at(const uint8_t* codes, int64_t base, int64_t cols, const uint8_t* scales,
               const Fp8GroupSpec& s, int64_t g, T* out) {
  const float h = hadamard_scale(int(s.group));
  auto run = [&](auto sink) {
    bool done = false;
    simd::with_taco_size(s.group, [&]<int kN>() {
      done = decode_sized<kN>(codes, scales, s, base, cols, g, h, sink);
    });
    return done;
  };
  return s.along_tokens ? run(Out<true, kMore...>{out}) : run(Out<false, kMore...>{out});
}

template <template <bool...> class Out, class T, bool... kMore>
bool decode_any(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s, int64_t g,
                T* out) {
  const int64_t base = batch_base(s, g);
  return base >= 0 && decode_at<Out, T, kMore...>(codes, base, s.cols, scales, s, g, out);
}

}  // namespace

bool handles(const Fp8GroupSpec& spec) {
  return spec.hadamard && spec.group >= 32 && spec.group <= 512 &&
         (spec.group & (spec.group - 1)) == 0;
}

bool decode8(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec, int64_t g,
             float* out, bool accumulate) {
  return accumulate ? decode_any<ToF32, float, true>(codes, scales, spec, g, out)
                    : decode_any<ToF32, float, false>(codes, scales, spec, g, out);
}

bool decode8(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec, int64_t g,
             bf16* out) {
  return decode_any<ToBf16, bf16>(codes, scales, spec, g, out);
}

bool decode8_strip(const uint8_t* codes, int64_t l0, int64_t width, const uint8_t* scales,
                   const Fp8GroupSpec& spec, int64_t g, float* out) {
  return decode_at<ToF32, float, false>(codes, l0, width, scales, spec, g, out);
}

}  // namespace taco::cpu::lanes

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
