// The versioned wire format of one compressed message (compression/README.md has the table; the
// fixed numbers and field offsets are kernels/codec_wire.h's, shared with the device kernels).
//
//   [0, 48)                     header (little endian, FNV-1a checksum over bytes 0..43)
//   [48, 48 + P)                payload: one FP8 code per element in row-major order, or the
//                               raw fp32/bf16 values for codec none; P = round_up(bytes, 16)
//   [48 + P, 48 + P + S)        scales, one entry per group (kernels/codec_fp8.h);
//                               S = round_up(bytes, 16)
//
// Every size is a function of the header alone (codec, options, shape, dtype), never of the
// values, so a sender can size buffers before it encodes and a receiver knows exactly how many
// bytes to expect. The header is what a CUDA encoder writes from the host's copy, and what a
// CUDA decoder validates on the device into a WireStatus word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "compression/codec_options.h"
#include "compression/sites.h"
#include "kernels/codec_wire.h"
#include "kernels/dtype.h"

namespace taco {

// A message is a 2-D [rows, cols] array (tokens x hidden); a flat message has rows = 1.
struct MessageShape {
  int64_t rows = 1;
  int64_t cols = 0;
  int64_t count() const { return rows * cols; }
  bool operator==(const MessageShape&) const = default;
};

struct WireHeader {
  uint16_t version = kWireVersion;
  CodecOptions options;      // codec, format, group, scales, axis (canonical)
  DType dtype = DType::f32;  // element type the sender encoded (fp32 or bf16)
  MessageShape shape;
  uint64_t total_bytes = 0;  // header + payload + scales
};

struct WireLayout {
  size_t payload_offset = kWireHeaderBytes;
  size_t payload_bytes = 0;  // unpadded
  size_t scales_offset = 0;
  size_t scales_bytes = 0;  // unpadded
  size_t total_bytes = 0;
};

const char* wire_status_name(WireStatus status);

// The exact layout for a message of `shape` in `dtype` under canonical `options`.
WireLayout wire_layout(const CodecOptions& options, MessageShape shape, DType dtype);

// The kernel's view of an FP8 codec's message (kernels/codec_fp8.h); options not none.
Fp8GroupSpec fp8_group_spec(const CodecOptions& options, MessageShape shape);

// Header for a message; total_bytes filled from wire_layout.
WireHeader make_wire_header(const CodecOptions& options, MessageShape shape, DType dtype);

// Writes kWireHeaderBytes bytes.
void write_wire_header(const WireHeader& header, uint8_t* out);

// Reads and checks a buffer of `size` bytes: magic, version, checksum, field ranges, and that
// `size` equals the header's total. Never reads past `size`. On failure `detail` (when given)
// gets the specifics ("magic 0x00000000, expected 0x57434154").
WireStatus read_wire_header(const uint8_t* in, size_t size, WireHeader* header,
                            std::string* detail = nullptr);

// Where a buffer came from, for the one-line error.
struct WireContext {
  std::optional<Site> site;  // the message's site; none for a bench's or a test's own buffer
  int layer = -1;            // the model layer of a per-layer site, else -1
  int rank = -1;             // -1: the process's error rank (kernels/check.h)
};

// "attn.out.fwd layer 3", "dp.grad", or "?" without a site: how errors name the context.
std::string wire_site(const WireContext& context);

// Throws UserError: "rank R: site S: rejected compressed buffer (N bytes): <status>: <detail>;
// <what to do>", S as wire_site() writes it.
[[noreturn]] void throw_wire_error(WireStatus status, const std::string& detail, size_t size,
                                   const WireContext& context);

}  // namespace taco
