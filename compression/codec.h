// Codec: turns a message [rows, cols] of fp32 or bf16 into a self-describing byte buffer
// (compression/wire_format.h) and back. The compressed collectives (parallel/) are written
// against this interface only.
//
//   encode             x -> buffer of exactly max_encoded_size(shape, dtype) bytes
//   decode             buffer -> out (fp32 or bf16)
//   decode_accumulate  buffer -> out[i] = out[i] + decoded[i] (fp32), for reduce-scatter sums
//
// Decode checks the header (magic, version, checksum, fields), the exact buffer size, and that
// the codec, options and shape are the ones this receiver expects; any mismatch throws
// taco::UserError naming the site and rank. It never reads outside [in, in + size).
//
// Non-finite inputs: a group (kernels/codec_fp8.h) holding a NaN or Inf decodes as NaN in every
// element, never as zeros; encode reports how many values and groups were affected, decode how
// many groups it turned into NaN, and how many finite ones it decoded to Inf (values near
// FLT_MAX, kernels/codec_fp8.h). Codec none passes values through unchanged.
//
// The host methods below are the CPU reference. A CUDA build adds the *_async methods, which
// take device pointers and a stream and produce and accept the very same bytes; their header
// checks run on the device and report a WireStatus through a device word that the caller turns
// into the same error with throw_wire_error after it synchronizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compression/codec_options.h"
#include "compression/wire_format.h"
#include "kernels/dtype.h"

namespace taco {

struct EncodeResult {
  size_t bytes = 0;              // bytes written, always max_encoded_size(shape, dtype)
  int64_t nonfinite_values = 0;  // NaN/Inf inputs
  int64_t nonfinite_groups = 0;  // groups that will decode as NaN
};

struct DecodeResult {
  int64_t nonfinite_groups = 0;  // groups decoded to NaN (the sender saw NaN/Inf) or to Inf
};

class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  const CodecOptions& options() const { return options_; }
  std::string name() const { return describe(options_); }

  // The exact encoded size (header + payload + scales): encode writes precisely this many bytes.
  // It depends on the options, the shape and the input dtype only, never on the values.
  size_t max_encoded_size(MessageShape shape, DType input) const;

  // `capacity` must be at least max_encoded_size (a smaller buffer is a bug: taco::Error).
  EncodeResult encode(const float* x, MessageShape shape, uint8_t* out, size_t capacity) const;
  EncodeResult encode(const bf16* x, MessageShape shape, uint8_t* out, size_t capacity) const;

  // `shape` is what the receiver expects (its output holds shape.count() elements).
  DecodeResult decode(const uint8_t* in, size_t size, MessageShape shape, float* out,
                      const WireContext& context) const;
  DecodeResult decode(const uint8_t* in, size_t size, MessageShape shape, bf16* out,
                      const WireContext& context) const;
  DecodeResult decode_accumulate(const uint8_t* in, size_t size, MessageShape shape, float* out,
                                 const WireContext& context) const;

  // The middle step of the two-shot all-reduce (decode_sum_encode_async's bytes, on the host):
  // the `count` messages at in + i * slot (each exactly `size` bytes, all of `shape`) checked as
  // decode checks them, decoded and summed in fp32 in index order into `sum` (shape.count()
  // floats, overwritten: 0 + m_0 + m_1 + ...), and the sum encoded into `out` as an fp32 message
  // (max_encoded_size(shape, DType::f32) bytes; `capacity` at least that). taco sums its
  // transform's coefficients, so `sum` holds those and not values (kernels/codec_fp8.h: the same
  // sum, without the transforms); the others sum values, as decode_accumulate then encode.
  // Returns the groups decoded to NaN or Inf from the inputs.
  DecodeResult decode_sum_encode(const uint8_t* in, size_t slot, int count, size_t size,
                                 MessageShape shape, float* sum, uint8_t* out, size_t capacity,
                                 const WireContext& context) const;

  // Checks a buffer as decode does and returns its header; throws the same UserError.
  WireHeader check(const uint8_t* in, size_t size, MessageShape shape,
                   const WireContext& context) const;

  // --- device memory (CUDA builds; this build has none and these throw UserError) ---
  virtual bool has_device_path() const { return false; }
  // `nonfinite_groups`: device int64 the kernel adds its count into.
  virtual void encode_async(const void* x, DType dtype, MessageShape shape, uint8_t* out,
                            Stream stream, int64_t* nonfinite_groups) const;
  // `status`: device word (zeroed by the caller) set to a non-zero WireStatus when the header is
  // rejected; a non-zero word is left as it is. `nonfinite_groups`: device int64 (may be null)
  // the kernel adds the number of groups it decoded to NaN or Inf into (as decode counts them).
  // Wire buffers (`out` of
  // encode_async, `in` here) must be 16-byte aligned, as cudaMalloc's are.
  virtual void decode_async(const uint8_t* in, size_t size, MessageShape shape, void* out,
                            DType out_dtype, bool accumulate, Stream stream, uint32_t* status,
                            int64_t* nonfinite_groups = nullptr) const;

