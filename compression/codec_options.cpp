#include "compression/codec_options.h"

#include "compression/spec.h"
#include "kernels/check.h"

namespace taco {

const char* codec_kind_name(CodecKind kind) {
  switch (kind) {
    case CodecKind::none:
      return "none";
    case CodecKind::fp8_tensor:
      return "fp8_tensor";
    case CodecKind::fp8_block:
      return "fp8_block";
    case CodecKind::taco:
      return "taco";
  }
  return "?";
}

const char* fp8_format_name(Fp8Format format) {
  return format == Fp8Format::e4m3 ? "e4m3" : format == Fp8Format::e5m2 ? "e5m2" : "?";
}

const char* fp8_scales_name(Fp8Scales scales) {
  switch (scales) {
    case Fp8Scales::dual:
      return "dual";
    case Fp8Scales::single:
      return "single";
    case Fp8Scales::e8m0:
      return "e8m0";
  }
  return "?";
}

const char* group_axis_name(GroupAxis axis) {
  return axis == GroupAxis::hidden ? "hidden" : axis == GroupAxis::token ? "token" : "?";
}

namespace {

template <class E, size_t N>
bool parse_enum(std::string_view name, const E (&values)[N], const char* (*to_name)(E), E* out) {
  for (E v : values) {
    if (name == to_name(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}

}  // namespace

bool parse_codec_kind(std::string_view name, CodecKind* out) {
  return parse_enum(name, kCodecKinds, codec_kind_name, out);
}
bool parse_fp8_format(std::string_view name, Fp8Format* out) {
  return parse_enum(name, kFp8Formats, fp8_format_name, out);
}
bool parse_fp8_scales(std::string_view name, Fp8Scales* out) {
  return parse_enum(name, kFp8ScaleModes, fp8_scales_name, out);
}
bool parse_group_axis(std::string_view name, GroupAxis* out) {
  return parse_enum(name, kGroupAxes, group_axis_name, out);
}

bool is_group_size(int group) {
  for (int g : kGroupSizes) {
    if (g == group) return true;
  }
  return false;
}

CodecOptions canonical(CodecOptions o) {
  switch (o.kind) {
    case CodecKind::none:
      return CodecOptions{};
    case CodecKind::fp8_tensor:
      return CodecOptions{CodecKind::fp8_tensor, o.format, 0, Fp8Scales::single, GroupAxis::hidden};
    case CodecKind::fp8_block:
      if (o.scales == Fp8Scales::dual) o.scales = Fp8Scales::single;
      return o;
    case CodecKind::taco:
      return o;
  }
  return o;
}

std::string validate(const CodecOptions& o, bool allow_auto_group) {
  if (o.kind != CodecKind::none && o.format != Fp8Format::e4m3 && o.format != Fp8Format::e5m2) {
    return "unknown FP8 format";
  }
  if (o.kind == CodecKind::fp8_block || o.kind == CodecKind::taco) {
    if (!(is_group_size(o.group) || (allow_auto_group && o.group == kAutoGroup))) {
      return "group " + std::to_string(o.group) + " is not one of 32, 64, 128, 256, 512" +
             (allow_auto_group ? " or auto" : "");
    }
    if (o.kind == CodecKind::fp8_block && o.scales == Fp8Scales::dual) {
      return "fp8_block has no dual scale (it has no adaptive scale); use single or e8m0";
    }
  }
  return "";
}

CodecOptions codec_options_from_spec(const CodecSpec& spec) {
  return canonical(
      CodecOptions{spec.codec, spec.format, spec.group, spec.scales, GroupAxis::hidden});
}

std::string describe(const CodecOptions& o) {
  std::string s = codec_kind_name(o.kind);
  if (o.kind == CodecKind::none) return s;
  s += std::string(" ") + fp8_format_name(o.format);
  if (o.kind == CodecKind::fp8_tensor) return s;
  if (o.group == kAutoGroup) {
    s += " auto";
  } else {
    s += " g" + std::to_string(o.group);
  }
  if (o.kind == CodecKind::taco || o.scales == Fp8Scales::e8m0) {
    s += std::string(" ") + fp8_scales_name(o.scales);
  }
  if (o.group != kAutoGroup) s += std::string(" ") + group_axis_name(o.axis);
  return s;
}

}  // namespace taco
