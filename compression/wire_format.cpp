#include "compression/wire_format.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "kernels/check.h"

namespace taco {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little endian; a big-endian host needs byte swaps here");

namespace {

namespace off = wire_offset;  // header byte offsets (kernels/codec_wire.h)

size_t round_up(size_t n) { return (n + kWireAlign - 1) / kWireAlign * kWireAlign; }

template <class T>
void put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <class T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

// FNV-1a, 32 bit: any single changed byte changes the hash.
uint32_t fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

WireStatus fail(WireStatus status, std::string* detail, const std::string& text) {
  if (detail) *detail = text;
  return status;
}

}  // namespace

const char* wire_status_name(WireStatus status) {
  switch (status) {
    case WireStatus::ok:
      return "ok";
    case WireStatus::truncated:
      return "truncated header";
    case WireStatus::bad_magic:
      return "not a taco message";
    case WireStatus::bad_version:
      return "wire format version mismatch";
    case WireStatus::bad_checksum:
      return "header checksum mismatch";
    case WireStatus::bad_field:
      return "invalid header field";
    case WireStatus::size_mismatch:
      return "size mismatch";
    case WireStatus::wrong_codec:
      return "wrong codec";
    case WireStatus::wrong_options:
      return "wrong codec options";
    case WireStatus::wrong_shape:
      return "wrong message shape";
  }
  return "unknown status";
}

Fp8GroupSpec fp8_group_spec(const CodecOptions& o, MessageShape shape) {
  Fp8GroupSpec s;
  s.rows = shape.rows;
  s.cols = shape.cols;
  s.group = o.kind == CodecKind::fp8_tensor ? 0 : o.group;
  s.along_tokens = o.axis == GroupAxis::token;
  s.hadamard = o.kind == CodecKind::taco;
  s.format = o.format;
  s.scales = o.scales;
  return s;
}

WireLayout wire_layout(const CodecOptions& options, MessageShape shape, DType dtype) {
  TACO_CHECK(shape.rows >= 0 && shape.cols >= 0 && shape.rows <= INT32_MAX &&
                 shape.cols <= INT32_MAX && shape.count() <= kMaxWireElements,
             "message shape out of range");
  TACO_CHECK(dtype == DType::f32 || dtype == DType::bf16, "messages are fp32 or bf16");
  WireLayout l;
  const size_t n = size_t(shape.count());
  if (options.kind == CodecKind::none) {
    l.payload_bytes = n * dtype_size(dtype);
  } else {
    l.payload_bytes = n;
    l.scales_bytes = fp8_group_spec(options, shape).scale_bytes();
  }
  l.scales_offset = l.payload_offset + round_up(l.payload_bytes);
  l.total_bytes = l.scales_offset + round_up(l.scales_bytes);
  return l;
}

WireHeader make_wire_header(const CodecOptions& options, MessageShape shape, DType dtype) {
  WireHeader h;
  h.options = options;
  h.dtype = dtype;
  h.shape = shape;
  h.total_bytes = wire_layout(options, shape, dtype).total_bytes;
  return h;
}

void write_wire_header(const WireHeader& h, uint8_t* out) {
  std::memset(out, 0, kWireHeaderBytes);
  put<uint32_t>(out, off::magic, kWireMagic);
  put<uint16_t>(out, off::version, h.version);
  put<uint8_t>(out, off::codec, uint8_t(h.options.kind));
  put<uint8_t>(out, off::dtype, uint8_t(h.dtype));
  put<uint8_t>(out, off::format, uint8_t(h.options.format));
  put<uint8_t>(out, off::scales, uint8_t(h.options.scales));
  put<uint8_t>(out, off::axis, uint8_t(h.options.axis));
  put<uint32_t>(out, off::group, uint32_t(h.options.group));
  put<uint32_t>(out, off::rows, uint32_t(h.shape.rows));
  put<uint32_t>(out, off::cols, uint32_t(h.shape.cols));
  put<uint64_t>(out, off::count, uint64_t(h.shape.count()));
  put<uint64_t>(out, off::total, h.total_bytes);
  put<uint32_t>(out, off::checksum, fnv1a(out, off::checksum));
}

// Long on purpose: one check after another in the order the README lists them, each with its
// own status and detail, reading no byte before the size has been checked to hold it.
WireStatus read_wire_header(const uint8_t* in, size_t size, WireHeader* h, std::string* detail) {
  const std::string got = std::to_string(size) + " bytes";
  if (size < 4) {
    return fail(WireStatus::truncated, detail, got + ", shorter than the 48-byte header");
  }
  const uint32_t magic = get<uint32_t>(in, off::magic);
  if (magic != kWireMagic) {
    return fail(WireStatus::bad_magic, detail,
                "magic " + hex32(magic) + ", expected " + hex32(kWireMagic) + " ('TACW')");
  }
  if (size < kWireHeaderBytes) {
    return fail(WireStatus::truncated, detail, got + ", shorter than the 48-byte header");
  }
  const uint16_t version = get<uint16_t>(in, off::version);
  if (version != kWireVersion) {
    return fail(WireStatus::bad_version, detail,
                "buffer has version " + std::to_string(version) + ", this build reads version " +
                    std::to_string(kWireVersion));
  }
  const uint32_t stored = get<uint32_t>(in, off::checksum);
  const uint32_t computed = fnv1a(in, off::checksum);
  if (stored != computed) {
    return fail(WireStatus::bad_checksum, detail,
                "stored " + hex32(stored) + ", computed " + hex32(computed));
  }

  // Past the checksum the header is what the sender wrote; still check every field, so that a
  // buggy or hostile sender cannot make the decoder index out of bounds.
  auto bad = [&](const char* field, uint64_t value) {
    return fail(WireStatus::bad_field, detail,
                std::string(field) + " = " + std::to_string(value) + " is out of range");
  };
  const uint8_t codec = get<uint8_t>(in, off::codec), dtype = get<uint8_t>(in, off::dtype),
                format = get<uint8_t>(in, off::format), scales = get<uint8_t>(in, off::scales),
                axis = get<uint8_t>(in, off::axis);
  if (codec > uint8_t(CodecKind::taco)) return bad("codec", codec);
  if (dtype != uint8_t(DType::f32) && dtype != uint8_t(DType::bf16)) return bad("dtype", dtype);
  if (format > uint8_t(Fp8Format::e5m2)) return bad("format", format);
  if (scales > uint8_t(Fp8Scales::e8m0)) return bad("scales", scales);
  if (axis > uint8_t(GroupAxis::token)) return bad("axis", axis);
  if (get<uint8_t>(in, off::reserved8) != 0) return bad("reserved byte 11", in[off::reserved8]);
  if (get<uint32_t>(in, off::reserved32) != 0) {
    return bad("reserved word 40", get<uint32_t>(in, off::reserved32));
  }
  WireHeader out;
  out.version = version;
  out.options.kind = CodecKind(codec);
  out.options.format = Fp8Format(format);
  out.options.scales = Fp8Scales(scales);
  out.options.axis = GroupAxis(axis);
  out.dtype = DType(dtype);
  const uint32_t group = get<uint32_t>(in, off::group);
  if (group > 1u << 16) return bad("group", group);
  out.options.group = int(group);
  if (canonical(out.options) != out.options || !validate(out.options, false).empty()) {
    return fail(WireStatus::bad_field, detail,
                "options '" + describe(out.options) + "' are not a valid codec configuration");
  }
  const uint32_t rows = get<uint32_t>(in, off::rows), cols = get<uint32_t>(in, off::cols);
  if (rows > INT32_MAX) return bad("rows", rows);
  if (cols > INT32_MAX) return bad("cols", cols);
  out.shape.rows = rows;
  out.shape.cols = cols;
  if (out.shape.count() > kMaxWireElements) return bad("rows x cols", out.shape.count());
  const uint64_t count = get<uint64_t>(in, off::count);
  if (count != uint64_t(out.shape.count())) {
    return fail(WireStatus::bad_field, detail,
                "count " + std::to_string(count) + " is not rows x cols = " +
                    std::to_string(out.shape.rows) + " x " + std::to_string(out.shape.cols));
  }
  out.total_bytes = get<uint64_t>(in, off::total);
  const size_t expected_total = wire_layout(out.options, out.shape, out.dtype).total_bytes;
  if (out.total_bytes != expected_total) {
    return fail(WireStatus::bad_field, detail,
                "total_bytes " + std::to_string(out.total_bytes) + ", but a " +
                    describe(out.options) + " message of this shape takes " +
                    std::to_string(expected_total));
  }
  if (size != out.total_bytes) {
    return fail(WireStatus::size_mismatch, detail,
                "buffer holds " + got + ", its header says " + std::to_string(out.total_bytes) +
                    (size < out.total_bytes ? " (cut short)" : " (trailing bytes)"));
  }
  if (h) *h = out;
  return WireStatus::ok;
}

std::string wire_site(const WireContext& context) {
  if (!context.site) return "?";
  std::string s = site_name(*context.site);
  if (context.layer >= 0) s += " layer " + std::to_string(context.layer);
  return s;
}

void throw_wire_error(WireStatus status, const std::string& detail, size_t size,
                      const WireContext& context) {
  const char* todo = "";
  switch (status) {
    case WireStatus::wrong_codec:
    case WireStatus::wrong_options:
    case WireStatus::wrong_shape:
      todo =
          "sender and receiver disagree on the compression policy or the message shape; "
          "every rank must load the same config";
      break;
    case WireStatus::bad_version:
      todo = "every rank must run the same taco build";
      break;
    default:
      todo = "the buffer was corrupted or cut short in transit, or the peer sent something else";
      break;
  }
  const int rank = context.rank >= 0 ? context.rank : error_rank();
  throw UserError("rank " + std::to_string(rank) + ": site " + wire_site(context) +
                  ": rejected compressed buffer (" + std::to_string(size) +
                  " bytes): " + wire_status_name(status) + ": " + detail + "; " + todo);
}

}  // namespace taco
