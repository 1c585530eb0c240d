// TEST ONLY: the original scalar CPU FP8 codecs (codec_fp8_reference.cpp says why they are kept).
// Same signatures and meaning as taco::cpu::fp8_group_encode / fp8_group_decode in
// kernels/codec_fp8.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/codec_fp8.h"

namespace taco::cpu::reference {

// The conversions of kernels/codec_fp8.h as they were (copies, see the .cpp).
// float -> FP8, round to nearest even, saturating (see the top of this file).
inline uint8_t reference_float_to_fp8(float x, Fp8Format format) {
  uint32_t xbits;
  std::memcpy(&xbits, &x, 4);
  const bool e4m3 = format == Fp8Format::e4m3;
  const uint32_t sig_bits = e4m3 ? 4u : 3u;  // significand bits with the implicit one
  const uint32_t mantissa_mask = e4m3 ? 0x7u : 0x3u;
  const uint32_t bias = e4m3 ? 7u : 15u;
  const uint32_t min_denorm_half = e4m3 ? 0x3A800000u : 0x37000000u;  // 2^-10, 2^-17
  const uint32_t overflow = e4m3 ? 0x43E80000u : 0x476FFFFFu;  // 464 = max + ulp/2; 61440 - 1ulp
  const uint32_t min_norm = e4m3 ? 0x3C800000u : 0x38800000u;  // 2^-6, 2^-14
  const uint32_t max_norm = e4m3 ? 0x7Eu : 0x7Bu;
  const uint32_t half_ulp = 1u << (24u - sig_bits - 1u);  // half an FP8 ulp in float mantissa bits

  const uint32_t absx = xbits & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) return 0x7F;  // NaN: canonical, sign dropped (as CUDA does)
  const uint32_t sign = (xbits >> 24) & 0x80u;
  const uint32_t exp = (((xbits >> 23) & 0xFFu) - 127u + bias) & 0xFFu;
  uint32_t mantissa = (xbits >> (24u - sig_bits)) & mantissa_mask;
  uint32_t res;
  if (absx <= min_denorm_half) {
    res = 0;
  } else if (absx > overflow) {
    res = max_norm;
  } else if (absx >= min_norm) {
    res = (exp << (sig_bits - 1u)) | mantissa;
    const uint32_t round = xbits & ((half_ulp << 1) - 1u);
    // Round to nearest even, written without a branch (the rounding bits are random data).
    res += uint32_t(round > half_ulp) | (uint32_t(round == half_ulp) & mantissa & 1u);
  } else {  // FP8 subnormal
    const uint32_t shift = (1u - exp) & 0xFFu;
    mantissa |= 1u << (sig_bits - 1u);
    res = mantissa >> shift;
    const uint32_t round = (xbits | (1u << 23)) & ((half_ulp << (shift + 1u)) - 1u);
    const uint32_t half = half_ulp << shift;
    res += uint32_t(round > half) | (uint32_t(round == half) & res & 1u);
  }
  return uint8_t(res | sign);
}

// FP8 -> float, exact (every FP8 value is a float); NaN codes give a quiet NaN, E5M2 Inf gives Inf.
inline float reference_fp8_to_float(uint8_t code, Fp8Format format) {
  const bool e4m3 = format == Fp8Format::e4m3;
  const uint32_t man_bits = e4m3 ? 3u : 2u;
  const uint32_t bias = e4m3 ? 7u : 15u;
  const uint32_t e = (code & 0x7Fu) >> man_bits;
  const uint32_t m = code & ((1u << man_bits) - 1u);
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  uint32_t bits;
  if (e4m3 && e == 15u && m == 7u) {
    bits = sign | 0x7FC00000u;
  } else if (!e4m3 && e == 31u) {
    bits = sign | (m ? 0x7FC00000u : 0x7F800000u);
  } else if (e == 0) {  // subnormal: m * 2^(1 - bias - man_bits)
    float v = float(m) * (e4m3 ? 0x1p-9f : 0x1p-16f);
    return sign ? -v : v;
  } else {
    bits = sign | ((e - bias + 127u) << 23) | (m << (23u - man_bits));
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Fp8EncodeCounts fp8_group_encode(const float* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales);
Fp8EncodeCounts fp8_group_encode(const bf16* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales);
int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         float* out, bool accumulate);
int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         bf16* out);

}  // namespace taco::cpu::reference
