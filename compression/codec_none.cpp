// Codec none: the payload is the message's own fp32 or bf16 values.
#include <cmath>
#include <cstring>

#include "compression/codec_impl.h"

namespace taco {
namespace {

float element(const uint8_t* payload, DType dtype, int64_t i) {
  if (dtype == DType::bf16) {
    bf16 h;
    std::memcpy(&h, payload + 2 * i, 2);
    return bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, payload + 4 * i, 4);
  return f;
}

class NoneCodec final : public Codec {
 public:
  NoneCodec() : Codec(CodecOptions{}) {}

 protected:
  EncodeResult encode_body(const void* x, DType dtype, const WireHeader& header,
                           const WireLayout& layout, uint8_t* out) const override {
    std::memcpy(out + layout.payload_offset, x, layout.payload_bytes);
    EncodeResult r;
    const int64_t n = header.shape.count();
    for (int64_t i = 0; i < n; ++i) {
      r.nonfinite_values += !std::isfinite(element(out + layout.payload_offset, dtype, i));
    }
    return r;
  }

  int64_t decode_body(const uint8_t* in, const WireHeader& header, const WireLayout& layout,
                      void* out, DType out_dtype, bool accumulate) const override {
    const uint8_t* payload = in + layout.payload_offset;
    const int64_t n = header.shape.count();
    if (out_dtype == header.dtype && !accumulate) {
      std::memcpy(out, payload, layout.payload_bytes);
      return 0;
    }
    if (out_dtype == DType::bf16) {
      bf16* o = static_cast<bf16*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(element(payload, header.dtype, i));
      return 0;
    }
    float* o = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) {
      const float v = element(payload, header.dtype, i);
      o[i] = accumulate ? o[i] + v : v;
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Codec> make_none_codec() { return std::make_unique<NoneCodec>(); }

}  // namespace taco
