// Element loops of the CPU FP8 codecs (kernels/cpu/codec_fp8.cpp) written for the compiler's
// vectorizer: branch-free conversions, fixed-size lane arrays for the reductions, restrict
// pointers, G a compile-time constant where it can be. Every function gives the bits of the
// scalar definition in kernels/codec_fp8.h (the conversions were checked on all 2^32 floats,
// the codecs by tests/unit/test_codec_cpu_bits.cpp). Everything is always_inline so that it is
// compiled for the instruction set of the function that uses it (codec_fp8.cpp builds its group
// loops twice: baseline x86-64 and AVX2, chosen at run time).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/codec_fp8.h"

#define TACO_SIMD_INLINE inline __attribute__((always_inline))

namespace taco::cpu::simd {

TACO_SIMD_INLINE uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
TACO_SIMD_INLINE float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// cond ? a : b as masks, so that the compiler keeps it a select (a ternary next to float
// arithmetic becomes a branch, which stops the vectorizer: "control flow in loop").
TACO_SIMD_INLINE uint32_t select(bool cond, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - uint32_t(cond);
  return (a & m) | (b & ~m);
}

// float_to_fp8 without branches. Normal FP8 results: the float's bits rebiased, rounded to
// nearest even by adding half an ulp - 1 plus the kept lowest bit, then shifted (a carry into
// the exponent is the correct rounding up). Subnormal and zero results (|x| < the smallest
// normal): the FPU rounds |x| + 2^(23 + log2 of the subnormal step) to the step, nearest even,
// and the difference of the bits is the code. Then saturation and NaN, as float_to_fp8.
template <bool kE4m3>
TACO_SIMD_INLINE uint8_t to_fp8(float x) {
  constexpr uint32_t shift = kE4m3 ? 20u : 21u;  // 23 - mantissa bits
  constexpr uint32_t rebias = kE4m3 ? (120u << 23) : (112u << 23);
  constexpr uint32_t min_norm = kE4m3 ? 0x3C800000u : 0x38800000u;  // 2^-6, 2^-14
  constexpr uint32_t overflow = kE4m3 ? 0x43E80000u : 0x476FFFFFu;
  constexpr uint32_t max_norm = kE4m3 ? 0x7Eu : 0x7Bu;
  constexpr float magic = kE4m3 ? 0x1p14f : 0x1p7f;  // its ulp is the subnormal step 2^-9, 2^-16
  const uint32_t b = bits(x), absx = b & 0x7FFFFFFFu, sign = (b >> 24) & 0x80u;
  uint32_t r = absx - rebias;
  r = (r + ((1u << (shift - 1)) - 1u) + ((r >> shift) & 1u)) >> shift;
  const uint32_t sub = bits(from_bits(absx) + magic) - bits(magic);
  uint32_t res = select(absx < min_norm, sub, r);
  res = select(absx > overflow, max_norm, res);
  res = select(absx > 0x7F800000u, 0x7Fu, res | sign);
  return uint8_t(res);
}

// to_fp8 in fewer operations, for a y that is not NaN and lies below the rounding boundary
// above fp8_max (464, 61440) in magnitude: the method of fp8_code in
// kernels/cpu/codec_taco_lanes_simd.h written for the vectorizer (adding 2^(e + 23 - mantissa
// bits), e the exponent of |y| but at least the smallest normal's, makes the FPU round |y| to the
// FP8 step of its binade; the bits that add moves are the count of steps).
template <bool kE4m3>
TACO_SIMD_INLINE uint8_t to_fp8_in_range(float y) {
  constexpr uint32_t shift = kE4m3 ? 20u : 21u;                     // 23 - mantissa bits
  constexpr uint32_t min_norm = kE4m3 ? 0x3C800000u : 0x38800000u;  // 2^-6, 2^-14
  constexpr uint32_t first = kE4m3 ? 121u * 8u : 113u * 4u;  // (binade's exponent << bits) - code
  const uint32_t b = bits(y), a = b & 0x7FFFFFFFu, e = b & 0x7F800000u;
  const uint32_t ex = e > min_norm ? e : min_norm, c = ex + (shift << 23);
  const uint32_t steps = bits(from_bits(a) + from_bits(c)) - c;
  return uint8_t((steps + (ex >> shift) - first) | ((b ^ a) >> 24));
}

// fp8_to_float without a table: the code's exponent and mantissa placed in a float's and the
// bias corrected by one exact multiply (which also makes FP8 subnormals right); NaN (and E5M2's
// Inf) codes as fp8_to_float gives them.
template <bool kE4m3>
TACO_SIMD_INLINE float from_fp8(uint8_t code) {
  const uint32_t c = code, m7 = c & 0x7Fu, sign = (c & 0x80u) << 24;
  const float v = from_bits(m7 << (kE4m3 ? 20u : 21u)) * (kE4m3 ? 0x1p120f : 0x1p112f);
  uint32_t out = bits(v) | sign;
  if (kE4m3) {
    out = select(m7 == 0x7Fu, sign | 0x7FC00000u, out);
  } else {
    out = select(m7 >= 0x7Cu, sign | select(m7 > 0x7Cu, 0x7FC00000u, 0x7F800000u), out);
  }
  return from_bits(out);
}

// from_fp8 for a code that is neither NaN nor Inf (the caller checked: special_code): the same
// bits without the selects; the sign goes in with the magnitude's OR.
template <bool kE4m3>
TACO_SIMD_INLINE float from_fp8_number(uint8_t code) {
  const uint32_t c = code;
  const float v = from_bits((c & 0x7Fu) << (kE4m3 ? 20u : 21u)) * (kE4m3 ? 0x1p120f : 0x1p112f);
  return from_bits(bits(v) | ((c & 0x80u) << 24));
}

// Whether one of codes[0, n) is NaN (E4M3 s1111111; E5M2 s11111xx but Inf) or Inf (E5M2
// s1111100).
template <bool kE4m3>
TACO_SIMD_INLINE bool any_special_code(const uint8_t* __restrict codes, int n) {
  // a byte's bit 7 is set where code & 0x7F reaches the first special value (0x7F, 0x7C)
  constexpr uint8_t kBelow = kE4m3 ? 0x01 : 0x04;
  uint8_t any = 0;
#pragma omp simd reduction(| : any)
  for (int i = 0; i < n; ++i) any |= uint8_t((codes[i] & 0x7Fu) + kBelow);
  return (any & 0x80u) != 0;
}

// float_to_bf16 (kernels/dtype.h) without the branch.
TACO_SIMD_INLINE uint16_t to_bf16_bits(float f) {
  const uint32_t u = bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return uint16_t(select((u & 0x7FFFFFFFu) > 0x7F800000u, nan, rounded));
}

// to_bf16_bits for a float that is not NaN.
TACO_SIMD_INLINE uint16_t to_bf16_bits_number(float f) {
  const uint32_t u = bits(f);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

TACO_SIMD_INLINE float load_value(const float* x, int64_t i) { return x[i]; }
TACO_SIMD_INLINE float load_value(const bf16* x, int64_t i) {
  return from_bits(uint32_t(x[i].bits) << 16);
}

// v[0, n) = x[i * stride]; returns how many are NaN or Inf.
template <class T>
TACO_SIMD_INLINE int load_group(const T* __restrict x, int64_t stride, int n, float* __restrict v) {
  int bad = 0;
  if (stride == 1) {
#pragma omp simd reduction(+ : bad)
    for (int i = 0; i < n; ++i) {
      v[i] = load_value(x, i);
      bad += int((bits(v[i]) & 0x7F800000u) == 0x7F800000u);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      v[i] = load_value(x, i * stride);
      bad += int((bits(v[i]) & 0x7F800000u) == 0x7F800000u);
    }
  }
  return bad;
}

// Whether some |v[i]| has bits >= from (0x7F800000: NaN or Inf; 0x7F7F8000: NaN or Inf once
// rounded to bf16).
TACO_SIMD_INLINE bool any_nonfinite(const float* __restrict v, int n, uint32_t from) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (int i = 0; i < n; ++i) bad |= int((bits(v[i]) & 0x7FFFFFFFu) >= from);
  return bad != 0;
}

constexpr int kLanes = 16;  // independent partial results of a reduction (vector lanes)

// max |v[i]| over finite v (a NaN, from Inf - Inf in the butterflies, is skipped as std::max
// skips it); the order does not matter for max.
TACO_SIMD_INLINE float absmax(const float* __restrict v, int n) {
  float lane[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const float a = from_bits(bits(v[i + l]) & 0x7FFFFFFFu);
      lane[l] = lane[l] < a ? a : lane[l];
    }
  }
  float m = 0.f;
  for (; i < n; ++i) {
    const float a = from_bits(bits(v[i]) & 0x7FFFFFFFu);
    m = m < a ? a : m;
  }
  for (int l = 0; l < kLanes; ++l) m = m < lane[l] ? lane[l] : m;
  return m;
}

