// The CPU FP8 codecs' shared parts (kernels/cpu/codec_fp8.cpp, the element loops built for each
// instruction set; kernels/cpu/codec_fp8_parallel.cpp, the threads and the entry points): the
// per-group scalars of kernels/codec_fp8.h, the scale entries, the decoders' outputs, and the
// loops' entry points, each dispatched to the best instruction set the CPU has.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/check.h"
#include "kernels/codec_fp8.h"
#include "kernels/cpu/codec_fp8_simd.h"
#include "kernels/cpu/codec_taco_lanes.h"
#include "kernels/hadamard.h"

namespace taco::cpu::fp8_detail {

constexpr float kLambda = 1e-6f;  // keeps a finite on an all-zero group
constexpr float kMinAdaptive = 1e-3f;
constexpr float kMaxAdaptive = 1e3f;
constexpr float kPrescaleSumOfSquares = 0x1p64f;  // above: x * 2^floor(log2 a) first
constexpr int64_t kMaxGroup = 1 << 16;
constexpr uint8_t kPoisonedE8m0 = 0xFF;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

inline int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

inline void check_spec(const Fp8GroupSpec& s) {
  TACO_CHECK(s.rows >= 0 && s.cols >= 0, "negative message shape");
  TACO_CHECK(s.group >= 0 && s.group <= kMaxGroup, "group size out of range");
  TACO_CHECK(!s.hadamard || (s.group > 0 && (s.group & (s.group - 1)) == 0),
             "the Hadamard transform needs a power-of-two group");
}

// Where group g lives: n elements at base, base + stride, ...
struct GroupRef {
  int64_t base;
  int64_t stride;
  int n;
};

inline GroupRef group_at(const Fp8GroupSpec& s, int64_t g) {
  if (!s.along_tokens) {
    const int64_t per_row = (s.cols + s.group - 1) / s.group;
    const int64_t r = g / per_row, j = g % per_row;
    return {r * s.cols + j * s.group, 1, int(std::min(s.group, s.cols - j * s.group))};
  }
  const int64_t rb = g / s.cols, c = g % s.cols;
  return {rb * s.group * s.cols + c, s.cols, int(std::min(s.group, s.rows - rb * s.group))};
}

// a = clamp(fp8_max / sqrt(ss / n + lambda), 1e-3, 1e3).
inline float adaptive_scale(float ss, int n, float target) {
  const float a = target / std::sqrt(ss / float(n) + kLambda);
  return std::min(std::max(a, kMinAdaptive), kMaxAdaptive);
}

// Exponent e of the power of two 2^e <= a (a > 0, normal).
inline int floor_log2(float a) {
  int ex;
  std::frexp(a, &ex);
  return ex - 1;
}

// Smallest k with m <= target * 2^k (m > 0, finite).
inline int e8m0_exponent(float m, float target) {
  int em, et;
  const float fm = std::frexp(m, &em), ft = std::frexp(target, &et);
  return em - et + (fm > ft ? 1 : 0);
}

// Maps a group's values y to codes, given m = max|y| (fp8_block, fp8_tensor).
struct Quantizer {
  Fp8Format format;
  bool pow2 = false;
  float q = 0.f;                // dual/single: code = fp8(y / q)
  float s_k = 1.f, s_ea = 1.f;  // e8m0: code = fp8((y * 2^-k) * 2^-ea)
  int k = 0;                    // e8m0: the stored exponent

  uint8_t operator()(float y) const {
    if (pow2) return float_to_fp8((y * s_k) * s_ea, format);
    return q > 0.f ? float_to_fp8(y / q, format) : uint8_t(0);
  }
};

// `ea`: log2 of the power-of-two adaptive scale (e8m0 only).
inline Quantizer make_quantizer(float m, int ea, const Fp8GroupSpec& s) {
  Quantizer qz{s.format};
  const float target = fp8_max(s.format);
  if (s.scales != Fp8Scales::e8m0) {
    qz.q = m / target;
    return qz;
  }
  qz.pow2 = true;
  const int kq = m > 0.f ? e8m0_exponent(m, target) : ea;
  qz.k = std::clamp(kq - ea, -127, 127);
  qz.s_k = std::ldexp(1.f, -qz.k);
  qz.s_ea = std::ldexp(1.f, -ea);
  return qz;
}

// taco's quantizer (kernels/codec_fp8.h): maps the butterflies' outputs u, whose scaled values
// y = c * u the scales describe, to codes with one multiply by f; where f is not a normal float
// (a group of tiny values), through y itself as fp8_block does.
struct TacoQuantizer {
  Quantizer y;  // q / k of y = c * u
  float c = 1.f, f = 0.f;
  bool multiply = false;

