// taco's encode, eight groups at a time (kernels/cpu/codec_taco_lanes.h): per batch one pass that
// loads, squares and sums and runs the first three butterfly stages, the middle stages in
// registers, the last stage with the absmax, the eight groups' scalars at once, and the codes.
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

// tree_sum of kernels/codec_fp8.h over eight vectors: adjacent pairs first.
TACO_LANES_INLINE V tree8(const V (&q)[8]) {
  const V p0 = _mm256_add_ps(q[0], q[1]), p1 = _mm256_add_ps(q[2], q[3]);
  const V p2 = _mm256_add_ps(q[4], q[5]), p3 = _mm256_add_ps(q[6], q[7]);
  return _mm256_add_ps(_mm256_add_ps(p0, p1), _mm256_add_ps(p2, p3));
}

// The eight groups' scalars (kernels/codec_fp8.h: a, c = a * h, m = c * max|u|, q or k, f), with
// ok false where a lane needs the per-group path: a sum of squares above 2^64 (or non-finite),
// q = 0, or an f (or e8m0 scale) that is not a normal float.
struct Scalars {
  V f, first, a;  // codes fp8(u * f); scale entries: q or s = q / a, and a (dual)
  VI k;           // e8m0: the stored exponent k
  bool ok;
};

template <int kN>
TACO_LANES_INLINE Scalars scalars(V ss, V mu, const Fp8GroupSpec& s, float h) {
  const float target = fp8_max(s.format);
  Scalars r;
  V ok = _mm256_cmp_ps(ss, splat(0x1p64f), _CMP_LE_OQ);
  const V rms = _mm256_sqrt_ps(_mm256_add_ps(_mm256_div_ps(ss, splat(float(kN))), splat(1e-6f)));
  V a = _mm256_div_ps(splat(target), rms);
  a = _mm256_min_ps(_mm256_max_ps(a, splat(1e-3f)), splat(1e3f));
  VI ea = _mm256_setzero_si256();
  if (s.scales == Fp8Scales::e8m0) {  // a = 2^floor(log2 a), a normal
    const VI bits = _mm256_and_si256(as_i(a), splat_i(0x7F800000u));
    ea = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), splat_i(127));
    a = as_f(bits);
  }
  const V c = _mm256_mul_ps(a, splat(h));
  const V m = _mm256_mul_ps(c, mu);
  r.a = a;
  if (s.scales != Fp8Scales::e8m0) {
    const V q = _mm256_div_ps(m, splat(target));
    r.f = _mm256_mul_ps(c, _mm256_div_ps(splat(1.f), q));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(q, _mm256_setzero_ps(), _CMP_GT_OQ));
    r.first = s.scales == Fp8Scales::dual ? q : _mm256_div_ps(q, a);
    r.k = _mm256_setzero_si256();
  } else {
    // kq: the smallest k with m <= target * 2^k, from the exponents and mantissas of the
    // normal m and target (frexp's); k = clamp(kq - ea, -127, 127), here at most 126 so that
    // 2^-k is a normal float.
    uint32_t target_bits;
    std::memcpy(&target_bits, &target, 4);
    const VI mb = as_i(m), tb = splat_i(target_bits);
    const VI mant = splat_i(0x007FFFFFu);
    VI kq = _mm256_sub_epi32(_mm256_srli_epi32(mb, 23), _mm256_srli_epi32(tb, 23));
    kq = _mm256_sub_epi32(
        kq, _mm256_cmpgt_epi32(_mm256_and_si256(mb, mant), _mm256_and_si256(tb, mant)));
    VI k = _mm256_sub_epi32(kq, ea);
    k = _mm256_min_epi32(_mm256_max_epi32(k, splat_i(uint32_t(-127))), splat_i(127));
    ok = _mm256_and_ps(ok, normal(m));
    ok = _mm256_andnot_ps(as_f(_mm256_cmpgt_epi32(k, splat_i(126))), ok);
    const V s_k = as_f(_mm256_slli_epi32(_mm256_sub_epi32(splat_i(127), k), 23));
    const V s_ea = as_f(_mm256_slli_epi32(_mm256_sub_epi32(splat_i(127), ea), 23));
    r.f = _mm256_mul_ps(_mm256_mul_ps(c, s_k), s_ea);
    r.k = k;
    r.first = a;
  }
  r.ok = all(_mm256_and_ps(ok, normal(r.f)));
  return r;
}

// Four vectors of codes (one element each) -> bytes: in each 128-bit half, c0's four lanes, then
// c1's, c2's, c3's.
TACO_LANES_INLINE VI pack4(VI c0, VI c1, VI c2, VI c3) {
  return _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
}

