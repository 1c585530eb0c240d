// Device arithmetic of the grouped FP8 codecs, step for step the CPU reference's
// (kernels/cpu/codec_fp8.cpp, kernels/codec_fp8.h), so that the bytes match bit for bit.
//
// Every fp32 operation on a value that reaches the wire is an explicit round-to-nearest
// intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn): nvcc would otherwise contract a
// multiply and the following add into one FMA (one rounding instead of the CPU's two), and
// --use_fast_math would turn divisions into approximations.
//
// A group of G values lives in the registers of L = G / R lanes of one warp, in runs of K
// consecutive elements (codec_fp8_tile.cuh): register r of lane li holds group element
// li * K + (r / K) * L * K + r % K. An element index's low log2(K) bits are a register bit, the
// next log2(L) bits the lane, the high bits a register bit again. The butterflies of the
// Walsh-Hadamard transform (ascending h, as in kernels/hadamard.h) and of the sum of squares
// (descending h, the CPU's tree_sum) run in registers for register bits and across lanes with
// __shfl_xor_sync for lane bits, in the CPU's order of h.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_div_by.h"

namespace taco::cuda::codec {

constexpr float kLambda = 1e-6f;  // kernels/cpu/codec_fp8.cpp: the same constants
constexpr float kMinAdaptive = 1e-3f;
constexpr float kMaxAdaptive = 1e3f;
constexpr float kPrescaleSumOfSquares = 0x1p64f;  // taco: above, x * 2^floor(log2 a) first
constexpr uint8_t kPoisonedE8m0 = 0xFF;
constexpr uint32_t kQuietNaNBits = 0x7FC00000u;  // std::numeric_limits<float>::quiet_NaN()
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float quiet_nan() { return __uint_as_float(kQuietNaNBits); }

__device__ __forceinline__ bool is_finite(float v) {
  return (__float_as_uint(v) & 0x7F800000u) != 0x7F800000u;
}

// 2^e exactly, e in [-149, 127] (subnormal below -126), as std::ldexp(1.f, e).
__device__ __forceinline__ float exact_pow2(int e) {
  return e >= -126 ? __uint_as_float(uint32_t(e + 127) << 23) : __uint_as_float(1u << (e + 149));
}

// float -> FP8, round to nearest even with saturation: the same function as taco::float_to_fp8
// (checked on all 2^32 floats, compression/README.md).
template <Fp8Format F>
__device__ __forceinline__ uint32_t to_fp8(float x) {
  return uint32_t(
      __nv_cvt_float_to_fp8(x, __NV_SATFINITE, F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2));
}

__device__ __forceinline__ uint8_t to_fp8(float x, Fp8Format format) {
  return uint8_t(format == Fp8Format::e4m3 ? to_fp8<Fp8Format::e4m3>(x)
                                           : to_fp8<Fp8Format::e5m2>(x));
}

// Two floats -> two FP8 codes in one conversion: lo in bits 0..7, hi in bits 8..15 (the same
// rounding as to_fp8).
template <Fp8Format F>
__device__ __forceinline__ uint32_t to_fp8x2(float lo, float hi) {
  return uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE,
                                           F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2));
}

// Two FP8 codes (bits 0..7 and 8..15 of `pair`) -> two floats through the hardware conversion to
// half, exact for every finite and infinite code; NaN codes give a NaN (its payload is not the
// CPU's: callers compare NaN with NaN).
template <Fp8Format F>
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair & 0xFFFFu),
                                                   F == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2);
  return __half22float2(__half2(h));
}

// max(a, b) of non-negative values; kNan: NaN if either is NaN, else a NaN operand is ignored
// (fmaxf).
template <bool kNan>
__device__ __forceinline__ float max2(float a, float b) {
  if constexpr (!kNan) return fmaxf(a, b);
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// FP8 -> float with the bits of taco::fp8_to_float (NaN codes give sign | 0x7FC00000): the
// hardware conversion to half (exact for every finite and infinite code), widened to float
// (exact), with NaN codes given the CPU's bits.
__device__ __forceinline__ float from_fp8(uint32_t code, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::e4m3;
  const __half_raw h =
      __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), e4m3 ? __NV_E4M3 : __NV_E5M2);
  const uint32_t magnitude = code & 0x7Fu;
  const bool nan = e4m3 ? magnitude == 0x7Fu : magnitude > 0x7Cu;
  return nan ? __uint_as_float(((code & 0x80u) << 24) | 0x7FC00000u) : __half2float(__half(h));
}

