// Which codec, with which options: the typed form of a config CodecSpec (docs/design.md §4, §9).
//
//   none        the raw fp32/bf16 values (what a compressed collective sends when a message is
//               below min_bytes, or what a test compares against)
//   fp8_tensor  FP8 with one absmax scale for the whole message
//   fp8_block   FP8 with one absmax scale per group of G elements; scales single (fp32) or e8m0
//   taco        adaptive scale + Walsh-Hadamard per group of G, then FP8 with the group's absmax
//               scale; scales dual (q and a, the paper's), single (q/a) or e8m0 (power of two)
// Groups are G consecutive elements of a row (axis hidden) or G consecutive rows of one column
// (axis token); G in {32, 64, 128, 256, 512}, or 0 for "auto" (calibrated, compression/
// calibration.h) in a policy before calibration has run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/codec_fp8.h"
#include "kernels/codec_wire.h"

namespace taco {

struct CodecSpec;

// CodecKind and GroupAxis: kernels/codec_wire.h (their values are the wire header's bytes).

constexpr int kAutoGroup = 0;
constexpr int kGroupSizes[] = {32, 64, 128, 256, 512};

// Every value of each enum, in the order that lists and messages name them.
constexpr CodecKind kCodecKinds[] = {CodecKind::none, CodecKind::fp8_tensor, CodecKind::fp8_block,
                                     CodecKind::taco};
constexpr Fp8Format kFp8Formats[] = {Fp8Format::e4m3, Fp8Format::e5m2};
constexpr Fp8Scales kFp8ScaleModes[] = {Fp8Scales::dual, Fp8Scales::single, Fp8Scales::e8m0};
constexpr GroupAxis kGroupAxes[] = {GroupAxis::hidden, GroupAxis::token};

struct CodecOptions {
  CodecKind kind = CodecKind::none;
  Fp8Format format = Fp8Format::e4m3;
  int group = 0;  // fp8_block, taco: G; 0 = auto (must be calibrated before a codec is built)
  Fp8Scales scales = Fp8Scales::single;
  GroupAxis axis = GroupAxis::hidden;

  bool operator==(const CodecOptions&) const = default;
};

// The canonical form: options a codec ignores take fixed values (none: everything default;
// fp8_tensor: no group, single scale; fp8_block: dual -> single), so two option sets that
// encode identically compare equal and write identical headers.
CodecOptions canonical(CodecOptions options);

// Checked options (any canonical CodecOptions with a valid group passes). Returns "" when valid,
// else what is wrong ("group 100 is not one of 32, 64, 128, 256, 512").
std::string validate(const CodecOptions& options, bool allow_auto_group);

// The canonical options of a config CodecSpec, group 0 (auto) kept, axis hidden. The spec's
// group is not checked here: CompressionPolicy checks every spec of a section first and names
// its key (compression/policy.h).
CodecOptions codec_options_from_spec(const CodecSpec& spec);

// "none", "fp8_tensor e4m3", "fp8_block e5m2 g64 token", "taco e4m3 g128 dual hidden",
// "taco e4m3 auto dual" (auto: group and axis left to calibration).
std::string describe(const CodecOptions& options);

const char* codec_kind_name(CodecKind kind);
const char* fp8_format_name(Fp8Format format);
const char* fp8_scales_name(Fp8Scales scales);
const char* group_axis_name(GroupAxis axis);

// Name -> enum; false when the name is unknown.
bool parse_codec_kind(std::string_view name, CodecKind* out);
bool parse_fp8_format(std::string_view name, Fp8Format* out);
bool parse_fp8_scales(std::string_view name, Fp8Scales* out);
bool parse_group_axis(std::string_view name, GroupAxis* out);

bool is_group_size(int group);

}  // namespace taco
