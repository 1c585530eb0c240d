// fp8_tensor, fp8_block and taco: the grouped FP8 kernels (kernels/codec_fp8.h) with the
// grouping each codec implies.
#include "kernels/codec_fp8.h"
#include "compression/codec_impl.h"

namespace taco {
namespace {

class Fp8Codec final : public Codec {
 public:
  explicit Fp8Codec(const CodecOptions& options) : Codec(options) {}

 protected:
  EncodeResult encode_body(const void* x, DType dtype, const WireHeader& header,
                           const WireLayout& layout, uint8_t* out) const override {
    const Fp8GroupSpec spec = fp8_group_spec(options(), header.shape);
    uint8_t* codes = out + layout.payload_offset;
    uint8_t* scales = out + layout.scales_offset;
    const Fp8EncodeCounts c =
        dtype == DType::bf16
            ? cpu::fp8_group_encode(static_cast<const bf16*>(x), spec, codes, scales)
            : cpu::fp8_group_encode(static_cast<const float*>(x), spec, codes, scales);
    EncodeResult r;
    r.nonfinite_values = c.nonfinite_values;
    r.nonfinite_groups = c.nonfinite_groups;
    return r;
  }

  int64_t decode_body(const uint8_t* in, const WireHeader& header, const WireLayout& layout,
                      void* out, DType out_dtype, bool accumulate) const override {
    const Fp8GroupSpec spec = fp8_group_spec(options(), header.shape);
    const uint8_t* codes = in + layout.payload_offset;
    const uint8_t* scales = in + layout.scales_offset;
    if (out_dtype == DType::bf16) {
      return cpu::fp8_group_decode(codes, scales, spec, static_cast<bf16*>(out));
    }
    return cpu::fp8_group_decode(codes, scales, spec, static_cast<float*>(out), accumulate);
  }
};

}  // namespace

std::unique_ptr<Codec> make_fp8_codec(const CodecOptions& options) {
  return std::make_unique<Fp8Codec>(options);
}

}  // namespace taco
