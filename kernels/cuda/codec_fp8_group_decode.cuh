// One tile of a grouped FP8 codec decoded (fp8_block, taco), shared by the decode and
// decode-sum-encode kernels: load_coded_tile reads a tile's codes and scales, decode_loaded_tile
// turns them into values in registers exactly as kernels/cpu/codec_fp8.cpp does
// (codec_fp8_math.cuh), in the lane layout of codec_fp8_tile.cuh, and counts the groups decoded to
// NaN or Inf.
#pragma once

#include <type_traits>

#include "kernels/cuda/codec_fp8_group.cuh"

namespace taco::cuda::codec {

// A group's decode scales (kernels/cpu/codec_fp8.cpp, read_scale).
struct DecodeScale {
  float mul, a;
  bool poisoned;
};

// Group g's decode scales, loaded and decoded at once. (decode_scale(load_scale(...)) below is the
// same arithmetic; built that way, the fp32 decode kernels that call this one allocate their
// registers differently, with more spills at G = 512, so this form stays until that is measured.)
__device__ __forceinline__ DecodeScale read_scale(const uint8_t* scales, int64_t g,
                                                  int64_t num_groups, Fp8Scales mode) {
  DecodeScale d{1.f, 1.f, false};
  if (mode == Fp8Scales::e8m0) {
    const uint32_t b = __ldg(scales + g);
    d.poisoned = b == kPoisonedE8m0;
    d.mul = d.poisoned ? 1.f : exact_pow2(int(b) - 127);
  } else {
    d.mul = get_f32(scales + 4 * g);
    if (mode == Fp8Scales::dual) d.a = get_f32(scales + 4 * (num_groups + g));
    d.poisoned = !(d.mul == d.mul) || !(d.a == d.a);
  }
  return d;
}

// A group's scale entries as read, before any arithmetic on them (kDeferred tiles below): the
// loads of the next tile's scales stay in flight until the tile is decoded, where read_scale's
// tests would wait on them at once. q: the fp32 bits of q (s), or the e8m0 byte; a: the fp32 bits
// of a (dual).
struct ScaleWords {
  uint32_t q, a;
};

constexpr uint32_t kOneBits = 0x3F800000u;  // 1.0f

// The entries that decode as 1 (for a lane without a group).
__device__ __forceinline__ ScaleWords unit_scale(Fp8Scales mode) {
  return ScaleWords{mode == Fp8Scales::e8m0 ? 127u : kOneBits, kOneBits};
}

__device__ __forceinline__ ScaleWords load_scale(const uint8_t* scales, int64_t g,
                                                 int64_t num_groups, Fp8Scales mode) {
  ScaleWords w = unit_scale(mode);
  if (mode == Fp8Scales::e8m0) {
    w.q = __ldg(scales + g);
  } else {
    w.q = __ldg(reinterpret_cast<const uint32_t*>(scales + 4 * g));
    if (mode == Fp8Scales::dual) {
      w.a = __ldg(reinterpret_cast<const uint32_t*>(scales + 4 * (num_groups + g)));
    }
  }
  return w;
}

// read_scale's arithmetic on entries loaded by load_scale.
__device__ __forceinline__ DecodeScale decode_scale(ScaleWords w, Fp8Scales mode) {
  DecodeScale d{1.f, 1.f, false};
  if (mode == Fp8Scales::e8m0) {
    d.poisoned = w.q == kPoisonedE8m0;
    d.mul = d.poisoned ? 1.f : exact_pow2(int(w.q) - 127);
  } else {
    d.mul = __uint_as_float(w.q);
    d.a = __uint_as_float(w.a);
    d.poisoned = !(d.mul == d.mul) || !(d.a == d.a);
  }
  return d;
}

// Column c's codes (in `packed`, as encode_tile left them) times the group's scale `mul`, as the
// CPU's fp8_to_float(code) * mul (kScale false: the values alone); along hidden two codes
// convert in one instruction.
template <class S, bool kTokens, Fp8Format F, bool kScale = true>
__device__ __forceinline__ void column_values(const uint32_t* packed, int c, float mul,
                                              float (&v)[S::R]) {
  constexpr int R = S::R, C = S::C;
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float f = from_fp8(byte_of(packed, r * C + c), F);
      v[r] = kScale ? __fmul_rn(f, mul) : f;
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; r += 2) {
      const float2 f = fp8x2_to_float2<F>(packed[r / 4] >> (8 * (r % 4)));
      v[r] = kScale ? __fmul_rn(f.x, mul) : f.x;
      v[r + 1] = kScale ? __fmul_rn(f.y, mul) : f.y;
    }
  }
}

// A taco decode factor that lost precision (kernels/cpu/codec_fp8.cpp, tiny_factor).
__device__ __forceinline__ bool tiny_factor(float mul, float q) {
  const uint32_t bits = __float_as_uint(mul) & 0x7FFFFFFFu;
  return bits < 0x00800000u && (bits != 0 || q != 0.f);
}

