// One tile of a grouped FP8 codec (fp8_block, taco), shared by the encode, decode and
// decode-sum-encode kernels: the launch helpers, and encode_tile, which quantizes values held in
// registers into codes and scales exactly as kernels/cpu/codec_fp8.cpp does (codec_fp8_math.cuh),
// in the lane layout of codec_fp8_tile.cuh. The way back (decode_tile) is in
// codec_fp8_group_decode.cuh.
#pragma once

#include <cstring>
#include <type_traits>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_math.cuh"
#include "kernels/cuda/codec_fp8_tile.cuh"
#include "kernels/cuda/codec_fp8_wire_check.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/hadamard.h"

namespace taco::cuda::codec {

// The header and the zero padding after payload and scales, written by block 0.
struct HeaderParams {
  uint8_t bytes[kWireHeaderBytes];
  uint64_t payload_end;    // 48 + payload bytes; padding up to scales_offset
  uint64_t scales_offset;  //
  uint64_t scales_end;     // scales_offset + scale bytes; padding up to total
  uint64_t total;
};

inline HeaderParams header_params(const Fp8DeviceMessage& m) {
  HeaderParams hp;
  std::memcpy(hp.bytes, m.header, kWireHeaderBytes);
  hp.payload_end = kWireHeaderBytes + m.payload_bytes;
  hp.scales_offset = m.scales_offset;
  hp.scales_end = m.scales_offset + m.scales_bytes;
  hp.total = m.total_bytes;
  return hp;
}

// What a decoder expects of a message's header.
inline WireExpectation wire_expectation(const Fp8DeviceMessage& m) {
  const Fp8GroupSpec& s = m.spec;
  return WireExpectation{m.kind,  uint8_t(s.format), uint8_t(s.scales), m.axis,
                         m.group, uint32_t(s.rows),  uint32_t(s.cols)};
}

// The per-message numbers of a grouped kernel; the tile counts are left to the launcher (they
// depend on its tile shape): tiles is 1 for a non-empty message, 0 for an empty one.
inline GroupParams group_params(const Fp8DeviceMessage& m) {
  const Fp8GroupSpec& s = m.spec;
  GroupParams p;
  p.rows = s.rows;
  p.cols = s.cols;
  p.tiles = s.count() > 0 ? 1 : 0;
  p.num_groups = s.num_groups();
  p.scales_offset = m.scales_offset;
  p.format = s.format;
  p.scales = s.scales;
  p.hadamard = s.hadamard;
  p.hadamard_scale = s.group > 0 ? hadamard_scale(int(s.group)) : 1.f;
  p.target = fp8_max(s.format);
  p.rtarget = 1.f / p.target;
  return p;
}

// Codec options a kernel can fix at compile time, so that the tests of them in every group fold
// away: the defaults of taco (Hadamard, dual scales, E4M3) and of fp8_block (single scales,
// E4M3); none: the message's options, from GroupParams.
enum class FixedOptions : int { none, taco_defaults, fp8_block_defaults };

struct CodecOptions {
  bool hadamard;
  Fp8Scales scales;
  Fp8Format format;
};

template <FixedOptions kFixed>
__host__ __device__ __forceinline__ CodecOptions codec_options(const GroupParams& p) {
  if constexpr (kFixed == FixedOptions::taco_defaults) {
    return {true, Fp8Scales::dual, Fp8Format::e4m3};
  } else if constexpr (kFixed == FixedOptions::fp8_block_defaults) {
    return {false, Fp8Scales::single, Fp8Format::e4m3};
  } else {
    return {p.hadamard, p.scales, p.format};
  }
}

// The fixed options that match p's (none where neither default does).
inline FixedOptions fixed_options(const GroupParams& p) {
  const CodecOptions taco = codec_options<FixedOptions::taco_defaults>(p),
                     block = codec_options<FixedOptions::fp8_block_defaults>(p);
  auto same = [&p](const CodecOptions& o) {
    return p.hadamard == o.hadamard && p.scales == o.scales && p.format == o.format;
  };
  return same(taco)    ? FixedOptions::taco_defaults
         : same(block) ? FixedOptions::fp8_block_defaults
                       : FixedOptions::none;
}

// launch(std::integral_constant<FixedOptions, fixed_options(p)>{}): the launcher of a kernel
// built in the three variants picks the one for p's options.
template <class Launch>
void with_fixed_options(const GroupParams& p, Launch&& launch) {
  switch (fixed_options(p)) {
    case FixedOptions::taco_defaults:
      return launch(std::integral_constant<FixedOptions, FixedOptions::taco_defaults>{});
    case FixedOptions::fp8_block_defaults:
      return launch(std::integral_constant<FixedOptions, FixedOptions::fp8_block_defaults>{});
    case FixedOptions::none:
      return launch(std::integral_constant<FixedOptions, FixedOptions::none>{});
  }
}

// Fills the tile counts of `p` for tile shape S (p.tiles must be 0 or 1, as group_params left
// it); `aligned`: the launch's value pointer is 16-byte aligned.
template <class S, int G, bool kTokens>
void set_tiles(GroupParams& p, bool aligned) {
  if (p.tiles == 0) return;
  p.tiles_per_row = kTokens ? (p.cols + S::C - 1) / S::C : (p.cols + G - 1) / G;
  p.tiles = kTokens ? (p.rows + G - 1) / G * p.tiles_per_row : p.tiles_per_row * p.rows;
  if (p.tiles <= INT32_MAX) p.per_row = divide_u32(uint32_t(p.tiles_per_row));
  p.vectorized = aligned && p.cols % S::kRun == 0;
  p.whole_groups = !kTokens && p.cols % G == 0;
}

// Blocks for a grid-stride launch of Kernel with `shared` bytes of dynamic shared memory: one
// wave of the device (every block resident from the start; detail::wave_blocks), fewer where the
// work needs fewer. More waves would leave the last one part-empty (3 blocks per SM resident and
// 8 per SM launched: 2.67 waves) and start each block's load pipeline once per wave. Call after
// allow_shared_memory.
template <auto Kernel>
unsigned wave_grid(int64_t work_items, int64_t items_per_block, int shared) {
  const int64_t needed = (work_items + items_per_block - 1) / items_per_block;
  const int64_t wave =
      detail::wave_blocks(reinterpret_cast<const void*>(Kernel), kThreads, size_t(shared));
  return unsigned(needed < 1 ? 1 : needed < wave ? needed : wave);
}

// Lets Kernel launch with `bytes` of dynamic shared memory: above the default 48 KB it must opt
// in, once per kernel (bytes is the same at every launch of one kernel).
template <auto Kernel>
void allow_shared_memory(int bytes) {
  if (bytes <= 48 * 1024) return;
  static const bool opted_in = [bytes] {
    TACO_CUDA_OK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  }();
  (void)opted_in;
}

__device__ __forceinline__ void write_header_and_padding(uint8_t* out, const HeaderParams& h) {
  if (blockIdx.x != 0) return;
  for (int i = threadIdx.x; i < int(kWireHeaderBytes); i += blockDim.x) out[i] = h.bytes[i];
  const int pad1 = int(h.scales_offset - h.payload_end), pad2 = int(h.total - h.scales_end);
  for (int i = threadIdx.x; i < pad1 + pad2; i += blockDim.x) {
    out[i < pad1 ? h.payload_end + i : h.scales_end + (i - pad1)] = 0;
  }
}

__device__ __forceinline__ void add_count(int64_t* counter, int64_t v) {
  if (v != 0 && counter != nullptr) {
    atomicAdd(reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(v));
  }
}

// Column c's codes into `packed` (tokens [r][c], hidden [r]) in quantizer mode kMode. Along
// hidden two neighbouring codes convert in one instruction.
template <class S, bool kTokens, Fp8Format F, int kMode>
__device__ __forceinline__ void quantize_column(const float (&v)[S::R], const Quantizer& qz, int c,
                                                uint32_t* packed) {
  constexpr int R = S::R, C = S::C;
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = r * C + c;
      packed[i / 4] |= to_fp8<F>(qz.template scaled<kMode>(v[r])) << (8 * (i % 4));
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; r += 2) {
      const uint32_t pair =
          to_fp8x2<F>(qz.template scaled<kMode>(v[r]), qz.template scaled<kMode>(v[r + 1]));
      packed[r / 4] |= pair << (8 * (r % 4));
    }
  }
}

