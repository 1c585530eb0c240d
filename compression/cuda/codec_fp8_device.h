// The CUDA side of the grouped FP8 codecs (fp8_tensor, fp8_block, taco): what
// compression/codec_fp8.cpp calls from Codec::encode_async / decode_async. No CUDA headers, and
// C++17 (nvcc compiles the .cu files as C++17, so this cannot include wire_format.h: the few
// wire-format numbers the kernels need are mirrored here and static_assert-ed equal in
// codec_fp8.cpp).
//
//   encode: one kernel reads x once (16-byte loads) and writes header, padding, codes and scales;
//           fp8_tensor needs the absmax of the whole message first, so it runs two (absmax, then
//           codes) after a 16-byte memset of the scale section it uses as scratch.
//   decode: one kernel checks the header on the device (the CPU's checks, in the CPU's order;
//           a rejection sets *status and leaves `out` untouched) and writes or accumulates out.
// Bytes are identical to the CPU reference's (kernels/cpu/codec_fp8.cpp); see fp8_math.cuh.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_fp8.h"
#include "kernels/dtype.h"

namespace taco::cuda {

// compression/wire_format.h, mirrored.
namespace wire {
constexpr uint32_t kMagic = 0x57434154u;
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;
constexpr int64_t kMaxElements = int64_t(1) << 40;
// WireStatus values.
enum Status : uint32_t {
  ok = 0,
  truncated,
  bad_magic,
  bad_version,
  bad_checksum,
  bad_field,
  size_mismatch,
  wrong_codec,
  wrong_options,
  wrong_shape,
};
// CodecKind values.
constexpr uint8_t kKindNone = 0, kKindFp8Tensor = 1, kKindFp8Block = 2, kKindTaco = 3;
}  // namespace wire

// A message as the kernels see it (host-built by codec_fp8.cpp from the codec and the shape).
struct Fp8DeviceMessage {
  Fp8GroupSpec spec;
  uint8_t kind = 0;                         // CodecKind of the codec
  uint8_t axis = 0;                         // GroupAxis of the codec
  uint32_t group = 0;                       // the header's group field
  uint8_t header[wire::kHeaderBytes] = {};  // encode: the header to write (the input's dtype)
  uint64_t payload_bytes = 0;               // at offset 48
  uint64_t scales_offset = 0, scales_bytes = 0, total_bytes = 0;
};

// x: device fp32 or bf16 [rows, cols]; out: device, total_bytes. `nonfinite_groups` (device
// int64, may be null) gets the number of poisoned groups added.
void fp8_encode_device(const void* x, DType dtype, const Fp8DeviceMessage& message, uint8_t* out,
                       Stream stream, int64_t* nonfinite_groups);

// in: device, `size` bytes; out: device fp32 or bf16 (accumulate: fp32, out += decoded).
// `status` (device uint32): a rejection writes its WireStatus there unless a non-zero status is
// already there. `nonfinite_groups` (device int64, may be null): groups decoded to NaN or Inf are
// added (kernels/codec_fp8.h's count).
void fp8_decode_device(const uint8_t* in, size_t size, const Fp8DeviceMessage& message, void* out,
                       DType out_dtype, bool accumulate, Stream stream, uint32_t* status,
                       int64_t* nonfinite_groups);

// The two-shot all-reduce's middle step: the `count` messages at in + i * slot (`size` bytes
// each, all of `message`'s layout) decoded, summed in fp32 in index order and encoded as an
// fp32 message (`message` built for DType::f32) into out. Grouped codecs: one kernel, every
// header checked by every block; fp8_tensor: decode-accumulate into `scratch` (count() floats),
// then encode. `status`, `nonfinite_groups` (groups decoded to NaN or Inf): as
// fp8_decode_device.
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

}  // namespace taco::cuda