// The bits of taco::float_to_bf16 (round to nearest even; a NaN stays a quiet NaN with its
// payload), which differ from __float2bfloat16 on NaN.
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) {
  return __uint_as_float(bits << 16);
}

// std::min / std::max as the CPU writes them (the same operand wins on ties and NaN).
__device__ __forceinline__ float std_max(float a, float b) { return (a < b) ? b : a; }
__device__ __forceinline__ float std_min(float a, float b) { return (b < a) ? b : a; }

// a = clamp(fp8_max / sqrt(ss / n + lambda), 1e-3, 1e3), ss the tree sum of squares.
__device__ __forceinline__ float adaptive_scale(float ss, int n, float target) {
  // ss / n is ss * 2^-k exactly for n = 2^k (both round the same real number)
  const float mean =
      (n & (n - 1)) == 0 ? __fmul_rn(ss, exact_pow2(__clz(n) - 31)) : __fdiv_rn(ss, float(n));
  const float a = __fdiv_rn(target, __fsqrt_rn(__fadd_rn(mean, kLambda)));
  return std_min(std_max(a, kMinAdaptive), kMaxAdaptive);
}

// Smallest k with m <= target * 2^k (m > 0, finite): frexp, as the CPU.
__device__ __forceinline__ int e8m0_exponent(float m, float target) {
  int em, et;
  const float fm = frexpf(m, &em), ft = frexpf(target, &et);
  return em - et + (fm > ft ? 1 : 0);
}

// floor(log2 v) of a normal v: its exponent field less the bias.
__device__ __forceinline__ int exponent_of(float v) {
  return int((__float_as_uint(v) >> 23) & 0xFFu) - 127;
}

__device__ __forceinline__ bool is_normal(float v) {
  const uint32_t e = (__float_as_uint(v) >> 23) & 0xFFu;
  return e != 0 && e != 0xFFu;
}

// A group's quantizer (kernels/cpu/codec_fp8.cpp: make_quantizer, and make_taco_quantizer for
// taco, whose values are the butterflies' outputs u with y = c * u). The mode picks the
// per-element arithmetic once per group, so the element loops carry no tests.
struct Quantizer {
  enum Mode : int {
    kZero,        // q = 0: every code is 0
    kPow2,        // e8m0: code = fp8((y * 2^-k) * 2^-ea)
    kDiv,         // dual/single: code = fp8(y / q) through div_by (q within its bounds)
    kExactDiv,    // the same through __fdiv_rn (q tiny, huge or not finite)
    kMul,         // taco: code = fp8(u * f), f = c * (1 / q) normal
    kScaledDiv,   // taco, f not normal: code = fp8((u * c) / q)
    kScaledPow2,  // taco e8m0, f not normal: code = fp8(((u * c) * 2^-k) * 2^-ea)
  };
  Mode mode;
  float q, rq;      // q and __frcp_rn(q) (kDiv)
  float s_k, s_ea;  // kPow2, kScaledPow2
  int k;            // e8m0: the stored exponent
  float c = 1.f, f = 0.f;

  // The value before the rounding to FP8, in mode kMode.
  template <int kMode>
  __device__ __forceinline__ float scaled(float y) const {
    if constexpr (kMode == kPow2) return __fmul_rn(__fmul_rn(y, s_k), s_ea);
    if constexpr (kMode == kDiv) return div_by(y, q, rq);
    if constexpr (kMode == kMul) return __fmul_rn(y, f);
    if constexpr (kMode == kScaledDiv) return __fdiv_rn(__fmul_rn(y, c), q);
    if constexpr (kMode == kScaledPow2) return __fmul_rn(__fmul_rn(__fmul_rn(y, c), s_k), s_ea);
    return __fdiv_rn(y, q);
  }
};

