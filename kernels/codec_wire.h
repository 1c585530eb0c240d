// The fixed numbers of a compressed message's wire header (compression/README.md, "Wire format",
// has the table): the one definition that compression/wire_format.cpp writes and reads on the
// host and the device codec kernels (kernels/cuda/codec_fp8_*.cu) write and check on the GPU.
// Plain C++17 and no CUDA headers, since nvcc compiles those kernels as C++17.
//
//   [0, 48)               header, little endian, FNV-1a checksum over bytes 0..43
//   [48, 48 + P)          payload, P = round_up(payload bytes, 16)
//   [48 + P, 48 + P + S)  scales, S = round_up(scale bytes, 16)
#pragma once

#include <cstddef>
#include <cstdint>

namespace taco {

constexpr uint32_t kWireMagic = 0x57434154u;  // the bytes 'T' 'A' 'C' 'W'
constexpr uint16_t kWireVersion = 1;
constexpr size_t kWireHeaderBytes = 48;
constexpr size_t kWireAlign = 16;
constexpr int64_t kMaxWireElements = int64_t(1) << 40;  // rows, cols < 2^31 and rows x cols <= 2^40

// Header byte offsets of each field.
namespace wire_offset {
constexpr size_t magic = 0;        // uint32 kWireMagic
constexpr size_t version = 4;      // uint16 kWireVersion
constexpr size_t codec = 6;        // uint8 CodecKind
constexpr size_t dtype = 7;        // uint8 DType of the encoded input (f32 or bf16)
constexpr size_t format = 8;       // uint8 Fp8Format
constexpr size_t scales = 9;       // uint8 Fp8Scales
constexpr size_t axis = 10;        // uint8 GroupAxis
constexpr size_t reserved8 = 11;   // uint8, 0
constexpr size_t group = 12;       // uint32 G (0 for none and fp8_tensor)
constexpr size_t rows = 16;        // uint32
constexpr size_t cols = 20;        // uint32
constexpr size_t count = 24;       // uint64 rows x cols
constexpr size_t total = 32;       // uint64 header + payload + scales
constexpr size_t reserved32 = 40;  // uint32, 0
constexpr size_t checksum = 44;    // uint32 FNV-1a of the bytes before it
}  // namespace wire_offset

// The header's codec and axis bytes.
enum class CodecKind : uint8_t { none = 0, fp8_tensor = 1, fp8_block = 2, taco = 3 };
enum class GroupAxis : uint8_t { hidden = 0, token = 1 };

// Why a buffer was rejected: read_wire_header's result on the host, the word a device decoder
// writes on the GPU.
enum class WireStatus : uint32_t {
  ok = 0,
  truncated,      // shorter than the header
  bad_magic,      // not a taco message
  bad_version,    // written by another wire-format version
  bad_checksum,   // header bytes changed in transit
  bad_field,      // a header field out of range or inconsistent with the others
  size_mismatch,  // buffer length differs from the header's total_bytes
  wrong_codec,    // encoded by another codec than the receiver expects
  wrong_options,  // same codec, other options (format, group, scales, axis)
  wrong_shape,    // other [rows, cols] than the receiver expects
};

}  // namespace taco
