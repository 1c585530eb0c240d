// Grouped FP8 encode/decode on the CPU: the reference the CUDA codec is checked against. The
// numbered steps and their fp32 order are specified in kernels/codec_fp8.h. Each thread takes
// an even share of the groups; a group is read into a contiguous scratch row (along tokens
// through a strided gather) and every element loop is vectorized (kernels/cpu/codec_fp8_simd.h);
// the per-group scalars (a, q, f, the scales) are computed once per group as before. On AVX2,
// taco's groups go eight at a time through kernels/cpu/codec_taco_lanes.h (one group per vector
// lane), and only the batches it declines take the per-group loops here.
#include "kernels/codec_fp8.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/check.h"
#include "kernels/cpu/codec_fp8_simd.h"
#include "kernels/cpu/codec_taco_lanes.h"
#include "kernels/hadamard.h"

namespace taco::cpu {
namespace {

constexpr float kLambda = 1e-6f;  // keeps a finite on an all-zero group
constexpr float kMinAdaptive = 1e-3f;
constexpr float kMaxAdaptive = 1e3f;
constexpr float kPrescaleSumOfSquares = 0x1p64f;  // above: x * 2^floor(log2 a) first
constexpr int64_t kMaxGroup = 1 << 16;
constexpr int64_t kParallelMin = 1 << 16;  // smaller messages: threads cost more than they save
constexpr uint8_t kPoisonedE8m0 = 0xFF;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

void check_spec(const Fp8GroupSpec& s) {
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

GroupRef group_at(const Fp8GroupSpec& s, int64_t g) {
  if (!s.along_tokens) {
    const int64_t per_row = (s.cols + s.group - 1) / s.group;
    const int64_t r = g / per_row, j = g % per_row;
    return {r * s.cols + j * s.group, 1, int(std::min(s.group, s.cols - j * s.group))};
  }
  const int64_t rb = g / s.cols, c = g % s.cols;
  return {rb * s.group * s.cols + c, s.cols, int(std::min(s.group, s.rows - rb * s.group))};
}

// a = clamp(fp8_max / sqrt(ss / n + lambda), 1e-3, 1e3).
float adaptive_scale(float ss, int n, float target) {
  const float a = target / std::sqrt(ss / float(n) + kLambda);
  return std::min(std::max(a, kMinAdaptive), kMaxAdaptive);
}

// Exponent e of the power of two 2^e <= a (a > 0, normal).
int floor_log2(float a) {
  int ex;
  std::frexp(a, &ex);
  return ex - 1;
}

// Smallest k with m <= target * 2^k (m > 0, finite).
int e8m0_exponent(float m, float target) {
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
Quantizer make_quantizer(float m, int ea, const Fp8GroupSpec& s) {
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

TacoQuantizer make_taco_quantizer(float mu, float c, int ea, const Fp8GroupSpec& s) {
  TacoQuantizer t{make_quantizer(c * mu, ea, s), c};
  if (s.scales != Fp8Scales::e8m0) {
    if (t.y.q > 0.f) t.f = c * (1.f / t.y.q);
  } else {
    t.f = (c * t.y.s_k) * t.y.s_ea;
  }
  t.multiply = std::isnormal(t.f);
  return t;
}

void write_scales(uint8_t* scales, int64_t g, int64_t num_groups, const Fp8GroupSpec& s,
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

void write_poisoned_scales(uint8_t* scales, int64_t g, int64_t num_groups, Fp8Scales mode) {
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

DecodeScale read_scale(const uint8_t* scales, int64_t g, int64_t num_groups, Fp8Scales mode) {
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

// A taco decode factor that lost precision: subnormal, or 0 from a non-zero scale.
bool tiny_factor(float mul, float q) {
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

// f.template operator()<kN>() with kN = n where n is a full group of a compile-time size
// (32..512: taco's sizes), else kN = 0 (any n).
template <class F>
TACO_SIMD_INLINE void with_group_size(int n, bool full, F&& f) {
  if (full) {
    switch (n) {
      case 32:
        return f.template operator()<32>();
      case 64:
        return f.template operator()<64>();
      case 128:
        return f.template operator()<128>();
      case 256:
        return f.template operator()<256>();
      case 512:
        return f.template operator()<512>();
      default:
        break;
    }
  }
  f.template operator()<0>();
}

// One finite group in v[0, n) (overwritten) -> its n codes into c, and its scales. kN: n as a
// compile-time constant (with_group_size), or 0.
template <bool kE4m3, int kN>
TACO_SIMD_INLINE void encode_group(float* __restrict v, Scratch& w, int n_any, int64_t g,
                                   int64_t num_groups, const Fp8GroupSpec& s, uint8_t* __restrict c,
                                   uint8_t* scales) {
  const int n = kN ? kN : n_any;
  if (!s.hadamard) {
    const Quantizer qz = make_quantizer(simd::absmax(v, n), 0, s);
    if (qz.pow2) {
      simd::codes_mul2<kE4m3>(v, n, qz.s_k, qz.s_ea, c);
    } else if (qz.q > 0.f) {
      simd::codes_div<kE4m3>(v, n, qz.q, c);
    } else {
      std::memset(c, 0, size_t(n));
    }
    write_scales(scales, g, num_groups, s, qz, 1.f);
    return;
  }
  const float target = fp8_max(s.format);
  const float ss = simd::sum_of_squares(v, n, kN ? kN : int(next_pow2(n)), w.a.data(), w.b.data());
  float a = adaptive_scale(ss, n, target);
  int ea = 0;
  if (s.scales == Fp8Scales::e8m0) {
    ea = floor_log2(a);
    a = std::ldexp(1.f, ea);
  }
  const int e = ss <= kPrescaleSumOfSquares ? 0 : floor_log2(a);
  if (e != 0) {
    const float p = std::ldexp(1.f, e);
#pragma omp simd
    for (int i = 0; i < n; ++i) v[i] *= p;
  }
  const bool full = n == s.group;
  if constexpr (kN != 0) {
    simd::butterflies<kN>(v);
  } else if (full) {
    simd::butterflies(v, n);
  }
  const float c_scale = std::ldexp(a, -e) * (full ? w.h : 1.f);
  const TacoQuantizer qz = make_taco_quantizer(simd::absmax(v, n), c_scale, ea, s);
  if (qz.multiply) {
    simd::codes_mul<kE4m3>(v, n, qz.f, c);
  } else {  // tiny groups: the stepwise path of kernels/codec_fp8.h
    for (int i = 0; i < n; ++i) c[i] = qz(v[i]);
  }
  write_scales(scales, g, num_groups, s, qz.y, a);
}

// Groups [g0, g1) of x -> codes and scales (the loop each thread runs).
template <bool kE4m3, class T>
TACO_SIMD_INLINE Fp8EncodeCounts encode_groups(const T* x, const Fp8GroupSpec& s, int64_t g0,
                                               int64_t g1, uint8_t* codes, uint8_t* scales,
                                               Scratch& w) {
  const int64_t num_groups = s.num_groups();
  Fp8EncodeCounts counts;
  float* v = w.v.data();
  for (int64_t g = g0; g < g1; ++g) {
    const GroupRef grp = group_at(s, g);
    const int bad = simd::load_group(x + grp.base, grp.stride, grp.n, v);
    uint8_t* c = grp.stride == 1 ? codes + grp.base : w.codes.data();
    if (bad) {
      std::memset(c, 0, size_t(grp.n));
      write_poisoned_scales(scales, g, num_groups, s.scales);
      counts.nonfinite_values += bad;
      ++counts.nonfinite_groups;
    } else {
      with_group_size(
          grp.n, grp.n == s.group, [&]<int kN>() __attribute__((always_inline)) {
            encode_group<kE4m3, kN>(v, w, grp.n, g, num_groups, s, c, scales);
          });
    }
    if (grp.stride != 1) {
      for (int i = 0; i < grp.n; ++i) codes[grp.base + i * grp.stride] = c[i];
    }
  }
  return counts;
}

// group == 0, first pass over x[i0, i1): max |x| of the finite values, and the others counted.
template <class T>
TACO_SIMD_INLINE float finite_absmax(const T* __restrict x, int64_t i0, int64_t i1, int64_t* bad) {
  float lane[simd::kLanes] = {};
  int64_t lane_bad[simd::kLanes] = {};
  int64_t i = i0;
  for (; i + simd::kLanes <= i1; i += simd::kLanes) {
#pragma omp simd
    for (int l = 0; l < simd::kLanes; ++l) {
      const uint32_t u = simd::bits(simd::load_value(x, i + l)) & 0x7FFFFFFFu;
      const bool finite = u < 0x7F800000u;
      const float a = simd::from_bits(finite ? u : 0u);
      lane[l] = lane[l] < a ? a : lane[l];
      lane_bad[l] += !finite;
    }
  }
  float m = 0.f;
  for (; i < i1; ++i) {
    const float v = simd::load_value(x, i);
    if (std::isfinite(v)) {
      m = std::max(m, std::fabs(v));
    } else {
      ++*bad;
    }
  }
  for (int l = 0; l < simd::kLanes; ++l) {
    m = m < lane[l] ? lane[l] : m;
    *bad += lane_bad[l];
  }
  return m;
}

// group == 0, second pass: codes of x[i0, i1) with the message's quantizer.
template <bool kE4m3, class T>
TACO_SIMD_INLINE void whole_codes(const T* __restrict x, int64_t i0, int64_t i1,
                                  const Quantizer& qz, uint8_t* __restrict codes) {
  constexpr int64_t kChunk = 2048;
  float v[kChunk];
  for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
    const int n = int(std::min(kChunk, i1 - c0));
#pragma omp simd
    for (int i = 0; i < n; ++i) v[i] = simd::load_value(x, c0 + i);
    if (qz.pow2) {
      simd::codes_mul2<kE4m3>(v, n, qz.s_k, qz.s_ea, codes + c0);
    } else if (qz.q > 0.f) {
      simd::codes_div<kE4m3>(v, n, qz.q, codes + c0);
    } else {
      std::memset(codes + c0, 0, size_t(n));
    }
  }
}

// The decoders' outputs: a run of n values at base (contiguous), or one value.
struct StoreF32 {
  float* out;
  TACO_SIMD_INLINE void run(int64_t base, const float* __restrict v, int n) const {
    float* __restrict o = out + base;
#pragma omp simd
    for (int i = 0; i < n; ++i) o[i] = v[i];
  }
  TACO_SIMD_INLINE void one(int64_t i, float v) const { out[i] = v; }
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
  bool lanes8(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g) const {
    return lanes::decode8(c, sc, s, g, out);
  }
};

template <class Store>
TACO_SIMD_INLINE void store_values(const Store& store, int64_t base, int64_t stride, const float* v,
                                   int n) {
  if (stride == 1) {
    store.run(base, v, n);
  } else {
    for (int i = 0; i < n; ++i) store.one(base + i * stride, v[i]);
  }
}

// One group -> out; returns 1 when it was poisoned (decoded as NaN). kN as for encode_group.
template <bool kE4m3, int kN, class Store>
TACO_SIMD_INLINE int decode_group(const uint8_t* codes, const uint8_t* scales,
                                  const Fp8GroupSpec& s, int64_t g, int64_t num_groups,
                                  const GroupRef& grp, const Store& store, Scratch& w) {
  float* __restrict v = w.v.data();
  const int n = kN ? kN : grp.n;
  const DecodeScale d = read_scale(scales, g, num_groups, s.scales);
  if (d.poisoned) {
    for (int i = 0; i < n; ++i) v[i] = kNaN;
    store_values(store, grp.base, grp.stride, v, n);
    return 1;
  }
  simd::values_of<kE4m3>(codes + grp.base, grp.stride, n, v);
  const bool dual = s.scales == Fp8Scales::dual;
  const float q = d.mul, a = d.a;
  if (s.hadamard) {  // x = butterflies(fp8 values) * (mul * h [/ a])
    const bool full = n == s.group;
    const float h = full ? w.h : 1.f;
    const float mul = dual ? q * (h / a) : q * h;
    if constexpr (kN != 0) {
      simd::butterflies<kN>(v);
    } else if (full) {
      simd::butterflies(v, n);
    }
    if (tiny_factor(mul, q)) {  // scale in steps, so that only the result rounds tiny
      if (dual) {
#pragma omp simd
        for (int i = 0; i < n; ++i) v[i] = ((v[i] * q) * h) / a;
      } else {
#pragma omp simd
        for (int i = 0; i < n; ++i) v[i] = (v[i] * q) * h;
      }
    } else {
#pragma omp simd
      for (int i = 0; i < n; ++i) v[i] = v[i] * mul;
    }
  } else if (dual) {
#pragma omp simd
    for (int i = 0; i < n; ++i) v[i] = (v[i] * q) / a;
  } else {
#pragma omp simd
    for (int i = 0; i < n; ++i) v[i] = v[i] * q;
  }
  store_values(store, grp.base, grp.stride, v, n);
  return 0;
}

// Groups [g0, g1) -> out; returns how many were poisoned.
template <bool kE4m3, class Store>
TACO_SIMD_INLINE int64_t decode_groups(const uint8_t* codes, const uint8_t* scales,
                                       const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                       const Store& store, Scratch& w) {
  const int64_t num_groups = s.num_groups();
  int64_t poisoned = 0;
  for (int64_t g = g0; g < g1; ++g) {
    const GroupRef grp = group_at(s, g);
    with_group_size(
        grp.n, grp.n == s.group, [&]<int kN>() __attribute__((always_inline)) {
          poisoned += decode_group<kE4m3, kN>(codes, scales, s, g, num_groups, grp, store, w);
        });
  }
  return poisoned;
}

// group == 0: x[i0, i1) = (fp8 value * mul) / a, or NaN when the message is poisoned.
template <bool kE4m3, class Store>
TACO_SIMD_INLINE void decode_whole(const uint8_t* codes, const DecodeScale& d, int64_t i0,
                                   int64_t i1, const Store& store) {
  constexpr int64_t kChunk = 2048;
  float v[kChunk];
  const float q = d.mul, a = d.a;
  for (int64_t c0 = i0; c0 < i1; c0 += kChunk) {
    const int n = int(std::min(kChunk, i1 - c0));
    if (d.poisoned) {
      for (int i = 0; i < n; ++i) v[i] = kNaN;
    } else {
      simd::values_of<kE4m3>(codes + c0, 1, n, v);
#pragma omp simd
      for (int i = 0; i < n; ++i) v[i] = (v[i] * q) / a;
    }
    store.run(c0, v, n);
  }
}

// The format picked once per call, outside the loops.
template <class T>
TACO_SIMD_INLINE Fp8EncodeCounts encode_groups_any(const T* x, const Fp8GroupSpec& s, int64_t g0,
                                                   int64_t g1, uint8_t* codes, uint8_t* scales,
                                                   Scratch* w) {
  return s.format == Fp8Format::e4m3 ? encode_groups<true>(x, s, g0, g1, codes, scales, *w)
                                     : encode_groups<false>(x, s, g0, g1, codes, scales, *w);
}
template <class T>
TACO_SIMD_INLINE int whole_codes_any(const T* x, Fp8Format f, int64_t i0, int64_t i1,
                                     const Quantizer* qz, uint8_t* codes) {
  if (f == Fp8Format::e4m3) {
    whole_codes<true>(x, i0, i1, *qz, codes);
  } else {
    whole_codes<false>(x, i0, i1, *qz, codes);
  }
  return 0;
}
template <class Store>
TACO_SIMD_INLINE int64_t decode_groups_any(const uint8_t* codes, const uint8_t* scales,
                                           const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                           Store store, Scratch* w) {
  return s.format == Fp8Format::e4m3 ? decode_groups<true>(codes, scales, s, g0, g1, store, *w)
                                     : decode_groups<false>(codes, scales, s, g0, g1, store, *w);
}
template <class Store>
TACO_SIMD_INLINE int decode_whole_any(const uint8_t* codes, Fp8Format f, const DecodeScale* d,
                                      int64_t i0, int64_t i1, Store store) {
  if (f == Fp8Format::e4m3) {
    decode_whole<true>(codes, *d, i0, i1, store);
  } else {
    decode_whole<false>(codes, *d, i0, i1, store);
  }
  return 0;
}

// Each loop three times: for baseline x86-64 (SSE2), AVX2 (8 floats per instruction) and
// AVX-512 (16), the same source and so the same operations per element (no FMA: the file is
// built with -ffp-contract=off).
#define TACO_TWO_ISAS(ret, name, body, params, args)                                       \
  ret name##_base params { return body args; }                                             \
  __attribute__((target("avx2"))) ret name##_avx2 params { return body args; }             \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) ret name##_avx512 params { \
    return body args;                                                                      \
  }

TACO_TWO_ISAS(Fp8EncodeCounts, encode_f32, encode_groups_any,
              (const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
               uint8_t* sc, Scratch* w),
              (x, s, g0, g1, c, sc, w))
TACO_TWO_ISAS(Fp8EncodeCounts, encode_bf16, encode_groups_any,
              (const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
               uint8_t* sc, Scratch* w),
              (x, s, g0, g1, c, sc, w))
TACO_TWO_ISAS(float, absmax_f32, finite_absmax,
              (const float* x, int64_t i0, int64_t i1, int64_t* bad), (x, i0, i1, bad))
TACO_TWO_ISAS(float, absmax_bf16, finite_absmax,
              (const bf16* x, int64_t i0, int64_t i1, int64_t* bad), (x, i0, i1, bad))
TACO_TWO_ISAS(int, whole_f32, whole_codes_any,
              (const float* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer* q, uint8_t* c),
              (x, f, i0, i1, q, c))
TACO_TWO_ISAS(int, whole_bf16, whole_codes_any,
              (const bf16* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer* q, uint8_t* c),
              (x, f, i0, i1, q, c))
#define TACO_DECODE_ISAS(Store)                                                                \
  TACO_TWO_ISAS(int64_t, decode_##Store, decode_groups_any,                                    \
                (const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0,       \
                 int64_t g1, Store st, Scratch* w),                                            \
                (c, sc, s, g0, g1, st, w))                                                     \
  TACO_TWO_ISAS(                                                                               \
      int, whole_##Store, decode_whole_any,                                                    \
      (const uint8_t* c, Fp8Format f, const DecodeScale* d, int64_t i0, int64_t i1, Store st), \
      (c, f, d, i0, i1, st))
TACO_DECODE_ISAS(StoreF32)
TACO_DECODE_ISAS(AccumulateF32)
TACO_DECODE_ISAS(StoreBf16)

// 0: baseline x86-64, 1: AVX2, 2: AVX-512 (F, BW, VL, DQ); the best the CPU has, at most
// g_isa_limit (fp8_codecs_limit_isa).
int g_isa_limit = 2;
int detected_isa() {
  static const int isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl") &&
                                 __builtin_cpu_supports("avx512dq")
                             ? 2
                         : __builtin_cpu_supports("avx2") ? 1
                                                          : 0;
  return isa;
}
int isa() { return std::min(detected_isa(), g_isa_limit); }

// taco's loops stay at AVX2: its butterfly stages of 4 and 8 and its per-group loops run
// slower in 512-bit vectors (measured: encode 1.57 against 1.38 ns per element, decode 0.92
// against 0.65, one thread, G = 128), fp8_block's and fp8_tensor's faster (0.49 against 0.83).
int isa_for(bool hadamard) { return hadamard ? std::min(isa(), 1) : isa(); }

#define TACO_CALL_ISA(level, name, ...)        \
  ((level) == 2   ? name##_avx512(__VA_ARGS__) \
   : (level) == 1 ? name##_avx2(__VA_ARGS__)   \
                  : name##_base(__VA_ARGS__))

// encode / decode entry points per element type, for the templates below.
Fp8EncodeCounts encode_range(const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                             uint8_t* c, uint8_t* sc, Scratch* w) {
  return TACO_CALL_ISA(isa_for(s.hadamard), encode_f32, x, s, g0, g1, c, sc, w);
}
Fp8EncodeCounts encode_range(const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                             uint8_t* c, uint8_t* sc, Scratch* w) {
  return TACO_CALL_ISA(isa_for(s.hadamard), encode_bf16, x, s, g0, g1, c, sc, w);
}
float absmax_range(const float* x, int64_t i0, int64_t i1, int64_t* bad) {
  return TACO_CALL_ISA(isa(), absmax_f32, x, i0, i1, bad);
}
float absmax_range(const bf16* x, int64_t i0, int64_t i1, int64_t* bad) {
  return TACO_CALL_ISA(isa(), absmax_bf16, x, i0, i1, bad);
}
void whole_range(const float* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer& q,
                 uint8_t* c) {
  TACO_CALL_ISA(isa(), whole_f32, x, f, i0, i1, &q, c);
}
void whole_range(const bf16* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer& q,
                 uint8_t* c) {
  TACO_CALL_ISA(isa(), whole_bf16, x, f, i0, i1, &q, c);
}
#define TACO_DECODE_RANGE(Store)                                                                \
  int64_t decode_range(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0,  \
                       int64_t g1, Store st, Scratch* w) {                                      \
    return TACO_CALL_ISA(isa_for(s.hadamard), decode_##Store, c, sc, s, g0, g1, st, w);         \
  }                                                                                             \
  void whole_range(const uint8_t* c, Fp8Format f, const DecodeScale& d, int64_t i0, int64_t i1, \
                   Store st) {                                                                  \
    TACO_CALL_ISA(isa(), whole_##Store, c, f, &d, i0, i1, st);                                  \
  }
TACO_DECODE_RANGE(StoreF32)
TACO_DECODE_RANGE(AccumulateF32)
TACO_DECODE_RANGE(StoreBf16)

// taco on AVX2 (G = 32 .. 512): eight groups at a time (kernels/cpu/codec_taco_lanes.h); the
// batches it declines and the groups after the last whole batch go to the per-group loops.
// `batch(g)` does groups [g, g + 8) or returns false, `range(g0, g1)` runs the loops.
template <class Batch, class Range>
void in_batches(int64_t g0, int64_t g1, Batch&& batch, Range&& range) {
  int64_t done = g0;
  for (int64_t g = g0; g + 8 <= g1; g += 8) {
    if (!batch(g)) continue;
    if (done < g) range(done, g);
    done = g + 8;
  }
  if (done < g1) range(done, g1);
}

template <class T>
Fp8EncodeCounts encode_chunk(const T* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                             uint8_t* sc, Scratch* w) {
  if (isa_for(s.hadamard) < 1 || !lanes::handles(s)) return encode_range(x, s, g0, g1, c, sc, w);
  Fp8EncodeCounts total;
  in_batches(
      g0, g1, [&](int64_t g) { return lanes::encode8(x, s, g, c, sc); },
      [&](int64_t a, int64_t b) {
        const Fp8EncodeCounts r = encode_range(x, s, a, b, c, sc, w);
        total.nonfinite_values += r.nonfinite_values;
        total.nonfinite_groups += r.nonfinite_groups;
      });
  return total;
}

template <class Store>
int64_t decode_chunk(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0,
                     int64_t g1, Store st, Scratch* w) {
  if (isa_for(s.hadamard) < 1 || !lanes::handles(s)) return decode_range(c, sc, s, g0, g1, st, w);
  int64_t poisoned = 0;
  in_batches(
      g0, g1, [&](int64_t g) { return st.lanes8(c, sc, s, g); },
      [&](int64_t a, int64_t b) { poisoned += decode_range(c, sc, s, a, b, st, w); });
  return poisoned;
}

// Work is handed out in chunks of about kChunkElements elements (whole groups, a multiple of
// eight: taco's batches), each to the next free thread: on a shared machine a thread whose core
// is busy takes fewer (an even split waits for it), and a chunk's input (64 KB of bf16) still
// streams through the caches in long runs.
constexpr int64_t kChunkElements = 1 << 15;

// f(begin, end) for every chunk of [0, n) in units of `unit` elements, spread over the team.
template <class F>
void for_chunks(int64_t n, int64_t unit, F&& f) {
  const int64_t size = std::max<int64_t>(8, (kChunkElements / unit + 7) / 8 * 8);
  const int64_t chunks = (n + size - 1) / size;
#pragma omp for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) f(c * size, std::min(n, (c + 1) * size));
}

template <class T>
Fp8EncodeCounts encode_impl(const T* x, const Fp8GroupSpec& s, uint8_t* codes, uint8_t* scales) {
  check_spec(s);
  const int64_t n = s.count();
  if (n == 0) return {};
  const bool threads = n >= kParallelMin;
  if (s.group == 0) {  // one scale for the whole message, no transform
    float m = 0.f;
    int64_t bad = 0;
#pragma omp parallel reduction(max : m) reduction(+ : bad) if (threads)
    for_chunks(n, 1,
               [&](int64_t i0, int64_t i1) { m = std::max(m, absmax_range(x, i0, i1, &bad)); });
    if (bad) {
      std::memset(codes, 0, size_t(n));
      write_poisoned_scales(scales, 0, 1, s.scales);
      return {bad, 1};
    }
    const Quantizer qz = make_quantizer(m, 0, s);
#pragma omp parallel if (threads)
    for_chunks(n, 1, [&](int64_t i0, int64_t i1) { whole_range(x, s.format, i0, i1, qz, codes); });
    write_scales(scales, 0, 1, s, qz, 1.f);
    return {};
  }
  int64_t bad_values = 0, bad_groups = 0;
#pragma omp parallel reduction(+ : bad_values, bad_groups) if (threads)
  {
    Scratch w(s);
    for_chunks(s.num_groups(), s.group, [&](int64_t g0, int64_t g1) {
      const Fp8EncodeCounts c = encode_chunk(x, s, g0, g1, codes, scales, &w);
      bad_values += c.nonfinite_values;
      bad_groups += c.nonfinite_groups;
    });
  }
  return {bad_values, bad_groups};
}

template <class Store>
int64_t decode_impl(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s,
                    Store store) {
  check_spec(s);
  const int64_t n = s.count();
  if (n == 0) return 0;
  const bool threads = n >= kParallelMin;
  if (s.group == 0) {
    const DecodeScale d = read_scale(scales, 0, 1, s.scales);
#pragma omp parallel if (threads)
    for_chunks(n, 1,
               [&](int64_t i0, int64_t i1) { whole_range(codes, s.format, d, i0, i1, store); });
    return d.poisoned ? 1 : 0;
  }
  int64_t poisoned = 0;
#pragma omp parallel reduction(+ : poisoned) if (threads)
  {
    Scratch w(s);
    for_chunks(s.num_groups(), s.group, [&](int64_t g0, int64_t g1) {
      poisoned += decode_chunk(codes, scales, s, g0, g1, store, &w);
    });
  }
  return poisoned;
}

}  // namespace

int fp8_codecs_limit_isa(int level) {
  g_isa_limit = level;
  return isa();
}

Fp8EncodeCounts fp8_group_encode(const float* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

Fp8EncodeCounts fp8_group_encode(const bf16* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         float* out, bool accumulate) {
  if (accumulate) return decode_impl(codes, scales, spec, AccumulateF32{out});
  return decode_impl(codes, scales, spec, StoreF32{out});
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         bf16* out) {
  return decode_impl(codes, scales, spec, StoreBf16{out});
}

}  // namespace taco::cpu
