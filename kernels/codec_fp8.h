// FP8 (E4M3, E5M2) conversion and grouped FP8 encode/decode of a message [rows, cols].
//
// Conversion: float -> FP8 rounds to nearest even and saturates to the largest finite value,
// bit for bit as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 / __NV_E5M2) (and the
// sm_89+ instruction cvt.rn.satfinite behind it): |x| above the largest finite value, Inf
// included, becomes +-max; NaN becomes the canonical code 0x7F; |x| <= half the smallest
// subnormal becomes +-0.
//   E4M3: s eeee mmm, bias 7, max 448, no Inf, NaN = s 1111 111, smallest subnormal 2^-9.
//   E5M2: s eeeee mm, bias 15, max 57344, Inf = s 11111 00, NaN = s 11111 {01,10,11}, 2^-16.
//
// Grouping: the message is cut into groups of G elements, either G consecutive elements of a
// row (along hidden) or G consecutive rows of one column (along tokens); the last group of a
// row (column) is shorter when cols (rows) is not a multiple of G. One group per message when
// G = 0 (per-tensor scaling). Codes keep the message's row-major order: code k is element k.
//
// Per group of n values x (all arithmetic fp32, in the order written, so that a CUDA kernel can
// reproduce it bit for bit).
//
// fp8_block (hadamard off), y = x:
//   scales dual:   q = max|y| / fp8_max;  code = fp8(y / q);  stores (q, 1)
//                  decode: x' = (fp8val * q) / a
//   scales single: code as dual; stores q;  decode: x' = fp8val * q
//   scales e8m0:   kq = the smallest integer with max|y| <= fp8_max * 2^kq; k = clamp(kq, -127,
//                  127); code = fp8((y * 2^-k) * 1); stores k + 127;  decode: x' = fp8val * 2^k
//
// taco (hadamard on). In exact arithmetic the codes are those of y = WHT_G(a * x) quantized as
// above, with x' = WHT_G(fp8val * q) / a back; the scalars fold out of the transform (it is
// linear), so that each element sees the butterflies and one multiply:
//   ss = tree_sum(x_i * x_i)                                (pairwise, see below)
//   a  = clamp(fp8_max / sqrt(ss / n + 1e-6), 1e-3, 1e3);   e8m0: a = 2^ea, ea = floor(log2 a)
//   e  = 0 if ss <= 2^64, else floor(log2 a);  x_i = x_i * 2^e when e != 0 (large values are
//        scaled into range before the butterflies: exact, a power of two)
//   u  = BF_G(x) when n == G (a full group), else u = x (a short tail group skips the transform
//        in encode and decode); h = hadamard_scale(G) for a full group, else 1
//   c  = (a * 2^-e) * h          (y = c * u)
//   m  = c * max|u|              (= max|y|: rounding is monotonic)
//   dual / single:  q = m / fp8_max;  f = c * (1 / q) (when q > 0)
//   e8m0:           kq, k as above from m, with k = clamp(kq - ea, -127, 127) (0 for m = 0);
//                   f = (c * 2^-k) * 2^-ea
//   code = fp8(u * f) when f is a normal float; else (tiny groups) fp8((u * c) / q), e8m0
//          fp8(((u * c) * 2^-k) * 2^-ea), and all codes 0 when q = 0
//   stores dual (q, a); single s = q / a; e8m0 k + 127
//   decode: x'_i = BF_G(fp8val)_i * mul with mul = q * (h / a) (dual), s * h (single),
//           2^k * h (e8m0); a tail group: BF skipped, h = 1. Where mul is subnormal, or 0
//           from a non-zero q (s, 2^k) (groups of tiny values), in steps instead:
//           x'_i = ((BF_G(fp8val)_i * q) * h) / a (dual), (BF_G(fp8val)_i * s) * h (single,
//           e8m0 with 2^k)
// BF_G: the butterflies of kernels/hadamard.h without the 1 / sqrt(G); WHT_G = BF_G * h.
// An all-zero group stores q = 0 (e8m0: k = 0) and decodes to zeros. A group holding a NaN or
// Inf is poisoned: codes 0, scales NaN (e8m0: byte 0xFF), and it decodes to NaN everywhere, so a
// non-finite input is never silently zeroed; encode and decode count such groups.
// Finite inputs near FLT_MAX can decode to +-Inf (e8m0: the scale 2^120 times the code 256 is
// 2^128; taco E5M2: codes rounded up by up to an eighth, spread back over the group; any codec:
// values above bf16's largest, decoded to bf16). decode counts those groups too: per group, in
// fp32, with the largest |output| its finite codes can give before the division by a
//   m = (n_t * fp8_max) * |mul| (taco, n_t = n for a full group, else 1; a = 1),
//       fp8_max * |q| (fp8_block, fp8_tensor; a = 1 unless dual),
// where !(m < 2^127 * |a|), and in taco's stepwise path, the group counts when one of its outputs
// in the output type (fp32; bf16; for decode-accumulate, the fp32 value it adds) is NaN or Inf.
// Below 2^127 finite codes give finite outputs in both types, so the check costs nothing on
// ordinary groups. Codes that are NaN or Inf, which no encoder writes (a damaged payload), are not
// looked for.
// taco's sums (the two-shot all-reduce's middle step, Codec::decode_sum_encode) are formed in
// the transform's coefficients. With spec.coefficients set, decode and encode treat every group
// as a tail group (BF_G skipped, h = 1, n_t = 1; ss, a, e and the quantizer as written), so a
// message decodes to its coefficients z = fp8val * mul (mul = q * (1 / a), ...), the p messages'
// z are summed in order, and the sum is encoded with u = z, c = a * 2^-e. The result is an
// ordinary taco message of the summed values. In exact arithmetic it is the message of the
// value-domain sum: WHT is orthonormal and its own inverse, so each decoded x_i = WHT(z_i), the
// sum x = WHT(z), ss(x) = ss(z), and the codes of a * WHT(x) are those of a * z. The p inverse
// transforms and the forward one cancel and none is run: fewer roundings, and no butterflies in
// the sum's kernels.
//
// tree_sum over n values: pad with zeros to P = next power of two >= n, then adjacent partial
// sums first: for (h = 1; h < P; h *= 2) v[i] += v[i + h] for i a multiple of 2h;  result v[0].
// (This order keeps most of a device lane's additions in its registers, kernels/cuda.)
//
// Scale section (little endian, one entry per group, groups numbered row-block-major: along
// hidden g = row * ceil(cols/G) + j; along tokens g = row_block * cols + col):
//   dual: fp32 q[groups], then fp32 a[groups]; single: fp32 s[groups]; e8m0: uint8 k[groups].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/codec_wire.h"
#include "kernels/dtype.h"