// tree_sum(v^2) of kernels/codec_fp8.h over n <= p values, p = next power of two; a and b are
// scratch of p floats. Each stage packs its sums to the front: s[i] = s[2i] + s[2i + 1].
TACO_SIMD_INLINE float sum_of_squares(const float* __restrict v, int n, int p, float* __restrict a,
                                      float* __restrict b) {
#pragma omp simd
  for (int i = 0; i < n; ++i) a[i] = v[i] * v[i];
  for (int i = n; i < p; ++i) a[i] = 0.f;
  for (int len = p / 2; len >= 1; len /= 2) {
#pragma omp simd
    for (int i = 0; i < len; ++i) b[i] = a[2 * i] + a[2 * i + 1];
    float* t = a;
    a = b;
    b = t;
  }
  return a[0];
}

// The butterflies of kernels/hadamard.h (no 1 / sqrt(n)), same order of stages; within a stage
// every output is one add or subtract of the stage's inputs, so any order of the pairs gives
// the same bits. The first two stages run together on blocks of 4.
template <int kN>
TACO_SIMD_INLINE void butterflies(float* __restrict v) {
  static_assert(kN >= 4 && (kN & (kN - 1)) == 0, "a power of two >= 4");
#pragma omp simd
  for (int b = 0; b < kN; b += 4) {
    const float a0 = v[b], a1 = v[b + 1], a2 = v[b + 2], a3 = v[b + 3];
    const float s0 = a0 + a1, s1 = a0 - a1, s2 = a2 + a3, s3 = a2 - a3;
    v[b] = s0 + s2;
    v[b + 1] = s1 + s3;
    v[b + 2] = s0 - s2;
    v[b + 3] = s1 - s3;
  }
  for (int h = 4; h < kN; h *= 2) {
    for (int base = 0; base < kN; base += 2 * h) {
      float* __restrict lo = v + base;
      float* __restrict hi = v + base + h;
#pragma omp simd
      for (int i = 0; i < h; ++i) {
        const float a = lo[i], c = hi[i];
        lo[i] = a + c;
        hi[i] = a - c;
      }
    }
  }
}