  // The middle step of the two-shot all-reduce on the device: the `count` messages at
  // in + i * slot (each exactly `size` bytes, all of `shape`) are checked and decoded, summed in
  // fp32 in index order (0 + m_0 + m_1 + ...), and the sum is encoded into `out` as an fp32
  // message (max_encoded_size(shape, DType::f32) bytes): the bytes of decode_sum_encode on the
  // host (taco: the sum of its coefficients). Grouped codecs do it in one
  // kernel; fp8_tensor (one scale for the whole sum) goes through `scratch`, shape.count()
  // device floats, which the grouped codecs leave alone. `status`, `nonfinite_groups`: as
  // decode_async (groups decoded to NaN or Inf from the inputs). `slot` and `in` 16-byte
  // aligned.
  virtual void decode_sum_encode_async(const uint8_t* in, size_t slot, int count, size_t size,
                                       MessageShape shape, uint8_t* out, float* scratch,
                                       Stream stream, uint32_t* status,
                                       int64_t* nonfinite_groups = nullptr) const;

  // The self-check of a measured call in one pass: `in` (this rank's own encoding of x, `size`
  // bytes, all of `shape`) decoded as decode_async would write it in `decoded_dtype`, and the
  // round-trip error sums of kernels/roundtrip_error.h (error^2, signal^2, non-finite inputs)
  // of x (`x_dtype`) against those values added into `sums` (device double[3]), the decoded
  // values never written to memory. `status`: as decode_async. Returns false, queueing
  // nothing, where the codec has no such kernel (the base; fp8_tensor): then the caller decodes
  // into a buffer and sums apart.
  virtual bool decode_error_sums_async(const uint8_t* in, size_t size, MessageShape shape,
                                       const void* x, DType x_dtype, DType decoded_dtype,
                                       double* sums, Stream stream, uint32_t* status) const;

  // After a decode_async whose status word came back non-zero: throws the UserError the host
  // decoder would have thrown for this buffer. `header` is a host copy of its first
  // min(size, 48) bytes; `size` the buffer's full length.
  [[noreturn]] void throw_device_wire_error(uint32_t status, const uint8_t* header, size_t size,
                                            MessageShape shape, const WireContext& context) const;

 protected:
  explicit Codec(CodecOptions options) : options_(options) {}

  // Payload and scales of a message whose header and layout the base class has made; `out` is
  // the start of the message. Returns the non-finite counts (bytes is filled by the base).
  virtual EncodeResult encode_body(const void* x, DType dtype, const WireHeader& header,
                                   const WireLayout& layout, uint8_t* out) const = 0;
  // Decodes a checked message into `out` (fp32 or bf16); returns the groups decoded to NaN or
  // Inf (kernels/codec_fp8.h).
  virtual int64_t decode_body(const uint8_t* in, const WireHeader& header, const WireLayout& layout,
                              void* out, DType out_dtype, bool accumulate) const = 0;
  // decode_sum_encode's work once every term is checked and the sum's header and padding are
  // written: each term (a checked message, its layout) added into `sum` in order (0 + m_0 +
  // m_1 + ..., in the domain the codec sums in), and the sum's payload and scales written as
  // encode_body writes an fp32 message. Returns the groups the terms decoded to NaN or Inf. The
  // base: decode_body accumulating, term by term, then encode_body.
  struct SumTerm {
    const uint8_t* message;
    WireHeader header;
    WireLayout layout;
  };
  virtual int64_t sum_body(const std::vector<SumTerm>& terms, float* sum, const WireHeader& header,
                           const WireLayout& layout, uint8_t* out) const;

 private:
  // A message's header and zeroed padding written into `out` (capacity checked); its header and
  // layout, for the body.
  std::pair<WireHeader, WireLayout> begin_message(DType dtype, MessageShape shape, uint8_t* out,
                                                  size_t capacity) const;
  EncodeResult encode_any(const void* x, DType dtype, MessageShape shape, uint8_t* out,
                          size_t capacity) const;
  DecodeResult decode_any(const uint8_t* in, size_t size, MessageShape shape, void* out,
                          DType out_dtype, bool accumulate, const WireContext& context) const;

  CodecOptions options_;
};

// Builds the codec for canonical, validated options with a concrete group (not auto): a bad
// option set is a bug in the caller (taco::Error); config input goes through CompressionPolicy
// first (compression/policy.h).
std::unique_ptr<Codec> make_codec(const CodecOptions& options);

}  // namespace taco
