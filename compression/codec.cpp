#include "compression/codec.h"

#include <algorithm>
#include <cstring>

#include "compression/codec_impl.h"
#include "kernels/check.h"

namespace taco {

size_t Codec::max_encoded_size(MessageShape shape, DType input) const {
  return wire_layout(options_, shape, input).total_bytes;
}

EncodeResult Codec::encode(const float* x, MessageShape shape, uint8_t* out,
                           size_t capacity) const {
  return encode_any(x, DType::f32, shape, out, capacity);
}

EncodeResult Codec::encode(const bf16* x, MessageShape shape, uint8_t* out, size_t capacity) const {
  return encode_any(x, DType::bf16, shape, out, capacity);
}

std::pair<WireHeader, WireLayout> Codec::begin_message(DType dtype, MessageShape shape,
                                                       uint8_t* out, size_t capacity) const {
  const WireHeader header = make_wire_header(options_, shape, dtype);
  const WireLayout layout = wire_layout(options_, shape, dtype);
  TACO_CHECK(capacity >= layout.total_bytes, "encode buffer of " + std::to_string(capacity) +
                                                 " bytes, " + name() + " needs " +
                                                 std::to_string(layout.total_bytes));
  write_wire_header(header, out);
  // Padding after payload and scales is zero, so equal inputs give byte-identical messages.
  std::memset(out + layout.payload_offset + layout.payload_bytes, 0,
              layout.scales_offset - layout.payload_offset - layout.payload_bytes);
  std::memset(out + layout.scales_offset + layout.scales_bytes, 0,
              layout.total_bytes - layout.scales_offset - layout.scales_bytes);
  return {header, layout};
}

EncodeResult Codec::encode_any(const void* x, DType dtype, MessageShape shape, uint8_t* out,
                               size_t capacity) const {
  const auto [header, layout] = begin_message(dtype, shape, out, capacity);
  EncodeResult r = encode_body(x, dtype, header, layout, out);
  r.bytes = layout.total_bytes;
  return r;
}

DecodeResult Codec::decode_sum_encode(const uint8_t* in, size_t slot, int count, size_t size,
                                      MessageShape shape, float* sum, uint8_t* out, size_t capacity,
                                      const WireContext& context) const {
  TACO_CHECK(count >= 1 && (count == 1 || slot >= size),
             "decode_sum_encode: at least one message, in slots no shorter than it");
  std::vector<SumTerm> terms;
  terms.reserve(size_t(count));
  for (int i = 0; i < count; ++i) {  // every term checked before anything is written
    const uint8_t* message = in + size_t(i) * slot;
    const WireHeader h = check(message, size, shape, context);
    terms.push_back({message, h, wire_layout(h.options, h.shape, h.dtype)});
  }
  const auto [header, layout] = begin_message(DType::f32, shape, out, capacity);
  DecodeResult r;
  r.nonfinite_groups = sum_body(terms, sum, header, layout, out);
  return r;
}

int64_t Codec::sum_body(const std::vector<SumTerm>& terms, float* sum, const WireHeader& header,
                        const WireLayout& layout, uint8_t* out) const {
  std::fill(sum, sum + header.shape.count(), 0.f);
  int64_t counted = 0;
  for (const SumTerm& t : terms) {
    counted += decode_body(t.message, t.header, t.layout, sum, DType::f32,
                           /*accumulate=*/true);
  }
  encode_body(sum, DType::f32, header, layout, out);
  return counted;
}

WireHeader Codec::check(const uint8_t* in, size_t size, MessageShape shape,
                        const WireContext& context) const {
  WireHeader h;
  std::string detail;
  const WireStatus status = read_wire_header(in, size, &h, &detail);
  if (status != WireStatus::ok) throw_wire_error(status, detail, size, context);
  if (h.options.kind != options_.kind) {
    throw_wire_error(WireStatus::wrong_codec,
                     std::string("encoded with ") + codec_kind_name(h.options.kind) +
                         ", this receiver decodes " + codec_kind_name(options_.kind),
                     size, context);
  }
  if (h.options != options_) {
    throw_wire_error(
        WireStatus::wrong_options,
        "encoded as '" + describe(h.options) + "', this receiver expects '" + name() + "'", size,
        context);
  }
  if (h.shape != shape) {
    throw_wire_error(WireStatus::wrong_shape,
                     "message is [" + std::to_string(h.shape.rows) + ", " +
                         std::to_string(h.shape.cols) + "], this receiver expects [" +
                         std::to_string(shape.rows) + ", " + std::to_string(shape.cols) + "]",
                     size, context);
  }
  return h;
}

DecodeResult Codec::decode_any(const uint8_t* in, size_t size, MessageShape shape, void* out,
                               DType out_dtype, bool accumulate, const WireContext& context) const {
  const WireHeader h = check(in, size, shape, context);
  const WireLayout layout = wire_layout(h.options, h.shape, h.dtype);
  DecodeResult r;
  r.nonfinite_groups = decode_body(in, h, layout, out, out_dtype, accumulate);
  return r;
}

DecodeResult Codec::decode(const uint8_t* in, size_t size, MessageShape shape, float* out,
                           const WireContext& context) const {
  return decode_any(in, size, shape, out, DType::f32, false, context);
}

DecodeResult Codec::decode(const uint8_t* in, size_t size, MessageShape shape, bf16* out,
                           const WireContext& context) const {
  return decode_any(in, size, shape, out, DType::bf16, false, context);
}

DecodeResult Codec::decode_accumulate(const uint8_t* in, size_t size, MessageShape shape,
                                      float* out, const WireContext& context) const {
  return decode_any(in, size, shape, out, DType::f32, true, context);
}

void Codec::encode_async(const void*, DType, MessageShape, uint8_t*, Stream, int64_t*) const {
  throw UserError("codec " + name() +
                  ": no device implementation in this build; "
                  "stage the message through host memory");
}

void Codec::decode_async(const uint8_t*, size_t, MessageShape, void*, DType, bool, Stream,
                         uint32_t*, int64_t*) const {
  throw UserError("codec " + name() +
                  ": no device implementation in this build; "
                  "stage the message through host memory");
}

void Codec::decode_sum_encode_async(const uint8_t*, size_t, int, size_t, MessageShape, uint8_t*,
                                    float*, Stream, uint32_t*, int64_t*) const {
  throw UserError("codec " + name() +
                  ": no device implementation in this build; "
                  "stage the message through host memory");
}

bool Codec::decode_error_sums_async(const uint8_t*, size_t, MessageShape, const void*, DType, DType,
                                    double*, Stream, uint32_t*) const {
  return false;
}

void Codec::throw_device_wire_error(uint32_t status, const uint8_t* header, size_t size,
                                    MessageShape shape, const WireContext& context) const {
  // check() reads only the header bytes (and stops at the length checks), so the host copy of
  // the first min(size, 48) bytes reproduces the host decoder's error line exactly.
  check(header, size, shape, context);
  throw_wire_error(WireStatus(status), "reported by the device decoder", size, context);
}

std::unique_ptr<Codec> make_codec(const CodecOptions& options) {
  TACO_CHECK(canonical(options) == options,
             "codec options must be canonical: " + describe(options));
  const std::string problem = validate(options, /*allow_auto_group=*/false);
  TACO_CHECK(problem.empty(), describe(options) + ": " + problem);
  if (options.kind == CodecKind::none) return make_none_codec();
  return make_fp8_codec(options);
}

}  // namespace taco
