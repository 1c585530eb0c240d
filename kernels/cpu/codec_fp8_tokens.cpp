// fp8_block along tokens on the CPU (kernels/codec_fp8.h): a group is G consecutive rows of one
// column, so the neighbouring columns of a row hold one element each of neighbouring groups. The
// loops walk a strip (up to kStrip columns of one row block) row by row, each row a contiguous run
// that the compiler vectorizes with one group per lane: no strided gather per group and no
// transposition, unlike the per-group loops of kernels/cpu/codec_fp8.cpp. Encode reads a strip
// twice (every column's max |x| from memory, then the codes from the cache), decode once.
// Columns on a rare path (encode: a NaN or Inf in the group, a subnormal q; decode: poisoned or
// damaged scales, scales that could overflow) are done over by those per-group loops, which keep
// every rare path. Every element sees the per-group loops' fp32 operations in their order, so the
// bytes and bits are the same (tests/unit/test_codec_cpu_bits.cpp).
#include "kernels/cpu/codec_fp8_internal.h"

namespace taco::cpu::fp8_detail {
namespace {

// Columns per strip. Encode: the second read of a strip of G rows comes from L1 and L2;
// decode: whole rows where it can (long runs for the prefetchers).
constexpr int kEncodeStrip = 256, kDecodeStrip = 1024;

// make_quantizer's e8m0 exponent k (ea = 0) of a finite group whose max |x| has the bits mb:
// the smallest kq with m <= target * 2^kq (0 for m = 0), clamped to [-127, 127], from the
// exponents and mantissas frexp gives (a subnormal m times 2^25 first, exactly).
TACO_SIMD_INLINE int32_t e8m0_k(uint32_t mb, uint32_t tb) {
  const uint32_t sub = uint32_t(mb < 0x00800000u);
  const uint32_t nb = simd::select(sub, simd::bits(simd::from_bits(mb) * 0x1p25f), mb);
  const int32_t kq = int32_t(nb >> 23) - int32_t(sub * 25u) - int32_t(tb >> 23) +
                     int32_t((nb & 0x7FFFFFu) > (tb & 0x7FFFFFu));
  const int32_t k = kq < -127 ? -127 : kq > 127 ? 127 : kq;
  return mb == 0 ? 0 : k;
}

// top[c] = the bits of max |x| over rows [0, n) of column c (NaN and Inf above every finite
// value); bf16 inputs compared as 16-bit integers, twice the lanes of a vector.
TACO_SIMD_INLINE void column_absmax_bits(const float* x, int64_t cols, int n, int w,
                                         uint32_t* __restrict top) {
  for (int c = 0; c < w; ++c) top[c] = 0;
  for (int r = 0; r < n; ++r) {
    const float* __restrict row = x + r * cols;
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      const uint32_t a = simd::bits(row[c]) & 0x7FFFFFFFu;
      top[c] = top[c] < a ? a : top[c];
    }
  }
}
TACO_SIMD_INLINE void column_absmax_bits(const bf16* x, int64_t cols, int n, int w,
                                         uint32_t* __restrict top) {
  alignas(64) uint16_t top16[kEncodeStrip];
  for (int c = 0; c < w; ++c) top16[c] = 0;
  for (int r = 0; r < n; ++r) {
    const uint16_t* __restrict row = reinterpret_cast<const uint16_t*>(x + r * cols);
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      const uint16_t a = row[c] & 0x7FFFu;
      top16[c] = top16[c] < a ? a : top16[c];
    }
  }
  for (int c = 0; c < w; ++c) top[c] = uint32_t(top16[c]) << 16;
}