// The quantizer code = fp8(y / q) (dual, single, fp8_tensor): kZero for q = 0 (or NaN), kDiv
// where q is within div_by's bounds, else kExactDiv.
__device__ __forceinline__ Quantizer quotient_quantizer(float q) {
  Quantizer qz{Quantizer::kZero, q, 0.f, 1.f, 1.f, 0};
  if (q > 0.f) {
    const bool fast = magnitude_within<kQuantizerMinExp, kQuantizerMaxExp>(q);
    qz.mode = fast ? Quantizer::kDiv : Quantizer::kExactDiv;
    if (fast) qz.rq = __frcp_rn(q);
  }
  return qz;
}

// rtarget = 1 / target rounded (m / target through div_by within kScale*Exp).
__device__ __forceinline__ Quantizer make_quantizer(float m, int ea, Fp8Scales scales, float target,
                                                    float rtarget) {
  if (scales != Fp8Scales::e8m0) {
    return quotient_quantizer(magnitude_within<kScaleMinExp, kScaleMaxExp>(m)
                                  ? div_by(m, target, rtarget)
                                  : __fdiv_rn(m, target));
  }
  Quantizer qz{Quantizer::kPow2, 0.f, 0.f, 1.f, 1.f, 0};
  const int kq = m > 0.f ? e8m0_exponent(m, target) : ea;
  qz.k = min(max(kq - ea, -127), 127);
  qz.s_k = exact_pow2(-qz.k);
  qz.s_ea = exact_pow2(-ea);
  return qz;
}

// taco: mu = max|u|, c the factor from u to y (kernels/codec_fp8.h).
__device__ __forceinline__ Quantizer make_taco_quantizer(float mu, float c, int ea,
                                                         Fp8Scales scales, float target,
                                                         float rtarget) {
  Quantizer qz = make_quantizer(__fmul_rn(c, mu), ea, scales, target, rtarget);
  qz.c = c;
  const bool e8m0 = scales == Fp8Scales::e8m0;
  if (e8m0) {
    qz.f = __fmul_rn(__fmul_rn(c, qz.s_k), qz.s_ea);
  } else if (qz.q > 0.f) {
    qz.f = __fmul_rn(c, qz.mode == Quantizer::kDiv ? qz.rq : __frcp_rn(qz.q));
  }
  if (is_normal(qz.f)) {
    qz.mode = Quantizer::kMul;
  } else if (e8m0) {
    qz.mode = Quantizer::kScaledPow2;
  } else {
    qz.mode = qz.q > 0.f ? Quantizer::kScaledDiv : Quantizer::kZero;
  }
  return qz;
}

// --- lane-group reductions (L lanes, aligned to multiples of L within the warp) -------------

// Sum of squares in the CPU's tree order, adjacent partial sums first (kernels/codec_fp8.h),
// over the group (padding beyond n is zero, which leaves the tree's result unchanged: x + 0 = x
// exactly for x >= +0). sq[r] holds the element of register r. Stages h = 1 .. K/2 pair
// registers within each run of K, h = K .. L*K/2 cross lanes on the runs' J = R / K partial sums,
// and h = L*K .. G/2 pair those sums in registers. Every lane of the group ends with the same bits
// (each cross-lane butterfly adds the same two operands on both sides, and fp32 addition
// commutes). Cheaper than the other order in every layout: the cross-lane stages see one value
// per run, not K.
// sq[r] += sq[r + s] for r a multiple of 2s, for s = From, 2 * From, ... below To (constants, so
// the registers stay registers).
template <int From, int To, int R>
__device__ __forceinline__ void pair_stages(float (&sq)[R]) {
  if constexpr (From < To) {
#pragma unroll
    for (int r = 0; r < R; r += 2 * From) sq[r] = __fadd_rn(sq[r], sq[r + From]);
    pair_stages<2 * From, To>(sq);
  }
}

