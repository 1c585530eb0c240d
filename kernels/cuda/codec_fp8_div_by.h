// Division by a per-group value without a division per element, bit for bit the correctly
// rounded quotient, and the bounds within which the device codecs use it. Host and device: the
// device kernels (codec_fp8_math.cuh) call it, and tests/unit/test_div_by.cpp checks the arithmetic
// on the CPU against IEEE division.
//
// div_by(y, d, rd) with rd = 1 / d rounded to nearest: z = y * rd, then twice z -= (d * z - y) *
// rd, each remainder d * z - y exact in one FMA. This is the sequence of CUDA's own correctly
// rounded division after its reciprocal (Markstein's corrections: a faithful z and a correctly
// rounded reciprocal give the correctly rounded quotient). It holds while the remainders do not
// underflow and nothing overflows: d normal and the exponents of d and y / d summing to at least
// -103. Writing the correction as z - (d * z - y) * rd keeps the sign of a zero y for d > 0 (the
// textbook z + (y - d * z) * rd turns -0 into +0; for d < 0 a zero quotient comes out +0), so
// the codecs use it for positive divisors only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TACO_DIV_HD __host__ __device__ __forceinline__
#else
#define TACO_DIV_HD inline
#endif

namespace taco::cuda::codec {

TACO_DIV_HD float div_by(float y, float d, float rd) {
#ifdef __CUDA_ARCH__
  float z = __fmul_rn(y, rd);
  float n = __fmaf_rn(d, z, -y);
  z = __fmaf_rn(-n, rd, z);
  n = __fmaf_rn(d, z, -y);
  return __fmaf_rn(-n, rd, z);
#else
  float z = y * rd;
  float n = std::fma(d, z, -y);
  z = std::fma(-n, rd, z);
  n = std::fma(d, z, -y);
  return std::fma(-n, rd, z);
#endif
}

// |x| is within [2^kLo, 2^kHi] (normal, finite; false for NaN).
template <int kLo, int kHi>
TACO_DIV_HD bool magnitude_within(float x) {
  static_assert(kLo > -126 && kHi < 128 && kLo < kHi, "normal bounds");
#ifdef __CUDA_ARCH__
  const uint32_t u = __float_as_uint(x) & 0x7FFFFFFFu;
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0x7FFFFFFFu;
#endif
  constexpr uint32_t lo = uint32_t(kLo + 127) << 23, hi = uint32_t(kHi + 127) << 23;
  return u - lo <= hi - lo;
}

// The quantizer's y / q, |y| <= m = fp8_max * q: for q in [2^-85, 2^120] the remainders are exact
// wherever the quotient reaches FP8's smallest rounding boundary (2^-17, e5m2's half subnormal),
// and below it every code is a signed zero whichever way the last bit falls.
constexpr int kQuantizerMinExp = -85, kQuantizerMaxExp = 120;

// q = m / fp8_max (fp8_max 448 or 57344) for m in [2^-90, 2^120].
constexpr int kScaleMinExp = -90, kScaleMaxExp = 120;

// fp8_block's dual decode x / a (taco's decode multiplies): with a in [2^-10, 2^10] (the encoder's
// 1e-3 .. 1e3) and q in [2^-47, 2^60] every non-zero |x| lies in [2^-86, 2^78] (a non-zero e4m3
// code is at least 2^-9, so every term code * q, and every non-zero Hadamard sum of them, is a
// multiple of an ulp no smaller than q 2^-34; the Hadamard scale is above 2^-5), where the
// remainders are exact.
constexpr int kDecodeAMinExp = -10, kDecodeAMaxExp = 10;
constexpr int kDecodeQMinExp = -47, kDecodeQMaxExp = 60;

// Unsigned 32-bit n / d for a divisor fixed per launch (the tile index over tiles per row):
// multiply-high by a magic number, add, shift (Granlund and Montgomery), exact for every n and
// every d in [1, 2^31].
struct DivideU32 {
  uint32_t magic = 1;
  uint32_t shift = 0;
};

inline DivideU32 divide_u32(uint32_t d) {
  DivideU32 r;
  while ((uint64_t(1) << r.shift) < d) ++r.shift;  // ceil(log2 d)
  r.magic = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << r.shift) - d)) / d + 1);
  return r;
}

TACO_DIV_HD uint32_t divide(uint32_t n, DivideU32 d) {
#ifdef __CUDA_ARCH__
  const uint64_t hi = __umulhi(n, d.magic);
#else
  const uint64_t hi = (uint64_t(n) * d.magic) >> 32;
#endif
  return uint32_t((hi + n) >> d.shift);
}

}  // namespace taco::cuda::codec
