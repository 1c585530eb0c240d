// What a YAML experiment file says about compression (docs/design.md §9), the names of the
// communication sites (§3) and the layer-range syntax of rules: compression/ owns them, so the
// policy needs nothing above it, and engine/config embeds them in its Config. engine/config reads
// the YAML into these structs (names to enums); everything else about the section (layer ranges,
// sites, groups, calibration) is checked once, by building the CompressionPolicy
// (compression/policy.h), which config validation does at load time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codec_options.h"

namespace taco {

// One codec choice as written: the codec and its options, every key kept whether the codec uses
// it or not, so that the effective config.yaml writes back what was read (the policy takes the
// canonical form, compression/codec_options.h). There is no axis key: a fixed group runs along
// hidden, and calibration (group auto) chooses the axis. `codec: auto` sets codec_auto: each
// message then takes `candidate` (with format, group, scales) or none, whichever the measured
// link and codec speeds predict faster (parallel/codec_autotune.h); `codec` is then unused.
struct CodecSpec {
  CodecKind codec = CodecKind::none;
  Fp8Format format = Fp8Format::e4m3;
  int group = 128;                        // 32 | 64 | 128 | 256 | 512; 0 = auto (calibrated)
  Fp8Scales scales = Fp8Scales::dual;     // the paper's; fp8_block reads it as single
  bool codec_auto = false;                // YAML codec: auto
  CodecKind candidate = CodecKind::taco;  // what codec: auto may choose; never none

  bool operator==(const CodecSpec&) const = default;
};

struct CompressionRule {
  std::string layers = "all";      // "all", "3", "1-3", "0,2,5-7"
  std::vector<std::string> sites;  // empty = every site
  CodecSpec spec;
  int line = 0;  // YAML line of the rule, for error messages
};

struct CompressionSection {
  CodecSpec default_spec;  // YAML key: default
  int64_t min_bytes = 0;   // messages smaller than this are sent uncompressed
  int calibrate_steps = 0;
  // Pipeline pieces of one compressed collective on device buffers (docs/design.md §5, overlap):
  // the encode of piece i+1 runs while piece i is on the wire. YAML `auto` (0 here: pieces of at
  // least 4 MiB, at most 8, one for messages under 8 MiB) or an integer >= 1.
  int chunks = 0;
  // codec: auto compresses a message only where the predicted compressed time is below
  // (1 - auto_margin) x the native collective's; in [0, 1).
  double auto_margin = 0.1;
  // Steps between re-measurements of codec: auto's decisions (0: decided once, at first use).
  int auto_recheck_steps = 0;
  std::vector<CompressionRule> rules;  // first match wins
};

// The communication sites a compression rule may name (docs/design.md §3), in a fixed order that
// per-site tables may index; compression/sites.h adds the sites that are never compressed.
inline constexpr int kNumSites = 15;
inline constexpr std::array<std::string_view, kNumSites> kSiteNames = {
    "embed.fwd",    "embed.bwd",   "attn.in.fwd", "attn.in.bwd", "attn.out.fwd",
    "attn.out.bwd", "mlp.in.fwd",  "mlp.in.bwd",  "mlp.out.fwd", "mlp.out.bwd",
    "head.in.fwd",  "head.in.bwd", "pp.act",      "pp.grad",     "dp.grad"};

// Index of `name` in kSiteNames, or -1 when it names no site.
constexpr int site_index(std::string_view name) {
  for (int i = 0; i < kNumSites; ++i) {
    if (kSiteNames[i] == name) return i;
  }
  return -1;
}

// The layers that a rule's `layers` text names, sorted and distinct: "all", "3", "1-3",
// "0,2,5-7". Throws taco::UserError("what is wrong; expected ...", no file or key: the caller
// adds them) when the text is malformed or names a layer >= n_layer.
std::vector<int> parse_layer_ranges(const std::string& text, int n_layer);

}  // namespace taco