// kCoeffs: the values are transform coefficients (spec.coefficients): no butterflies, h = 1.
template <int kN, bool kE4m3, bool kTokens, bool kCoeffs, class T>
TACO_LANES_INLINE bool encode_batch(const T* x, const At<kN, kTokens>& at, const Fp8GroupSpec& s,
                                    int64_t g, uint8_t* codes, uint8_t* scales, float h) {
  constexpr int kHalf = kN / 2;
  V buf[kN];
  V part[kN / 8];  // sums of squares of each block of eight elements
  // Along hidden the eight groups are 8 kN consecutive values: read in order into L1 first, then
  // transposed from there (one thread, [8192, 1024], G = 128: fp32 1.08 -> 0.50 ns per element,
  // bf16 unchanged; staging the codes on the way out instead made bf16 slower, 0.43 -> 0.52).
  alignas(32) T stage[kTokens ? 1 : 8 * kN];
  const T* src = x;
  At<kN, kTokens> from = at;
  if constexpr (!kTokens) {
    constexpr int kPer = 32 / sizeof(T);
    for (int i = 0; i < 8 * kN; i += kPer) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(stage + i),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + at(0, i))));
    }
    src = stage;
    from.base = 0;
  }
  for (int b = 0; b < kN / 8; ++b) {
    V v[8], q[8];
    load_block(src, from, 8 * b, v);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) q[k] = _mm256_mul_ps(v[k], v[k]);
    part[b] = tree8(q);
    if constexpr (!kCoeffs) butterflies<3>(v);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) buf[8 * b + k] = v[k];
  }
  for (int w = 1; w < kN / 8; w *= 2) {
    for (int i = 0; i < kN / 8; i += 2 * w) part[i] = _mm256_add_ps(part[i], part[i + w]);
  }
  V m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
  if constexpr (kCoeffs) {
    for (int i = 0; i < kN; i += 2) {
      m0 = _mm256_max_ps(abs_of(buf[i]), m0);
      m1 = _mm256_max_ps(abs_of(buf[i + 1]), m1);
    }
  } else {
    middle_stages<kN>(buf);
    // The last stage's outputs are a + c and a - c; max(|a + c|, |a - c|) = |a| + |c|, rounded
    // the same way, so the absmax needs no pass over them.
    for (int i = 0; i < kHalf; i += 2) {
      m0 = _mm256_max_ps(_mm256_add_ps(abs_of(buf[i]), abs_of(buf[i + kHalf])), m0);
      m1 = _mm256_max_ps(_mm256_add_ps(abs_of(buf[i + 1]), abs_of(buf[i + 1 + kHalf])), m1);
    }
  }
  const Scalars sc = scalars<kN>(part[0], _mm256_max_ps(m0, m1), s, h);
  if (!sc.ok) return false;

  // Codes of element i: the last stage, the multiply, the conversion.
  const V f = sc.f;
  auto code = [&](int i) {
    V u = buf[i];
    if constexpr (!kCoeffs) {
      u = i < kHalf ? _mm256_add_ps(buf[i], buf[i + kHalf]) : _mm256_sub_ps(buf[i - kHalf], buf[i]);
    }
    return fp8_code<kE4m3>(_mm256_mul_ps(u, f));
  };
  if constexpr (kTokens) {
    const VI order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
#pragma GCC unroll 2
    for (int i = 0; i < kN; i += 4) {
      const VI b =
          _mm256_permutevar8x32_epi32(pack4(code(i), code(i + 1), code(i + 2), code(i + 3)),
                                      order);  // element i + t: bytes 8t .. 8t + 7
      const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + at(0, i)), lo);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + at(0, i + 1)),
                       _mm_unpackhi_epi64(lo, lo));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + at(0, i + 2)), hi);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + at(0, i + 3)),
                       _mm_unpackhi_epi64(hi, hi));
    }
  } else {
    // Each lane's four codes into one 32-bit word, then eight words of a lane into a row.
    const VI by_group = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4,
                                         8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int i0 = 0; i0 < kN; i0 += 32) {
      V w[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const int i = i0 + 4 * j;
        w[j] = as_f(
            _mm256_shuffle_epi8(pack4(code(i), code(i + 1), code(i + 2), code(i + 3)), by_group));
      }
      transpose8(w);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + at(l, i0)), as_i(w[l]));
      }
    }
  }

  const int64_t groups = s.num_groups();
  if (s.scales == Fp8Scales::e8m0) {
    alignas(32) int32_t k[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(k), sc.k);
    for (int l = 0; l < 8; ++l) scales[g + l] = uint8_t(k[l] + 127);
  } else {
    _mm256_storeu_ps(reinterpret_cast<float*>(scales + 4 * g), sc.first);
    if (s.scales == Fp8Scales::dual) {
      _mm256_storeu_ps(reinterpret_cast<float*>(scales + 4 * (groups + g)), sc.a);
    }
  }
  return true;
}

template <int kN, bool kCoeffs, class T>
bool encode_sized(const T* x, int64_t base, const Fp8GroupSpec& s, int64_t g, uint8_t* codes,
                  uint8_t* scales, float h) {
  const bool e4m3 = s.format == Fp8Format::e4m3;
  if (s.along_tokens) {
    const At<kN, true> at{base, s.cols};
    return e4m3 ? encode_batch<kN, true, true, kCoeffs>(x, at, s, g, codes, scales, h)
                : encode_batch<kN, false, true, kCoeffs>(x, at, s, g, codes, scales, h);
  }
  const At<kN, false> at{base, s.cols};
  return e4m3 ? encode_batch<kN, true, false, kCoeffs>(x, at, s, g, codes, scales, h)
              : encode_batch<kN, false, false, kCoeffs>(x, at, s, g, codes, scales, h);
}

template <class T>
bool encode_any(const T* x, const Fp8GroupSpec& s, int64_t g, uint8_t* codes, uint8_t* scales) {
  const int64_t base = batch_base(s, g);
  if (base < 0) return false;
  bool done = false;
  simd::with_taco_size(s.group, [&]<int kN>() {
    done = s.coefficients
               ? encode_sized<kN, true>(x, base, s, g, codes, scales, 1.f)
               : encode_sized<kN, false>(x, base, s, g, codes, scales, hadamard_scale(kN));
  });
  return done;
}

}  // namespace

bool encode8(const float* x, const Fp8GroupSpec& spec, int64_t g, uint8_t* codes, uint8_t* scales) {
  return encode_any(x, spec, g, codes, scales);
}
bool encode8(const bf16* x, const Fp8GroupSpec& spec, int64_t g, uint8_t* codes, uint8_t* scales) {
  return encode_any(x, spec, g, codes, scales);
}

}  // namespace taco::cpu::lanes

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