template <class S, bool kTokens, Fp8Format F>
__device__ __forceinline__ void quantize_column(const float (&v)[S::R], const Quantizer& qz, int c,
                                                uint32_t* packed) {
  if (qz.mode == Quantizer::kMul) {  // the common case, before the table jump
    return quantize_column<S, kTokens, F, Quantizer::kMul>(v, qz, c, packed);
  }
  switch (qz.mode) {
    case Quantizer::kPow2:
      return quantize_column<S, kTokens, F, Quantizer::kPow2>(v, qz, c, packed);
    case Quantizer::kDiv:
      return quantize_column<S, kTokens, F, Quantizer::kDiv>(v, qz, c, packed);
    case Quantizer::kExactDiv:
      return quantize_column<S, kTokens, F, Quantizer::kExactDiv>(v, qz, c, packed);
    case Quantizer::kMul:
      return quantize_column<S, kTokens, F, Quantizer::kMul>(v, qz, c, packed);
    case Quantizer::kScaledDiv:
      return quantize_column<S, kTokens, F, Quantizer::kScaledDiv>(v, qz, c, packed);
    case Quantizer::kScaledPow2:
      return quantize_column<S, kTokens, F, Quantizer::kScaledPow2>(v, qz, c, packed);
    case Quantizer::kZero:
      return;  // the codes stay 0
  }
}