template <int R, int L, int K>
__device__ __forceinline__ float tree_sum(float (&sq)[R]) {
  pair_stages<1, K>(sq);
#pragma unroll
  for (int m = 1; m < L; m *= 2) {
#pragma unroll
    for (int r = 0; r < R; r += K) sq[r] = __fadd_rn(sq[r], __shfl_xor_sync(kFullMask, sq[r], m));
  }
  pair_stages<K, R>(sq);
  return sq[0];
}

// max over the group's L lanes (max2<kNan>).
template <int L, bool kNan = false>
__device__ __forceinline__ float group_max(float m) {
#pragma unroll
  for (int o = L / 2; o >= 1; o /= 2) m = max2<kNan>(m, __shfl_xor_sync(kFullMask, m, o));
  return m;
}

// max |v[r]| over a lane's registers as a tree of 8 chains (max is exact in any order).
template <bool kNan, int R>
__device__ __forceinline__ float lane_max_abs(const float (&v)[R]) {
  constexpr int A = R < 8 ? R : 8;
  float acc[A];
#pragma unroll
  for (int k = 0; k < A; ++k) acc[k] = 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r % A] = max2<kNan>(acc[r % A], fabsf(v[r]));
#pragma unroll
  for (int w = A / 2; w >= 1; w /= 2) {
#pragma unroll
    for (int k = 0; k < w; ++k) acc[k] = max2<kNan>(acc[k], acc[k + w]);
  }
  return acc[0];
}

template <int L>
__device__ __forceinline__ int group_sum(int v) {
#pragma unroll
  for (int o = L / 2; o >= 1; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// In-register butterflies between registers r and r + s, (r & s) == 0, for s = From, 2 * From,
// ... below To (constants, so the registers stay registers).
template <int From, int To, int R>
__device__ __forceinline__ void butterfly_stages(float (&v)[R]) {
  if constexpr (From < To) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if ((r & From) == 0) {
        const float lo = v[r], hi = v[r + From];
        v[r] = __fadd_rn(lo, hi);
        v[r + From] = __fsub_rn(lo, hi);
      }
    }
    butterfly_stages<2 * From, To>(v);
  }
}

// Walsh-Hadamard butterflies over the group, without the 1 / sqrt(G) (kernels/hadamard.h,
// hadamard_butterflies): for h = 1, 2, ..., G/2: (x[i], x[i + h]) <- (x[i] + x[i + h],
// x[i] - x[i + h]). h < K pairs registers r and r + h; K <= h < L*K crosses lanes (mask h / K);
// h >= L*K pairs registers r and r + h / L. `apply` is uniform over the group but not over the
// warp (a short tail group skips the transform), so the shuffles run on every lane and only the
// update is conditional. hadamard_full: every group of the warp full, no per-element test.
// Across lanes the lower partner adds and the upper one subtracts: v * (+-1) + other, one
// rounding, is exactly the CPU's v + other or other - v.
template <int R, int L, int K>
__device__ __forceinline__ void hadamard_full(float (&v)[R], int li) {
  butterfly_stages<1, K>(v);
#pragma unroll
  for (int m = 1; m < L; m *= 2) {
    const float sign = (li & m) != 0 ? -1.f : 1.f;
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = __fmaf_rn(v[r], sign, __shfl_xor_sync(kFullMask, v[r], m));
  }
  butterfly_stages<K, R>(v);
}

template <int R, int L, int K>
__device__ __forceinline__ void hadamard(float (&v)[R], int li, bool apply) {
  if (__all_sync(kFullMask, apply)) {  // the common case
    hadamard_full<R, L, K>(v, li);
    return;
  }
  if (apply) {
    butterfly_stages<1, K>(v);
  }
#pragma unroll
  for (int m = 1; m < L; m *= 2) {
    const bool upper = (li & m) != 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float other = __shfl_xor_sync(kFullMask, v[r], m);
      if (apply) v[r] = upper ? __fsub_rn(other, v[r]) : __fadd_rn(v[r], other);
    }
  }
  if (apply) {
    butterfly_stages<K, R>(v);
  }
}

}  // namespace taco::cuda::codec
