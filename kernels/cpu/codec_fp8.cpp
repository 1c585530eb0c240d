// Grouped FP8 encode/decode on the CPU: the reference the CUDA codec is checked against. The
// numbered steps and their fp32 order are specified in kernels/codec_fp8.h. Each thread takes
// an even share of the groups; a group is read into a contiguous scratch row (along tokens
// through a strided gather) and every element loop is vectorized (kernels/cpu/codec_fp8_simd.h);
// the per-group scalars (a, q, f, the scales) are computed once per group as before. On AVX2,
// taco's groups go eight at a time through kernels/cpu/codec_taco_lanes.h (one group per vector
// lane), and only the batches it declines take the per-group loops here.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/codec_fp8_internal.h"

namespace taco::cpu {
namespace fp8_detail {
namespace {

// f.template operator()<kN>() with kN = n where n is a full group of a compile-time size
// (32..512: taco's sizes), else kN = 0 (any n).
template <class F>
TACO_SIMD_INLINE void with_group_size(int n, bool full, F&& f) {
  if (!full || !simd::with_taco_size(n, f)) f.template operator()<0>();
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
  const bool full = n == s.group && !s.coefficients;  // coefficients: as a tail group
  if (full) {
    if constexpr (kN != 0) {
      simd::butterflies<kN>(v);
    } else {
      simd::butterflies(v, n);
    }
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

template <class Store>
TACO_SIMD_INLINE void store_values(const Store& store, int64_t base, int64_t stride, const float* v,
                                   int n) {
  if (stride == 1) {
    store.run(base, v, n);
  } else {
    for (int i = 0; i < n; ++i) store.one(base + i * stride, v[i]);
  }
}

// One group -> out; returns 1 when it was poisoned (decoded as NaN) or when its scales allow an
// output past 2^127 and one of its outputs is NaN or Inf (may_overflow). kN as for encode_group.
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
  const float q = d.mul, a = d.a, target = fp8_max(s.format);
  bool check;
  if (s.hadamard) {  // x = butterflies(fp8 values) * (mul * h [/ a])
    const bool full = n == s.group && !s.coefficients;  // coefficients: as a tail group
    const float h = full ? w.h : 1.f;
    const float mul = dual ? q * (h / a) : q * h;
    if (full) {
      if constexpr (kN != 0) {
        simd::butterflies<kN>(v);
      } else {
        simd::butterflies(v, n);
      }
    }
    // |butterflies| <= (full ? n : 1) * fp8_max, a power of two times fp8_max
    check = may_overflow((float(full ? n : 1) * target) * std::fabs(mul), 1.f);
    if (tiny_factor(mul, q)) {  // scale in steps, so that only the result rounds tiny
      check = true;
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
  } else {
    check = may_overflow(target * std::fabs(q), std::fabs(a));  // a = 1 unless dual
    if (dual) {
#pragma omp simd
      for (int i = 0; i < n; ++i) v[i] = (v[i] * q) / a;
    } else {
#pragma omp simd
      for (int i = 0; i < n; ++i) v[i] = v[i] * q;
    }
  }
  store_values(store, grp.base, grp.stride, v, n);
  return check && store.nonfinite(v, n) ? 1 : 0;
}

// Groups [g0, g1) -> out; returns how many decode_group counted.
template <bool kE4m3, class Store>
TACO_SIMD_INLINE int64_t decode_groups(const uint8_t* codes, const uint8_t* scales,
                                       const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                       const Store& store, Scratch& w) {
  const int64_t num_groups = s.num_groups();
  int64_t counted = 0;
  for (int64_t g = g0; g < g1; ++g) {
    const GroupRef grp = group_at(s, g);
    with_group_size(
        grp.n, grp.n == s.group, [&]<int kN>() __attribute__((always_inline)) {
          counted += decode_group<kE4m3, kN>(codes, scales, s, g, num_groups, grp, store, w);
        });
  }
  return counted;
}

// group == 0: x[i0, i1) = (fp8 value * mul) / a, or NaN when the message is poisoned; returns 1
// when the scale allows an output past 2^127 and one of [i0, i1) is NaN or Inf (decode_group).
template <bool kE4m3, class Store>
TACO_SIMD_INLINE int decode_whole(const uint8_t* codes, const DecodeScale& d, Fp8Format f,
                                  int64_t i0, int64_t i1, const Store& store) {
  constexpr int64_t kChunk = 2048;
  float v[kChunk];
  const float q = d.mul, a = d.a;
  const bool check = !d.poisoned && may_overflow(fp8_max(f) * std::fabs(q), std::fabs(a));
  int bad = 0;
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
    if (check && !bad) bad = store.nonfinite(v, n);
  }
  return bad;
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
  return f == Fp8Format::e4m3 ? decode_whole<true>(codes, *d, f, i0, i1, store)
                              : decode_whole<false>(codes, *d, f, i0, i1, store);
}

TACO_ISA_BUILDS(Fp8EncodeCounts, encode_f32, encode_groups_any,
                (const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                 uint8_t* sc, Scratch* w),
                (x, s, g0, g1, c, sc, w))
TACO_ISA_BUILDS(Fp8EncodeCounts, encode_bf16, encode_groups_any,
                (const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                 uint8_t* sc, Scratch* w),
                (x, s, g0, g1, c, sc, w))
TACO_ISA_BUILDS(float, absmax_f32, finite_absmax,
                (const float* x, int64_t i0, int64_t i1, int64_t* bad), (x, i0, i1, bad))
TACO_ISA_BUILDS(float, absmax_bf16, finite_absmax,
                (const bf16* x, int64_t i0, int64_t i1, int64_t* bad), (x, i0, i1, bad))
TACO_ISA_BUILDS(int, whole_f32, whole_codes_any,
                (const float* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer* q,
                 uint8_t* c),
                (x, f, i0, i1, q, c))
TACO_ISA_BUILDS(int, whole_bf16, whole_codes_any,
                (const bf16* x, Fp8Format f, int64_t i0, int64_t i1, const Quantizer* q,
                 uint8_t* c),
                (x, f, i0, i1, q, c))
#define TACO_DECODE_ISAS(Store)                                                                \
  TACO_ISA_BUILDS(int64_t, decode_##Store, decode_groups_any,                                  \
                  (const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0,     \
                   int64_t g1, Store st, Scratch* w),                                          \
                  (c, sc, s, g0, g1, st, w))                                                   \
  TACO_ISA_BUILDS(                                                                             \
      int, whole_##Store, decode_whole_any,                                                    \
      (const uint8_t* c, Fp8Format f, const DecodeScale* d, int64_t i0, int64_t i1, Store st), \
      (c, f, d, i0, i1, st))
TACO_DECODE_ISAS(StoreF32)
TACO_DECODE_ISAS(AccumulateF32)
TACO_DECODE_ISAS(StoreBf16)

}  // namespace

// 0: baseline x86-64, 1: AVX2, 2: AVX-512 (F, BW, VL, DQ); the best the CPU has, at most
// g_isa_limit (fp8_codecs_limit_isa).
namespace {
int g_isa_limit = 2;  // fp8_codecs_limit_isa
int detected_isa() {
  static const int isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl") &&
                                 __builtin_cpu_supports("avx512dq")
                             ? 2
                         : __builtin_cpu_supports("avx2") ? 1
                                                          : 0;
  return isa;
}
}  // namespace

int isa() { return std::min(detected_isa(), g_isa_limit); }

// taco's loops stay at AVX2: its per-group loops ran slower in 512-bit vectors (encode 1.57
// against 1.38 ns per element, decode 0.92 against 0.65, one thread, G = 128; before its eight-
// groups-at-a-time path, which is AVX2 too), fp8_block's and fp8_tensor's faster (0.49 / 0.83).
int isa_for(bool hadamard) { return hadamard ? std::min(isa(), 1) : isa(); }

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
#define TACO_DECODE_RANGE(Store)                                                               \
  int64_t decode_range(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0, \
                       int64_t g1, Store st, Scratch* w) {                                     \
    return TACO_CALL_ISA(isa_for(s.hadamard), decode_##Store, c, sc, s, g0, g1, st, w);        \
  }                                                                                            \
  int whole_range(const uint8_t* c, Fp8Format f, const DecodeScale& d, int64_t i0, int64_t i1, \
                  Store st) {                                                                  \
    return TACO_CALL_ISA(isa(), whole_##Store, c, f, &d, i0, i1, st);                          \
  }
TACO_DECODE_RANGE(StoreF32)
TACO_DECODE_RANGE(AccumulateF32)
TACO_DECODE_RANGE(StoreBf16)

}  // namespace fp8_detail

int fp8_codecs_limit_isa(int level) {
  fp8_detail::g_isa_limit = level;
  return fp8_detail::isa();
}

}  // namespace taco::cpu