// Quantizes the tile's values v (elements outside the group are zero) into the codes and scales
// of a message, counting poisoned groups (a non-finite value) into `poisoned_groups`. kWhole: t
// comes from tile_at<..., kWhole = true> (n is G or, past the last tile, 0, with zeros in v) and
// p.vectorized holds. kFixed: options fixed at compile time (codec_options). kCoeffs: v holds a
// taco group's transform coefficients (the all-reduce's sum, kernels/codec_fp8.h): the transform
// and h are skipped, as for a tail group.
// encode_tile_codes: all of it but the store of the codes, which are left in `packed` (tokens
// [r][c], hidden [r]; byte i of the array is register i's code), for callers that stage them.
template <class S, bool kTokens, bool kWhole = false, FixedOptions kFixed = FixedOptions::none,
          bool kCoeffs = false>
__device__ __forceinline__ void encode_tile_codes(float (&v)[S::C][S::R], const TileRef& t, int li,
                                                  const GroupParams& p, uint8_t* scales,
                                                  int64_t& poisoned_groups,
                                                  uint32_t (&packed)[S::R * S::C / 4]) {
  constexpr int R = S::R, L = S::L, K = S::K, C = S::C;
  static_assert(L >= 2, "a group's scale entries are stored by its lanes 0 and 1");
  const CodecOptions o = codec_options<kFixed>(p);
  const bool e8m0 = o.scales == Fp8Scales::e8m0;
  // Every group full (the transform on a past-the-end tile's zeros gives zeros, not stored).
  // Coefficients: no transform, h = 1.
  const bool full = !kCoeffs && (kWhole || t.full);
#pragma unroll
  for (int w = 0; w < R * C / 4; ++w) packed[w] = 0;

#pragma unroll
  for (int c = 0; c < C; ++c) {
    // A non-finite input makes the sum of squares (taco) or the NaN-keeping absmax (fp8_block)
    // non-finite; only then are they counted (an overflowing sum of finite squares counts none).
    float a = 1.f, ss = 0.f, m = 0.f;
    int ea = 0;
    bool finite;
    if (o.hadamard) {
      float sq[R];
#pragma unroll
      for (int r = 0; r < R; ++r) sq[r] = __fmul_rn(v[c][r], v[c][r]);
      ss = tree_sum<R, L, K>(sq);
      finite = is_finite(ss);
    } else {
      m = group_max<L, true>(lane_max_abs<true>(v[c]));
      finite = is_finite(m);
    }
    int bad = 0;
    if (__any_sync(kFullMask, !finite)) {
#pragma unroll
      for (int r = 0; r < R; ++r) bad += !is_finite(v[c][r]);
      bad = group_sum<L>(bad);
    }

    Quantizer qz;
    if (o.hadamard) {
      // a is normal, in [1e-3, 1e3] (for a finite group): floor(log2 a) is its exponent field
      a = adaptive_scale(ss, kWhole ? R * L : t.n > 0 ? t.n : 1, p.target);
      if (e8m0) {
        ea = exponent_of(a);
        a = exact_pow2(ea);
      }
      // Large values are scaled into range by 2^e first (rare: ss above 2^64); c = a * 2^-e.
      float a_e = a;
      if (__any_sync(kFullMask, !(ss <= kPrescaleSumOfSquares))) {
        const int e = ss <= kPrescaleSumOfSquares ? 0 : exponent_of(a);
        if (e != 0) {
          const float pe = exact_pow2(e);
#pragma unroll
          for (int r = 0; r < R; ++r) v[c][r] = __fmul_rn(v[c][r], pe);
          a_e = __fmul_rn(a, exact_pow2(-e));
        }
      }
      if constexpr (!kCoeffs) {
        if constexpr (kWhole) {
          hadamard_full<R, L, K>(v[c], li);
        } else {
          hadamard<R, L, K>(v[c], li, t.full);
        }
      }
      const float cy = __fmul_rn(a_e, full ? p.hadamard_scale : 1.f);
      qz = make_taco_quantizer(group_max<L>(lane_max_abs<false>(v[c])), cy, ea, o.scales, p.target,
                               p.rtarget);
    } else {
      qz = make_quantizer(m, ea, o.scales, p.target, p.rtarget);
    }
    if (bad == 0) {
      if (o.format == Fp8Format::e4m3) {
        quantize_column<S, kTokens, Fp8Format::e4m3>(v[c], qz, c, packed);
      } else {
        quantize_column<S, kTokens, Fp8Format::e5m2>(v[c], qz, c, packed);
      }
    }

    // The group's scale entries (NaN, or 0xFF in e8m0, for a poisoned group). kWhole: one store
    // per lane, lane 0 the first entry (q, s or the e8m0 byte) and lane 1 a (dual), instead of a
    // branch of lane 0 alone (in the general kernels that costs registers: ptxas spills there).
    if (t.n > 0 && (kWhole || c < t.columns)) {
      const int64_t g = t.first_group + c;
      const bool dual = o.scales == Fp8Scales::dual;
      if (li == 0 && bad != 0) ++poisoned_groups;
      if (e8m0) {
        if (li == 0) scales[g] = bad != 0 ? kPoisonedE8m0 : uint8_t(qz.k + 127);
      } else if (kWhole && (li == 0 || (dual && li == 1))) {
        const float entry = bad != 0 ? quiet_nan() : li == 1 ? a : dual ? qz.q : __fdiv_rn(qz.q, a);
        put_f32(scales + 4 * (li == 1 ? p.num_groups + g : g), entry);
      } else if (!kWhole && li == 0) {
        const float first = bad != 0 ? quiet_nan() : dual ? qz.q : __fdiv_rn(qz.q, a);
        put_f32(scales + 4 * g, first);
        if (dual) put_f32(scales + 4 * (p.num_groups + g), bad != 0 ? quiet_nan() : a);
      }
    }
  }
}