  uint8_t operator()(float u) const { return multiply ? float_to_fp8(u * f, y.format) : y(u * c); }
};

inline TacoQuantizer make_taco_quantizer(float mu, float c, int ea, const Fp8GroupSpec& s) {
  TacoQuantizer t{make_quantizer(c * mu, ea, s), c};
  if (s.scales != Fp8Scales::e8m0) {
    if (t.y.q > 0.f) t.f = c * (1.f / t.y.q);
  } else {
    t.f = (c * t.y.s_k) * t.y.s_ea;
  }
  t.multiply = std::isnormal(t.f);
  return t;
}

inline void write_scales(uint8_t* scales, int64_t g, int64_t num_groups, const Fp8GroupSpec& s,
                         const Quantizer& qz, float a) {
  switch (s.scales) {
    case Fp8Scales::dual:
      put_f32(scales + 4 * g, qz.q);
      put_f32(scales + 4 * (num_groups + g), a);
      break;
    case Fp8Scales::single:
      put_f32(scales + 4 * g, qz.q / a);
      break;
    case Fp8Scales::e8m0:
      scales[g] = uint8_t(qz.k + 127);
      break;
  }
}

inline void write_poisoned_scales(uint8_t* scales, int64_t g, int64_t num_groups, Fp8Scales mode) {
  switch (mode) {
    case Fp8Scales::dual:
      put_f32(scales + 4 * g, kNaN);
      put_f32(scales + 4 * (num_groups + g), kNaN);
      break;
    case Fp8Scales::single:
      put_f32(scales + 4 * g, kNaN);
      break;
    case Fp8Scales::e8m0:
      scales[g] = kPoisonedE8m0;
      break;
  }
}

// A group's decode scales; poisoned when the encoder saw a non-finite input.
struct DecodeScale {
  float mul = 1.f;  // fp8 value * mul
  float a = 1.f;    // dual: then divide by a after the transform
  bool poisoned = false;
};

inline DecodeScale read_scale(const uint8_t* scales, int64_t g, int64_t num_groups,
                              Fp8Scales mode) {
  DecodeScale d;
  switch (mode) {
    case Fp8Scales::dual:
      d.mul = get_f32(scales + 4 * g);
      d.a = get_f32(scales + 4 * (num_groups + g));
      d.poisoned = std::isnan(d.mul) || std::isnan(d.a);
      break;
    case Fp8Scales::single:
      d.mul = get_f32(scales + 4 * g);
      d.poisoned = std::isnan(d.mul);
      break;
    case Fp8Scales::e8m0:
      d.poisoned = scales[g] == kPoisonedE8m0;
      d.mul = std::ldexp(1.f, int(scales[g]) - 127);
      break;
  }
  return d;
}

// Decoded values under 2^127 in magnitude are finite in fp32 and in bf16. A decoder computes, per
// group, the largest magnitude m its finite codes can give before a division by |a| (rounded as
// the values are); where m >= 2^127 |a| (values near FLT_MAX, or damaged scales), and in taco's
// stepwise path, it looks at the group's outputs and counts the group when one of them is NaN or
// Inf (kernels/codec_fp8.h).
constexpr float kOverflowBound = 0x1p127f;
inline bool may_overflow(float m, float abs_a) { return !(m < kOverflowBound * abs_a); }

// Along tokens (fp8_block's kernels/cpu/codec_fp8_tokens.cpp, taco's codec_taco_tokens.cpp):
// columns [c0, c0 + w) of one row block, n rows from element `base`; group g is column c0's.
struct Strip {
  int64_t base, g;
  int n, w;
};

// f(strip, next) for the strips of up to kStrip columns of groups [g0, g1) in order; next.n = 0
// after the last.
template <int kStrip, class F>
TACO_SIMD_INLINE void for_strips(const Fp8GroupSpec& s, int64_t g0, int64_t g1, F&& f) {
  auto at = [&](int64_t g) {
    if (g >= g1) return Strip{0, g, 0, 0};
    const int64_t rb = g / s.cols, c0 = g % s.cols;
    const int w = int(std::min({s.cols - c0, g1 - g, int64_t(kStrip)}));
    return Strip{rb * s.group * s.cols + c0, g, int(std::min(s.group, s.rows - rb * s.group)), w};
  };
  for (Strip t = at(g0); t.n > 0;) {
    const Strip next = at(t.g + t.w);
    f(t, next);
    t = next;
  }
}

// A taco decode factor that lost precision: subnormal, or 0 from a non-zero scale.
inline bool tiny_factor(float mul, float q) {
  return std::fpclassify(mul) == FP_SUBNORMAL || (mul == 0.f && q != 0.f);
}

// Per-thread scratch for groups of up to p elements.
struct Scratch {
  explicit Scratch(const Fp8GroupSpec& s)
      : v(size_t(next_pow2(s.group))), a(v.size()), b(v.size()), codes(v.size()) {
    h = s.hadamard ? hadamard_scale(int(s.group)) : 1.f;
  }
  std::vector<float> v, a, b;
  std::vector<uint8_t> codes;
  float h;  // hadamard_scale(G), once per message
};

// The decoders' outputs: a run of n values at base (contiguous), or one value; nonfinite: whether
// one of n values would be NaN or Inf as stored.
struct StoreF32 {
  float* out;
  TACO_SIMD_INLINE void run(int64_t base, const float* __restrict v, int n) const {
    float* __restrict o = out + base;
#pragma omp simd
    for (int i = 0; i < n; ++i) o[i] = v[i];
  }
  TACO_SIMD_INLINE void one(int64_t i, float v) const { out[i] = v; }
  TACO_SIMD_INLINE void number(int64_t i, float v) const { out[i] = v; }  // v is not NaN
  bool nonfinite(const float* v, int n) const { return simd::any_nonfinite(v, n, 0x7F800000u); }
  bool lanes8(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g) const {
    return lanes::decode8(c, sc, s, g, out, false);
  }
};
struct AccumulateF32 {
  float* out;
  TACO_SIMD_INLINE void run(int64_t base, const float* __restrict v, int n) const {
    float* __restrict o = out + base;
#pragma omp simd
    for (int i = 0; i < n; ++i) o[i] = o[i] + v[i];
  }
  TACO_SIMD_INLINE void one(int64_t i, float v) const { out[i] = out[i] + v; }
  TACO_SIMD_INLINE void number(int64_t i, float v) const { out[i] = out[i] + v; }
  // the decoded values it adds
  bool nonfinite(const float* v, int n) const { return simd::any_nonfinite(v, n, 0x7F800000u); }
  bool lanes8(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g) const {
    return lanes::decode8(c, sc, s, g, out, true);
  }
};
struct StoreBf16 {
  bf16* out;
  TACO_SIMD_INLINE void run(int64_t base, const float* __restrict v, int n) const {
    uint16_t* __restrict o = reinterpret_cast<uint16_t*>(out + base);
#pragma omp simd
    for (int i = 0; i < n; ++i) o[i] = simd::to_bf16_bits(v[i]);
  }
  TACO_SIMD_INLINE void one(int64_t i, float v) const { out[i].bits = simd::to_bf16_bits(v); }
  TACO_SIMD_INLINE void number(int64_t i, float v) const {
    out[i].bits = simd::to_bf16_bits_number(v);
  }
  // from 0x7F7F8000 up, a float rounds to bf16's Inf
  bool nonfinite(const float* v, int n) const { return simd::any_nonfinite(v, n, 0x7F7F8000u); }
  bool lanes8(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g) const {
    return lanes::decode8(c, sc, s, g, out);
  }
};

// The element loops over groups [g0, g1) or elements [i0, i1), in the build for the CPU's
// instruction set (codec_fp8.cpp); decode_range returns the groups it counted
// (kernels/codec_fp8.h).
Fp8EncodeCounts encode_range(const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                             uint8_t* c, uint8_t* sc, Scratch* w);
Fp8EncodeCounts encode_range(const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                             uint8_t* c, uint8_t* sc, Scratch* w);
float absmax_range(const float* x, int64_t i0, int64_t i1, int64_t* bad);
float absmax_range(const bf16* x, int64_t i0, int64_t i1, int64_t* bad);
void whole_range(const float* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer& q,
                 uint8_t* c);
void whole_range(const bf16* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer& q,
                 uint8_t* c);
#define TACO_DECLARE_DECODE_RANGE(Store)                                                       \
  int64_t decode_range(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0, \
                       int64_t g1, Store st, Scratch* w);                                      \
  int whole_range(const uint8_t* c, Fp8Format f, const DecodeScale& d, int64_t i0, int64_t i1, \
                  Store st);
TACO_DECLARE_DECODE_RANGE(StoreF32)
TACO_DECLARE_DECODE_RANGE(AccumulateF32)
TACO_DECLARE_DECODE_RANGE(StoreBf16)
#undef TACO_DECLARE_DECODE_RANGE

// The instruction set of the loops: 0 baseline x86-64, 1 AVX2, 2 AVX-512; taco's stay at AVX2.
int isa();
int isa_for(bool hadamard);

// fp8_block along tokens, groups [g0, g1): a row block's neighbouring columns at once
// (kernels/cpu/codec_fp8_tokens.cpp), the rare groups through encode_range / decode_range.
Fp8EncodeCounts block_tokens_encode(const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                    uint8_t* c, uint8_t* sc, Scratch* w);
Fp8EncodeCounts block_tokens_encode(const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                    uint8_t* c, uint8_t* sc, Scratch* w);
#define TACO_DECLARE_BLOCK_TOKENS_DECODE(Store)                                           \
  int64_t block_tokens_decode(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, \
                              int64_t g0, int64_t g1, Store st, Scratch* w);
TACO_DECLARE_BLOCK_TOKENS_DECODE(StoreF32)
TACO_DECLARE_BLOCK_TOKENS_DECODE(AccumulateF32)
TACO_DECLARE_BLOCK_TOKENS_DECODE(StoreBf16)
#undef TACO_DECLARE_BLOCK_TOKENS_DECODE

// taco's decode along tokens to fp32 on AVX2, groups [g0, g1): a strip of a row block's columns
// staged in L1 and its batches run by kernels/cpu/codec_taco_lanes.h
// (kernels/cpu/codec_taco_tokens.cpp), the rest through decode_range.
#define TACO_DECLARE_TACO_TOKENS_DECODE(Store)                                           \
  int64_t taco_tokens_decode(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, \
                             int64_t g0, int64_t g1, Store st, Scratch* w);
TACO_DECLARE_TACO_TOKENS_DECODE(StoreF32)
TACO_DECLARE_TACO_TOKENS_DECODE(AccumulateF32)
#undef TACO_DECLARE_TACO_TOKENS_DECODE

// A loop built three times, for baseline x86-64 (SSE2), AVX2 (8 floats per instruction) and
// AVX-512 (16): the same source and so the same operations per element (no FMA: the files are
// built with -ffp-contract=off); TACO_CALL_ISA runs the one of a level (isa(), isa_for()).
#define TACO_ISA_BUILDS(ret, name, body, params, args)                                     \
  ret name##_base params { return body args; }                                             \
  __attribute__((target("avx2"))) ret name##_avx2 params { return body args; }             \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) ret name##_avx512 params { \
    return body args;                                                                      \
  }
#define TACO_CALL_ISA(level, name, ...)        \
  ((level) == 2   ? name##_avx512(__VA_ARGS__) \
   : (level) == 1 ? name##_avx2(__VA_ARGS__)   \
                  : name##_base(__VA_ARGS__))

}  // namespace taco::cpu::fp8_detail