// kernels/codec_fp8.h's count of groups decoded to Inf from finite codes: a group whose largest
// possible |output| before the division by a, m, is not below 2^127 |a| (values near FLT_MAX,
// damaged scales; never an ordinary group), or one on taco's stepwise path, has its outputs looked
// at. The same fp32 arithmetic as kernels/cpu/codec_fp8.cpp (may_overflow), so the counts match.
constexpr float kOverflowBound = 0x1p127f;
__device__ __forceinline__ bool may_overflow(float m, float abs_a) {
  return !(m < __fmul_rn(kOverflowBound, abs_a));
}

// Counts the group (lane 0 of its L lanes) when `check` holds for it and one of its values v is
// NaN or Inf in the output type (kBf16: from 0x7F7F8000 a float rounds to bf16's Inf). All lanes
// of the warp call it (a warp-wide branch around it, see decode_loaded_tile).
template <bool kBf16, int L, int R>
__device__ __forceinline__ void count_nonfinite(const float (&v)[R], bool check, int li,
                                                int64_t& counted) {
  constexpr uint32_t from = kBf16 ? 0x7F7F8000u : 0x7F800000u;
  int bad = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) bad |= int((__float_as_uint(v[r]) & 0x7FFFFFFFu) >= from);
  bad = group_sum<L>(check ? bad : 0);
  if (li == 0 && bad != 0) ++counted;
}

// A tile's codes and scales as read from a message: loaded one tile ahead of its arithmetic.
// kDeferred: the scales as loaded words, decoded with the tile (measured on an H200 for the bf16
// decode: 2868 -> 3095 GB/s at 128 MB with kWhole; the fp32 decode-accumulate was 2-4x slower
// with it at G = 32 and 128, not understood, so fp32 outputs keep read_scale).
template <class S, bool kDeferred = false>
struct CodedTile {
  uint32_t packed[S::R * S::C / 4];  // codes: tokens [r][c], hidden [r]
  std::conditional_t<kDeferred, ScaleWords, DecodeScale> scale[S::C];
};

// kWhole: t is from tile_at<..., kWhole = true> and p.vectorized holds (whole groups: a lane
// reads all of its runs or, past the last tile, none).
template <class S, bool kTokens, bool kWhole = false, bool kDeferred = false,
          FixedOptions kFixed = FixedOptions::none>