template <class S, bool kTokens, bool kWhole = false, FixedOptions kFixed = FixedOptions::none,
          bool kCoeffs = false>
__device__ __forceinline__ void encode_tile(float (&v)[S::C][S::R], const TileRef& t, int li,
                                            const GroupParams& p, uint8_t* codes_out,
                                            uint8_t* scales, int64_t& poisoned_groups) {
  constexpr int R = S::R, C = S::C, kRun = S::kRun;
  uint32_t packed[R * C / 4];
  encode_tile_codes<S, kTokens, kWhole, kFixed, kCoeffs>(v, t, li, p, scales, poisoned_groups,
                                                         packed);

  // Store the codes (payload index = element index).
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (t.r0 + r >= t.n) continue;
      uint8_t* dst = codes_out + t.base + r * t.stride_r;
      if (p.vectorized) {
        store_bytes<C>(dst, &packed[r * C / 4]);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (c < t.columns) dst[c] = uint8_t(byte_of(packed, r * C + c));
        }
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < R; k += kRun) {
      if (kWhole || p.vectorized) {
        if (kWhole ? t.n > 0 : t.r0 + S::offset(k) < t.n)
          store_bytes<kRun>(codes_out + t.base + S::offset(k), &packed[k / 4]);
      } else {
#pragma unroll
        for (int r = k; r < k + kRun; ++r) {
          if (t.r0 + S::offset(r) < t.n)
            codes_out[t.base + S::offset(r)] = uint8_t(byte_of(packed, r));
        }
      }
    }
  }
}

}  // namespace taco::cuda::codec
