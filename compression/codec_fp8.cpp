// fp8_tensor, fp8_block and taco: the grouped FP8 kernels (kernels/codec_fp8.h) with the
// grouping each codec implies. A CUDA build adds the device path (kernels/cuda/codec_fp8_*.cu,
// declared in kernels/codec_fp8.h), which writes and reads the same bytes.
#include "kernels/codec_fp8.h"
#include "compression/codec_impl.h"
#include "kernels/check.h"

namespace taco {
namespace {

#if TACO_HAVE_CUDA
cuda::Fp8DeviceMessage device_message(const CodecOptions& o, MessageShape shape, DType dtype) {
  cuda::Fp8DeviceMessage m;
  m.spec = fp8_group_spec(o, shape);
  m.kind = uint8_t(o.kind);
  m.axis = uint8_t(o.axis);
  m.group = uint32_t(o.group);
  write_wire_header(make_wire_header(o, shape, dtype), m.header);
  const WireLayout l = wire_layout(o, shape, dtype);
  TACO_CHECK(l.payload_offset == kWireHeaderBytes, "FP8 payload starts after the header");
  m.payload_bytes = l.payload_bytes;
  m.scales_offset = l.scales_offset;
  m.scales_bytes = l.scales_bytes;
  m.total_bytes = l.total_bytes;
  return m;
}
#endif

class Fp8Codec final : public Codec {
 public:
  explicit Fp8Codec(const CodecOptions& options) : Codec(options) {}

#if TACO_HAVE_CUDA
  bool has_device_path() const override { return true; }

  void encode_async(const void* x, DType dtype, MessageShape shape, uint8_t* out, Stream stream,
                    int64_t* nonfinite_groups) const override {
    cuda::fp8_encode_device(x, dtype, device_message(options(), shape, dtype), out, stream,
                            nonfinite_groups);
  }

  void decode_async(const uint8_t* in, size_t size, MessageShape shape, void* out, DType out_dtype,
                    bool accumulate, Stream stream, uint32_t* status,
                    int64_t* nonfinite_groups) const override {
    // The layout of an FP8 message does not depend on the sender's dtype.
    cuda::fp8_decode_device(in, size, device_message(options(), shape, DType::f32), out, out_dtype,
                            accumulate, stream, status, nonfinite_groups);
  }

  bool decode_error_sums_async(const uint8_t* in, size_t size, MessageShape shape, const void* x,
                               DType x_dtype, DType decoded_dtype, double* sums, Stream stream,
                               uint32_t* status) const override {
    return cuda::fp8_decode_error_device(in, size, device_message(options(), shape, DType::f32), x,
                                         x_dtype, decoded_dtype, sums, stream, status);
  }

  void decode_sum_encode_async(const uint8_t* in, size_t slot, int count, size_t size,
                               MessageShape shape, uint8_t* out, float* scratch, Stream stream,
                               uint32_t* status, int64_t* nonfinite_groups) const override {
    cuda::fp8_decode_sum_encode_device(in, slot, count, size,
                                       device_message(options(), shape, DType::f32), out, scratch,
                                       stream, status, nonfinite_groups);
  }
#endif

 protected:
  EncodeResult encode_body(const void* x, DType dtype, const WireHeader& header,
                           const WireLayout& layout, uint8_t* out) const override {
    const Fp8GroupSpec spec = spec_of(header.shape, /*coefficients=*/false);
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
    const Fp8GroupSpec spec = spec_of(header.shape, /*coefficients=*/false);
    const uint8_t* codes = in + layout.payload_offset;
    const uint8_t* scales = in + layout.scales_offset;
    if (out_dtype == DType::bf16) {
      return cpu::fp8_group_decode(codes, scales, spec, static_cast<bf16*>(out));
    }
    return cpu::fp8_group_decode(codes, scales, spec, static_cast<float*>(out), accumulate);
  }

  // taco sums its transform's coefficients (kernels/codec_fp8.h); fp8_block and fp8_tensor have
  // no transform, and the flag changes nothing for them. One pass a chunk of groups at a time
  // (kernels/cpu/codec_fp8_parallel.cpp).
  int64_t sum_body(const std::vector<SumTerm>& terms, float* sum, const WireHeader& header,
                   const WireLayout& layout, uint8_t* out) const override {
    std::vector<const uint8_t*> codes, scales;
    for (const SumTerm& t : terms) {
      codes.push_back(t.message + t.layout.payload_offset);
      scales.push_back(t.message + t.layout.scales_offset);
    }
    return cpu::fp8_group_decode_sum_encode(codes.data(), scales.data(), int(terms.size()),
                                            spec_of(header.shape, /*coefficients=*/true), sum,
                                            out + layout.payload_offset,
                                            out + layout.scales_offset);
  }

 private:
  Fp8GroupSpec spec_of(MessageShape shape, bool coefficients) const {
    Fp8GroupSpec spec = fp8_group_spec(options(), shape);
    spec.coefficients = coefficients && spec.hadamard;
    return spec;
  }
};

}  // namespace

std::unique_ptr<Codec> make_fp8_codec(const CodecOptions& options) {
  return std::make_unique<Fp8Codec>(options);
}

}  // namespace taco