__device__ __forceinline__ void load_coded_tile(const uint8_t* codes_in, const uint8_t* scales,
                                                const TileRef& t, const GroupParams& p,
                                                CodedTile<S, kDeferred>& ct) {
  constexpr int R = S::R, C = S::C, kRun = S::kRun;
  const Fp8Scales mode = codec_options<kFixed>(p).scales;
  uint32_t* packed = ct.packed;
#pragma unroll
  for (int w = 0; w < R * C / 4; ++w) packed[w] = 0;
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (t.r0 + r >= t.n) continue;
      const uint8_t* src = codes_in + t.base + r * t.stride_r;
      if (p.vectorized) {
        load_bytes<C>(src, &packed[r * C / 4]);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (c < t.columns) packed[(r * C + c) / 4] |= uint32_t(src[c]) << (8 * (c % 4));
        }
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < R; k += kRun) {
      if (kWhole || p.vectorized) {
        if (kWhole ? t.n > 0 : t.r0 + S::offset(k) < t.n)
          load_bytes<kRun>(codes_in + t.base + S::offset(k), &packed[k / 4]);
      } else {
#pragma unroll
        for (int r = k; r < k + kRun; ++r) {
          if (t.r0 + S::offset(r) < t.n)
            packed[r / 4] |= uint32_t(codes_in[t.base + S::offset(r)]) << (8 * (r % 4));
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if constexpr (kDeferred) {
      ct.scale[c] = unit_scale(mode);
      if (t.n > 0 && c < t.columns) {
        ct.scale[c] = load_scale(scales, t.first_group + c, p.num_groups, mode);
      }
    } else {
      ct.scale[c] = DecodeScale{1.f, 1.f, false};
      if (t.n > 0 && c < t.columns) {
        ct.scale[c] = read_scale(scales, t.first_group + c, p.num_groups, mode);
      }
    }
  }
}

// The values of a loaded tile's groups (elements outside the group: zero, or NaN in a poisoned
// group), counting the groups decoded as NaN, and those decoded to Inf (count_nonfinite; in bf16
// where kBf16Out), into `poisoned_groups`. kCoeffs: a taco group's transform coefficients
// instead (the all-reduce's sum, kernels/codec_fp8.h): no butterflies, h = 1, as a tail group.
template <class S, bool kTokens, bool kWhole = false, bool kDeferred = false,
          FixedOptions kFixed = FixedOptions::none, bool kBf16Out = false, bool kCoeffs = false>
__device__ __forceinline__ void decode_loaded_tile(const CodedTile<S, kDeferred>& ct,
                                                   const TileRef& t, int li, const GroupParams& p,
                                                   float (&v)[S::C][S::R],
                                                   int64_t& poisoned_groups) {
  constexpr int R = S::R, L = S::L, K = S::K, C = S::C;
  const CodecOptions o = codec_options<kFixed>(p);
  const uint32_t* packed = ct.packed;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    DecodeScale d;
    if constexpr (kDeferred) {
      d = decode_scale(ct.scale[c], o.scales);
    } else {
      d = ct.scale[c];
    }
    bool check;        // count_nonfinite's condition
    if (o.hadamard) {  // butterflies of the FP8 values, then one multiply (kernels/codec_fp8.h)
      if (o.format == Fp8Format::e4m3) {
        column_values<S, kTokens, Fp8Format::e4m3, false>(packed, c, 1.f, v[c]);
      } else {
        column_values<S, kTokens, Fp8Format::e5m2, false>(packed, c, 1.f, v[c]);
      }
      const bool full = !kCoeffs && (kWhole || t.full);
      if constexpr (!kCoeffs) {
        if constexpr (kWhole) {  // past the last tile: zeros, not stored
          hadamard_full<R, L, K>(v[c], li);
        } else {
          hadamard<R, L, K>(v[c], li, t.full);
        }
      }
      const float h = full ? p.hadamard_scale : 1.f;
      const bool dual = o.scales == Fp8Scales::dual;
      const float mul = dual ? __fmul_rn(d.mul, __fdiv_rn(h, d.a)) : __fmul_rn(d.mul, h);
      // |butterflies| <= n * fp8_max for a full group, fp8_max for a tail (exact products)
      check = may_overflow(__fmul_rn((full ? float(R * L) : 1.f) * p.target, fabsf(mul)), 1.f);
      if (!tiny_factor(mul, d.mul)) {
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = __fmul_rn(v[c][r], mul);
      } else {  // in steps, so that only the result rounds tiny
        check = true;
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float y = __fmul_rn(__fmul_rn(v[c][r], d.mul), h);
          v[c][r] = dual ? __fdiv_rn(y, d.a) : y;
        }
      }
    } else {
      check = may_overflow(__fmul_rn(p.target, fabsf(d.mul)),
                           o.scales == Fp8Scales::dual ? fabsf(d.a) : 1.f);
      if (o.format == Fp8Format::e4m3) {
        column_values<S, kTokens, Fp8Format::e4m3>(packed, c, d.mul, v[c]);
      } else {
        column_values<S, kTokens, Fp8Format::e5m2>(packed, c, d.mul, v[c]);
      }
    }
    if (!o.hadamard && o.scales == Fp8Scales::dual) {
      // div_by within its bounds (codec_fp8_div_by.h); e5m2 has infinite codes, which div_by would
      // turn into NaN.
      if (o.format == Fp8Format::e4m3 && d.a > 0.f &&
          magnitude_within<kDecodeAMinExp, kDecodeAMaxExp>(d.a) &&
          magnitude_within<kDecodeQMinExp, kDecodeQMaxExp>(d.mul)) {
        const float ra = __frcp_rn(d.a);
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = div_by(v[c][r], d.a, ra);
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = __fdiv_rn(v[c][r], d.a);
      }
    }
    // kDeferred with the transform: a warp-wide branch around the rare case instead of R
    // selects per tile. The empty volatile asm keeps it a branch: without it the compiler drops
    // the vote (poisoned implies it) and turns the stores into R selects on every tile (Nsight
    // Compute: 64 FSEL per iteration of taco's bf16 decode). Measured on an H200: taco's decode
    // +1-2% at 128 MB; fp8_block's ran 3-4% slower with the branch, and as fast as before only
    // in the vote's form that compiles to the selects, so it keeps that form.
    auto poison = [&] {
#pragma unroll
      for (int r = 0; r < R; ++r) v[c][r] = quiet_nan();
      if (li == 0) ++poisoned_groups;
    };
    if (kDeferred && o.hadamard) {
      if (__any_sync(kFullMask, d.poisoned)) {
        asm volatile("");
        if (d.poisoned) poison();
      }
    } else if (!kDeferred || __any_sync(kFullMask, d.poisoned)) {
      if (d.poisoned) poison();
    }
    // Rare (scales that allow an output past 2^127): one vote per group on the others.
    if (__any_sync(kFullMask, check)) {
      count_nonfinite<kBf16Out, L>(v[c], check && !d.poisoned, li, poisoned_groups);
    }
  }
}

// decode_loaded_tile of the tile at t.
template <class S, bool kTokens, bool kCoeffs = false>
__device__ __forceinline__ void decode_tile(const uint8_t* codes_in, const uint8_t* scales,
                                            const TileRef& t, int li, const GroupParams& p,
                                            float (&v)[S::C][S::R], int64_t& poisoned_groups) {
  CodedTile<S> ct;
  load_coded_tile<S, kTokens>(codes_in, scales, t, p, ct);
  decode_loaded_tile<S, kTokens, false, false, FixedOptions::none, false, kCoeffs>(ct, t, li, p, v,
                                                                                   poisoned_groups);
}

}  // namespace taco::cuda::codec
