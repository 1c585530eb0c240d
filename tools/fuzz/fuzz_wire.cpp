// libFuzzer harness: the compression wire-format decoder (compression/codec.h, wire_format.h).
//
// Input: 6 bytes choose the receiver (codec, format, scales, axis, group, shape, sender and
// output dtype, decode or decode-and-accumulate) and how the rest is used:
//   mode 0  the rest is the whole buffer: it must be rejected with a UserError, never crash;
//   mode 1  a header that matches the receiver, then the rest as payload and scales (NaN and
//           Inf scales, any FP8 codes): it must decode, with no error at all;
//   mode 2  a matching header, then the rest as (offset, xor) edits of the buffer and a new
//           length, the checksum recomputed or not: rejected with a UserError or decoded.
// A crash, a sanitizer report, any other exception, or a valid message that fails to decode is a
// finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compression/codec.h"
#include "compression/wire_format.h"
#include "kernels/check.h"

namespace {

// The wire format's header checksum: FNV-1a over bytes [0, 44), stored at 44.
void reseal_header(std::vector<uint8_t>& buf) {
  if (buf.size() < taco::kWireHeaderBytes) return;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < 44; ++i) h = (h ^ buf[i]) * 16777619u;
  std::memcpy(buf.data() + 44, &h, 4);
}

void decode(const taco::Codec& codec, const std::vector<uint8_t>& buf, taco::MessageShape shape,
            int how, const uint8_t* seed_values) {
  const taco::WireContext context{taco::Site::attn_out_fwd, -1, 0};
  const size_t n = size_t(shape.count());
  if (how == 0) {
    std::vector<float> out(n);
    codec.decode(buf.data(), buf.size(), shape, out.data(), context);
  } else if (how == 1) {
    std::vector<taco::bf16> out(n);
    codec.decode(buf.data(), buf.size(), shape, out.data(), context);
  } else if (how == 2) {
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = float(int(seed_values[i % 4]) - 128);
    codec.decode_accumulate(buf.data(), buf.size(), shape, out.data(), context);
  } else {  // the all-reduce's middle step: the buffer twice, summed and encoded
    std::vector<uint8_t> two(buf);
    two.insert(two.end(), buf.begin(), buf.end());
    std::vector<float> sum(n);
    std::vector<uint8_t> out(codec.max_encoded_size(shape, taco::DType::f32));
    codec.decode_sum_encode(two.data(), buf.size(), 2, buf.size(), shape, sum.data(), out.data(),
                            out.size(), context);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  using namespace taco;
  CodecOptions o;
  o.kind = CodecKind(data[0] & 3);
  o.format = Fp8Format(data[1] & 1);
  o.scales = Fp8Scales((data[1] >> 1 & 3) % 3);
  o.axis = GroupAxis(data[1] >> 3 & 1);
  o.group = kGroupSizes[(data[1] >> 4) % 5];
  o = canonical(o);
  if (!validate(o, /*allow_auto_group=*/false).empty()) return 0;
  const MessageShape shape{1 + (data[2] & 15), 1 + data[3] + 256 * (data[4] & 1)};  // <= 16 x 512
  const DType sent = (data[0] >> 2 & 1) ? DType::bf16 : DType::f32;
  const int how = data[0] >> 3 & 3;  // decode to fp32, to bf16, accumulate, or decode-sum-encode
  const int mode = (data[0] >> 5) % 3;
  const uint8_t* rest = data + 6;
  const size_t rest_size = size - 6;
  const auto codec = make_codec(o);

  std::vector<uint8_t> buf;
  if (mode == 0) {
    buf.assign(rest, rest + rest_size);
  } else {
    const WireLayout layout = wire_layout(o, shape, sent);
    buf.assign(layout.total_bytes, 0);
    write_wire_header(make_wire_header(o, shape, sent), buf.data());
    if (mode == 1) {
      for (size_t i = kWireHeaderBytes; i < buf.size() && rest_size > 0; ++i) {
        buf[i] = rest[(i - kWireHeaderBytes) % rest_size];
      }
    } else {
      // Pairs (offset low, offset high, xor) edit the buffer; a last odd byte sets its length.
      size_t k = 0;
      for (; k + 3 <= rest_size; k += 3) {
        const size_t at = (size_t(rest[k]) | size_t(rest[k + 1]) << 8) % buf.size();
        buf[at] ^= rest[k + 2];
      }
      if (k < rest_size) buf.resize(size_t(rest[k]) * buf.size() / 128);
      if (data[5] & 1) reseal_header(buf);
    }
  }
  try {
    decode(*codec, buf, shape, how, data + 2);
  } catch (const UserError&) {
    if (mode == 1) std::abort();  // a well-formed message for this receiver was rejected
  }
  // The header reader alone, with no receiver expectations, on the same bytes.
  WireHeader header;
  read_wire_header(buf.data(), buf.size(), &header, nullptr);
  return 0;
}