// One strip -> codes and scales. A column whose group holds a NaN or Inf, or (dual, single) whose
// q is subnormal (x / q could leave the range of to_fp8_in_range), is encoded again afterwards by
// encode_range. q = 0 (a group of zeros, or of values so small that max / fp8_max rounds to 0):
// all codes 0, as make_quantizer's memset.
template <bool kE4m3, class T>
TACO_SIMD_INLINE Fp8EncodeCounts encode_strip(const T* x, const Fp8GroupSpec& s, const Strip& t,
                                              const Strip& next, uint8_t* codes, uint8_t* scales,
                                              Scratch* scratch) {
  alignas(64) uint32_t top[kEncodeStrip];  // the bits of each column's max |x|
  alignas(64) float mul[kEncodeStrip];     // q (code = fp8(x / q)) or 2^-k (e8m0: fp8(x * 2^-k))
  alignas(64) int32_t k[kEncodeStrip];
  alignas(64) uint8_t keep[kEncodeStrip];  // 0 where q = 0: the column's codes are 0
  alignas(64) uint8_t rare[kEncodeStrip];
  const int w = t.w;
  column_absmax_bits(x + t.base, s.cols, t.n, w, top);
  // make_quantizer's q, or k and 2^-k (ea = 0; k <= 120 for a finite max, so 2^-k is normal).
  // Where a column is rare, the values here are never used.
  const float target = fp8_max(s.format);
  const bool pow2 = s.scales == Fp8Scales::e8m0;
  if (pow2) {
    const uint32_t tb = simd::bits(target);
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      k[c] = e8m0_k(top[c], tb);
      mul[c] = simd::from_bits(uint32_t(127 - k[c]) << 23);
      keep[c] = 0xFF;
      rare[c] = uint8_t(top[c] >= 0x7F800000u);
    }
  } else {
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      const float q = simd::from_bits(top[c]) / target;
      mul[c] = q > 0.f ? q : 1.f;  // q = 0: |x| <= max |x|, within range; the codes masked
      keep[c] = q > 0.f ? 0xFF : 0;
      rare[c] = uint8_t(top[c] >= 0x7F800000u || (q > 0.f && q < 0x1p-126f));
    }
  }
  // The codes: |x / q| <= fp8_max (1 + 2^-23) for a normal q, |x * 2^-k| <= fp8_max.
  for (int r = 0; r < t.n; ++r) {
    const T* __restrict row = x + t.base + r * s.cols;
    uint8_t* __restrict out = codes + t.base + r * s.cols;
    if (r < next.n) {  // the next strip's row r on its way from memory while this one computes
      const char* p = reinterpret_cast<const char*>(x + next.base + r * s.cols);
      for (int b = 0; b < int(sizeof(T)) * next.w; b += 64) __builtin_prefetch(p + b);
    }
    if (pow2) {  // (x * 2^-k) * 2^-ea, ea = 0
#pragma omp simd
      for (int c = 0; c < w; ++c) {
        out[c] = simd::to_fp8_in_range<kE4m3>(simd::load_value(row, c) * mul[c]);
      }
    } else {
#pragma omp simd
      for (int c = 0; c < w; ++c) {
        out[c] = simd::to_fp8_in_range<kE4m3>(simd::load_value(row, c) / mul[c]) & keep[c];
      }
    }
  }
  const int64_t groups = s.num_groups();
  Fp8EncodeCounts counts;
  for (int c = 0; c < w; ++c) {
    const int64_t g = t.g + c;
    if (rare[c]) {
      const Fp8EncodeCounts r = encode_range(x, s, g, g + 1, codes, scales, scratch);
      counts.nonfinite_values += r.nonfinite_values;
      counts.nonfinite_groups += r.nonfinite_groups;
    } else if (pow2) {  // write_scales, a = 1
      scales[g] = uint8_t(k[c] + 127);
    } else {
      put_f32(scales + 4 * g, keep[c] ? mul[c] : 0.f);
      if (s.scales == Fp8Scales::dual) put_f32(scales + 4 * (groups + g), 1.f);
    }
  }
  return counts;
}

// One strip -> out. A column's factor is its q (dual: q / a with a = 1) or 2^k; a column whose
// scales are poisoned or damaged, or could give an output past 2^127 (kernels/codec_fp8.h), is
// decoded by decode_range instead; returns what that counted.
template <bool kE4m3, class Store>
TACO_SIMD_INLINE int64_t decode_strip(const uint8_t* codes, const uint8_t* scales,
                                      const Fp8GroupSpec& s, const Strip& t, const Store& store,
                                      Scratch* scratch) {
  alignas(64) float mul[kDecodeStrip];
  alignas(64) uint8_t ok[kDecodeStrip];
  const int w = t.w;
  const float target = fp8_max(s.format);  // ok: target * |mul| < 2^127 (may_overflow)
  const uint8_t* sc = scales + (s.scales == Fp8Scales::e8m0 ? 1 : 4) * t.g;
  if (s.scales == Fp8Scales::e8m0) {
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      const uint32_t b = sc[c];  // 0: 2^-127, a subnormal; 0xFF: poisoned
      mul[c] = simd::from_bits(simd::select(b == 0, 0x00400000u, b << 23));
      ok[c] = uint8_t(b != 0xFFu && target * mul[c] < kOverflowBound);
    }
  } else {
    const bool dual = s.scales == Fp8Scales::dual;
    const uint8_t* sa = scales + 4 * (s.num_groups() + t.g);
#pragma omp simd
    for (int c = 0; c < w; ++c) {
      mul[c] = get_f32(sc + 4 * c);
      const float a = dual ? get_f32(sa + 4 * c) : 1.f;
      const float m = target * simd::from_bits(simd::bits(mul[c]) & 0x7FFFFFFFu);
      ok[c] = uint8_t(m < kOverflowBound && a == 1.f);
    }
  }
  int64_t counted = 0;
  for (int c0 = 0; c0 < w;) {
    if (!ok[c0]) {
      counted += decode_range(codes, scales, s, t.g + c0, t.g + c0 + 1, store, scratch);
      ++c0;
      continue;
    }
    int c1 = c0 + 1;
    while (c1 < w && ok[c1]) ++c1;
    for (int r = 0; r < t.n; ++r) {
      const int64_t i0 = t.base + r * s.cols;
      const uint8_t* __restrict in = codes + i0;
      // A finite code times a finite factor is not NaN: then the conversions skip their selects.
      if (!simd::any_special_code<kE4m3>(in + c0, c1 - c0)) {
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
          store.number(i0 + c, simd::from_fp8_number<kE4m3>(in[c]) * mul[c]);
        }
      } else {
#pragma omp simd
        for (int c = c0; c < c1; ++c) store.one(i0 + c, simd::from_fp8<kE4m3>(in[c]) * mul[c]);
      }
    }
    c0 = c1;
  }
  return counted;
}