// f.template operator()<kN>() with kN = n, and true, where n is one of taco's group sizes
// (32 .. 512, compile-time sizes for the loops); false for any other n.
template <class F>
TACO_SIMD_INLINE bool with_taco_size(int64_t n, F&& f) {
  switch (n) {
    case 32:
      return f.template operator()<32>(), true;
    case 64:
      return f.template operator()<64>(), true;
    case 128:
      return f.template operator()<128>(), true;
    case 256:
      return f.template operator()<256>(), true;
    case 512:
      return f.template operator()<512>(), true;
    default:
      return false;
  }
}

// Runtime n: the compile-time sizes of taco (32..512), else the plain loops.
TACO_SIMD_INLINE void butterflies(float* __restrict v, int n) {
  switch (n) {
    case 32:
      return butterflies<32>(v);
    case 64:
      return butterflies<64>(v);
    case 128:
      return butterflies<128>(v);
    case 256:
      return butterflies<256>(v);
    case 512:
      return butterflies<512>(v);
    default:
      break;
  }
  for (int h = 1; h < n; h *= 2) {
    for (int base = 0; base < n; base += 2 * h) {
      for (int i = 0; i < h; ++i) {
        const float a = v[base + i], c = v[base + h + i];
        v[base + i] = a + c;
        v[base + h + i] = a - c;
      }
    }
  }
}

// codes[i] = fp8(v[i] * f), fp8(v[i] / q), fp8((v[i] * s1) * s2).
template <bool kE4m3>
TACO_SIMD_INLINE void codes_mul(const float* __restrict v, int n, float f, uint8_t* __restrict c) {
#pragma omp simd
  for (int i = 0; i < n; ++i) c[i] = to_fp8<kE4m3>(v[i] * f);
}
template <bool kE4m3>
TACO_SIMD_INLINE void codes_div(const float* __restrict v, int n, float q, uint8_t* __restrict c) {
#pragma omp simd
  for (int i = 0; i < n; ++i) c[i] = to_fp8<kE4m3>(v[i] / q);
}
template <bool kE4m3>
TACO_SIMD_INLINE void codes_mul2(const float* __restrict v, int n, float s1, float s2,
                                 uint8_t* __restrict c) {
#pragma omp simd
  for (int i = 0; i < n; ++i) c[i] = to_fp8<kE4m3>((v[i] * s1) * s2);
}

// v[i] = value of codes[i * stride].
template <bool kE4m3>
TACO_SIMD_INLINE void values_of(const uint8_t* __restrict codes, int64_t stride, int n,
                                float* __restrict v) {
  if (stride == 1) {
#pragma omp simd
    for (int i = 0; i < n; ++i) v[i] = from_fp8<kE4m3>(codes[i]);
  } else {
    for (int i = 0; i < n; ++i) v[i] = from_fp8<kE4m3>(codes[i * stride]);
  }
}

}  // namespace taco::cpu::simd
