// Device arithmetic of the grouped FP8 codecs, step for step the CPU reference's
// (kernels/cpu/codec_fp8.cpp, kernels/codec_fp8.h), so that the bytes match bit for bit.
//
// Every fp32 operation on a value that reaches the wire is an explicit round-to-nearest
// intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn): nvcc would otherwise contract a
// multiply and the following add into one FMA (one rounding instead of the CPU's two), and
// --use_fast_math would turn divisions into approximations.
//
// A group of G values lives in the registers of L = G / R lanes of one warp: lane li holds the
// R consecutive group elements li * R .. li * R + R - 1. The butterflies of the Walsh-Hadamard
// transform (ascending h, as in kernels/hadamard.h) and the sum of squares (descending h, the
// CPU's tree_sum) run in registers for h < R and across lanes with __shfl_xor_sync for h >= R.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/codec_fp8.h"

namespace taco::cuda::codec {

constexpr float kLambda = 1e-6f;  // kernels/cpu/codec_fp8.cpp: the same constants
constexpr float kMinAdaptive = 1e-3f;
constexpr float kMaxAdaptive = 1e3f;
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
__device__ __forceinline__ uint8_t to_fp8(float x, Fp8Format format) {
  return format == Fp8Format::e4m3 ? uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3))
                                   : uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2));
}

// FP8 -> float with the bits of taco::fp8_to_float (NaN codes give sign | 0x7FC00000).
__device__ __forceinline__ float from_fp8(uint32_t code, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::e4m3;
  const uint32_t man_bits = e4m3 ? 3u : 2u;
  const uint32_t bias = e4m3 ? 7u : 15u;
  const uint32_t e = (code & 0x7Fu) >> man_bits;
  const uint32_t m = code & ((1u << man_bits) - 1u);
  const uint32_t sign = (code & 0x80u) << 24;
  uint32_t bits;
  if (e4m3 && e == 15u && m == 7u) {
    bits = sign | 0x7FC00000u;
  } else if (!e4m3 && e == 31u) {
    bits = sign | (m ? 0x7FC00000u : 0x7F800000u);
  } else if (e == 0) {  // subnormal: m * 2^(1 - bias - man_bits), exact
    bits = __float_as_uint(__fmul_rn(float(m), e4m3 ? 0x1p-9f : 0x1p-16f)) | sign;
  } else {
    bits = sign | ((e - bias + 127u) << 23) | (m << (23u - man_bits));
  }
  return __uint_as_float(bits);
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
  const float a = __fdiv_rn(target, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(n)), kLambda)));
  return std_min(std_max(a, kMinAdaptive), kMaxAdaptive);
}

// Smallest k with m <= target * 2^k (m > 0, finite): frexp, as the CPU.
__device__ __forceinline__ int e8m0_exponent(float m, float target) {
  int em, et;
  const float fm = frexpf(m, &em), ft = frexpf(target, &et);
  return em - et + (fm > ft ? 1 : 0);
}

// A group's quantizer (kernels/cpu/codec_fp8.cpp, make_quantizer), given m = max|y| and the
// exponent ea of the power-of-two adaptive scale already applied (e8m0 only).
struct Quantizer {
  bool pow2;
  float q;          // dual/single: code = fp8(y / q)
  float s_k, s_ea;  // e8m0: code = fp8((y * 2^-k) * 2^-ea)
  int k;            // e8m0: the stored exponent

  __device__ __forceinline__ uint8_t operator()(float y, Fp8Format format) const {
    if (pow2) return to_fp8(__fmul_rn(__fmul_rn(y, s_k), s_ea), format);
    return q > 0.f ? to_fp8(__fdiv_rn(y, q), format) : uint8_t(0);
  }
};

__device__ __forceinline__ Quantizer make_quantizer(float m, int ea, Fp8Scales scales,
                                                    float target) {
  Quantizer qz{false, 0.f, 1.f, 1.f, 0};
  if (scales != Fp8Scales::e8m0) {
    qz.q = __fdiv_rn(m, target);
    return qz;
  }
  qz.pow2 = true;
  const int kq = m > 0.f ? e8m0_exponent(m, target) : ea;
  qz.k = min(max(kq - ea, -127), 127);
  qz.s_k = exact_pow2(-qz.k);
  qz.s_ea = exact_pow2(-ea);
  return qz;
}

// --- lane-group reductions (L lanes, aligned to multiples of L within the warp) -------------

// Sum of squares in the CPU's tree order over the group (padding beyond n is zero, which leaves
// the tree's result unchanged: x + 0 = x exactly for x >= +0). sq[r] holds element li * R + r.
// Cross-lane stages h = G/2 .. R first, then in-register stages h = R/2 .. 1; every lane of
// the group ends with the same bits (each butterfly adds the same two operands on both sides).
template <int R, int L>
__device__ __forceinline__ float tree_sum(float (&sq)[R]) {
#pragma unroll
  for (int m = L / 2; m >= 1; m /= 2) {
#pragma unroll
    for (int r = 0; r < R; ++r) sq[r] = __fadd_rn(sq[r], __shfl_xor_sync(kFullMask, sq[r], m));
  }
#pragma unroll
  for (int h = R / 2; h >= 1; h /= 2) {
#pragma unroll
    for (int r = 0; r < h; ++r) sq[r] = __fadd_rn(sq[r], sq[r + h]);
  }
  return sq[0];
}

template <int L>
__device__ __forceinline__ float group_max(float m) {
#pragma unroll
  for (int o = L / 2; o >= 1; o /= 2) m = fmaxf(m, __shfl_xor_sync(kFullMask, m, o));
  return m;
}

template <int L>
__device__ __forceinline__ int group_sum(int v) {
#pragma unroll
  for (int o = L / 2; o >= 1; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Walsh-Hadamard butterflies over the group, then one multiply by `scale` (kernels/hadamard.h):
// for h = 1, 2, ..., G/2: (x[i], x[i + h]) <- (x[i] + x[i + h], x[i] - x[i + h]). `apply` is
// uniform over the group but not over the warp (a short tail group skips the transform), so
// the shuffles run on every lane and only the update is conditional.
template <int R, int L>
__device__ __forceinline__ void hadamard(float (&v)[R], int li, bool apply, float scale) {
  if (apply) {
#pragma unroll
    for (int h = 1; h < R; h *= 2) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if ((r & h) == 0) {
          const float lo = v[r], hi = v[r + h];
          v[r] = __fadd_rn(lo, hi);
          v[r + h] = __fsub_rn(lo, hi);
        }
      }
    }
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
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = __fmul_rn(v[r], scale);
  }
}

}  // namespace taco::cuda::codec