template <class T>
TACO_SIMD_INLINE Fp8EncodeCounts encode_strips(const T* x, const Fp8GroupSpec& s, int64_t g0,
                                               int64_t g1, uint8_t* codes, uint8_t* scales,
                                               Scratch* w) {
  Fp8EncodeCounts total;
  for_strips<kEncodeStrip>(
      s, g0, g1, [&](const Strip& t, const Strip& next) __attribute__((always_inline)) {
        const Fp8EncodeCounts r = s.format == Fp8Format::e4m3
                                      ? encode_strip<true>(x, s, t, next, codes, scales, w)
                                      : encode_strip<false>(x, s, t, next, codes, scales, w);
        total.nonfinite_values += r.nonfinite_values;
        total.nonfinite_groups += r.nonfinite_groups;
      });
  return total;
}

template <class Store>
TACO_SIMD_INLINE int64_t decode_strips(const uint8_t* codes, const uint8_t* scales,
                                       const Fp8GroupSpec& s, int64_t g0, int64_t g1, Store store,
                                       Scratch* w) {
  int64_t counted = 0;
  for_strips<kDecodeStrip>(
      s, g0, g1, [&](const Strip& t, const Strip&) __attribute__((always_inline)) {
        counted += s.format == Fp8Format::e4m3 ? decode_strip<true>(codes, scales, s, t, store, w)
                                               : decode_strip<false>(codes, scales, s, t, store, w);
      });
  return counted;
}

TACO_ISA_BUILDS(Fp8EncodeCounts, tokens_f32, encode_strips,
                (const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                 uint8_t* sc, Scratch* w),
                (x, s, g0, g1, c, sc, w))
TACO_ISA_BUILDS(Fp8EncodeCounts, tokens_bf16, encode_strips,
                (const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                 uint8_t* sc, Scratch* w),
                (x, s, g0, g1, c, sc, w))
#define TACO_TOKENS_DECODE_ISAS(Store)                                                     \
  TACO_ISA_BUILDS(int64_t, tokens_##Store, decode_strips,                                  \
                  (const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0, \
                   int64_t g1, Store st, Scratch* w),                                      \
                  (c, sc, s, g0, g1, st, w))
TACO_TOKENS_DECODE_ISAS(StoreF32)
TACO_TOKENS_DECODE_ISAS(AccumulateF32)
TACO_TOKENS_DECODE_ISAS(StoreBf16)

}  // namespace

Fp8EncodeCounts block_tokens_encode(const float* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                    uint8_t* c, uint8_t* sc, Scratch* w) {
  return TACO_CALL_ISA(isa(), tokens_f32, x, s, g0, g1, c, sc, w);
}
Fp8EncodeCounts block_tokens_encode(const bf16* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1,
                                    uint8_t* c, uint8_t* sc, Scratch* w) {
  return TACO_CALL_ISA(isa(), tokens_bf16, x, s, g0, g1, c, sc, w);
}
#define TACO_TOKENS_DECODE(Store)                                                         \
  int64_t block_tokens_decode(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, \
                              int64_t g0, int64_t g1, Store st, Scratch* w) {             \
    return TACO_CALL_ISA(isa(), tokens_##Store, c, sc, s, g0, g1, st, w);                 \
  }
TACO_TOKENS_DECODE(StoreF32)
TACO_TOKENS_DECODE(AccumulateF32)
TACO_TOKENS_DECODE(StoreBf16)

}  // namespace taco::cpu::fp8_detail