namespace taco {

enum class Fp8Format : uint8_t { e4m3 = 0, e5m2 = 1 };

// The largest finite value, also the value a group's largest |y| maps to.
inline float fp8_max(Fp8Format format) { return format == Fp8Format::e4m3 ? 448.f : 57344.f; }

// float -> FP8, round to nearest even, saturating (see the top of this file).
inline uint8_t float_to_fp8(float x, Fp8Format format) {
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
inline float fp8_to_float(uint8_t code, Fp8Format format) {
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

enum class Fp8Scales : uint8_t { dual = 0, single = 1, e8m0 = 2 };

// Bytes of scale per group.
inline size_t fp8_scale_bytes_per_group(Fp8Scales scales) {
  return scales == Fp8Scales::dual ? 8 : scales == Fp8Scales::single ? 4 : 1;
}

// How a message is grouped and scaled (the numbers the kernels need; see the top of this file).
struct Fp8GroupSpec {
  int64_t rows = 1;
  int64_t cols = 0;
  int64_t group = 0;          // G; 0 = one group for the whole message
  bool along_tokens = false;  // groups are G consecutive rows of one column
  bool hadamard = false;      // adaptive scale + Walsh-Hadamard (TACO); needs G a power of two
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scales scales = Fp8Scales::single;
  bool coefficients = false;  // taco: the values are transform coefficients (sums, see above)

  int64_t count() const { return rows * cols; }
  int64_t num_groups() const {
    if (count() == 0) return 0;
    if (group == 0) return 1;
    return along_tokens ? (rows + group - 1) / group * cols : (cols + group - 1) / group * rows;
  }
  size_t scale_bytes() const { return size_t(num_groups()) * fp8_scale_bytes_per_group(scales); }
};

struct Fp8EncodeCounts {
  int64_t nonfinite_values = 0;  // NaN/Inf inputs
  int64_t nonfinite_groups = 0;  // groups poisoned by them (they decode as NaN)
};

namespace cpu {

// x [rows, cols] -> codes [rows * cols] and spec.scale_bytes() bytes of scales.
Fp8EncodeCounts fp8_group_encode(const float* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales);
Fp8EncodeCounts fp8_group_encode(const bf16* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales);

// codes + scales -> out [rows, cols]; `accumulate` adds the decoded fp32 value into out instead
// (out[i] = out[i] + decoded[i], one fp32 add). bf16 output rounds the fp32 value once (RNE).
// Returns the number of groups it decoded to NaN or Inf: the poisoned ones and the overflowing
// ones found by the rule at the top of this file.
int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         float* out, bool accumulate);
int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         bf16* out);

// The two-shot all-reduce's middle step: the `count` messages' codes[i] + scales[i] (all of
// `spec`) decoded and added in index order into `sum` (spec.count() floats, overwritten:
// 0 + m_0 + m_1 + ...), and the sum encoded into out_codes + out_scales. The bytes and sums of
// zeroing `sum`, fp8_group_decode(..., accumulate = true) of each message in turn and
// fp8_group_encode of the sum, but grouped codecs do it a chunk of groups at a time, each chunk
// while its part of the sum is still in cache. Returns the groups the terms decoded to NaN or Inf
// (fp8_group_decode's count, over every term).
int64_t fp8_group_decode_sum_encode(const uint8_t* const* codes, const uint8_t* const* scales,
                                    int count, const Fp8GroupSpec& spec, float* sum,
                                    uint8_t* out_codes, uint8_t* out_scales);

// The loops above run the best of three builds the CPU supports: 0 baseline x86-64 (SSE2),
// 1 AVX2, 2 AVX-512; all give the same bits. Caps the level at `level` (tests check each) and
// returns the level used from now on.
int fp8_codecs_limit_isa(int level);

}  // namespace cpu

// The CUDA side (kernels/cuda/codec_fp8_*.cu), what compression/codec_fp8.cpp calls from
// Codec::encode_async / decode_async for fp8_tensor, fp8_block and taco. Each call writes or reads
// a whole wire message (kernels/codec_wire.h), header included, with the CPU reference's bytes
// (kernels/cuda/codec_fp8_math.cuh says how).
//   encode: one kernel reads x once (16-byte loads) and writes header, padding, codes and scales;
//           fp8_tensor needs the absmax of the whole message first, so it runs two (absmax, then
//           codes) after a 16-byte memset of the scale section it uses as scratch.
//   decode: one kernel checks the header on the device (the CPU's checks, in the CPU's order;
//           a rejection sets *status and leaves `out` untouched) and writes or accumulates out.
namespace cuda {

// A message as the kernels see it (host-built by compression/codec_fp8.cpp from the codec and
// the shape).
struct Fp8DeviceMessage {
  Fp8GroupSpec spec;
  uint8_t kind = 0;                       // CodecKind of the codec
  uint8_t axis = 0;                       // GroupAxis of the codec
  uint32_t group = 0;                     // the header's group field
  uint8_t header[kWireHeaderBytes] = {};  // encode: the header to write (the input's dtype)
  uint64_t payload_bytes = 0;             // at offset kWireHeaderBytes
  uint64_t scales_offset = 0, scales_bytes = 0, total_bytes = 0;
};

// x: device fp32 or bf16 [rows, cols]; out: device, total_bytes. `nonfinite_groups` (device
// int64, may be null) gets the number of poisoned groups added.
void fp8_encode_device(const void* x, DType dtype, const Fp8DeviceMessage& message, uint8_t* out,
                       Stream stream, int64_t* nonfinite_groups);

// in: device, `size` bytes; out: device fp32 or bf16 (accumulate: fp32, out += decoded).
// `status` (device uint32): a rejection writes its WireStatus there unless a non-zero status is
// already there. `nonfinite_groups` (device int64, may be null): groups decoded to NaN or Inf are
// added (the count of cpu::fp8_group_decode).
void fp8_decode_device(const uint8_t* in, size_t size, const Fp8DeviceMessage& message, void* out,
                       DType out_dtype, bool accumulate, Stream stream, uint32_t* status,
                       int64_t* nonfinite_groups);

// The two-shot all-reduce's middle step: the `count` messages at in + i * slot (`size` bytes
// each, all of `message`'s layout) decoded, summed in fp32 in index order (taco: its
// coefficients, above) and encoded as an fp32 message (`message` built for DType::f32) into out.
// Grouped codecs: one kernel, every header checked by every block; fp8_tensor: decode-accumulate
// into `scratch` (count() floats), then encode. `status`, `nonfinite_groups` (groups decoded to NaN
// or Inf): as fp8_decode_device.
void fp8_decode_sum_encode_device(const uint8_t* in, size_t slot, int count, size_t size,
                                  const Fp8DeviceMessage& message, uint8_t* out, float* scratch,
                                  Stream stream, uint32_t* status, int64_t* nonfinite_groups);

// A measured call's self-check in one pass (codec_fp8_check.cu): `in` (`size` bytes, an
// encoding of x, device fp32 or bf16 of message.spec's shape) decoded in registers to the values
// fp8_decode_device writes as `decoded_dtype`, and kernels/roundtrip_error.h's three sums of x
// against them added into `sums` (device double[3]). `status`: as fp8_decode_device. Returns
// false, queueing nothing, for fp8_tensor (no grouped kernel): its caller decodes and sums apart.
bool fp8_decode_error_device(const uint8_t* in, size_t size, const Fp8DeviceMessage& message,
                             const void* x, DType x_dtype, DType decoded_dtype, double* sums,
                             Stream stream, uint32_t* status);

}  // namespace cuda
}  // namespace taco
