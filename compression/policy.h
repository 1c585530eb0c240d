// Which codec compresses which message: the config's compression section resolved into a
// table over (layer, site) (docs/design.md §3, §9).
//
//   compression:
//     default: { codec: none }
//     min_bytes: 65536                  # smaller messages go uncompressed
//     calibrate_steps: 20               # needed when a rule says group: auto (group 0)
//     chunks: auto                      # pipeline pieces of a device collective (or N >= 1)
//     rules:                            # first match wins
//       - { layers: "1-3", sites: [attn.out.fwd, mlp.out.fwd], codec: taco, group: 128 }
//
// A rule matches a per-layer site (attn.*, mlp.*) when the layer is in its `layers` and the
// site in its `sites` (empty = every site). Model-wide sites (embed.*, head.in.*, pp.*,
// dp.grad) belong to no layer: only rules with layers "all" reach them, and a rule that names
// one of them with a narrower layer range is rejected.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/codec_options.h"
#include "compression/sites.h"

namespace taco {

struct CompressionSection;

// The group used while a site with group auto is still being calibrated.
constexpr int kUncalibratedGroup = 128;

class CompressionPolicy {
 public:
  // Validates every rule against n_layer; a bad rule throws UserError naming `source` (the
  // config file), the rule's YAML line and the key.
  CompressionPolicy(const CompressionSection& section, int n_layer,
                    const std::string& source = "config");

  int n_layer() const { return n_layer_; }
  int64_t min_bytes() const { return min_bytes_; }
  int calibrate_steps() const { return calibrate_steps_; }
  // Pipeline pieces per compressed collective on the device: >= 1, or 0 = auto
  // (parallel/device_compressed_collectives.h).
  int chunks() const { return chunks_; }

  // The configured options at (layer, site); group may be kAutoGroup before calibration.
  // `layer` is ignored for model-wide sites and must be in [0, n_layer) for per-layer ones.
  const CodecOptions& configured(int layer, Site site) const;

  // What to encode a message of `logical_bytes` (its uncompressed size) with: none below
  // min_bytes, the configured options otherwise, with an uncalibrated auto group standing in
  // as kUncalibratedGroup along hidden.
  CodecOptions resolve(int layer, Site site, int64_t logical_bytes) const;

  // Sites where some layer still has group auto.
  std::vector<Site> sites_to_calibrate() const;
  // Replaces group auto at every layer of `site` with the calibrated group and axis.
  void apply_calibration(Site site, int group, GroupAxis axis);

  // The effective table, printed by the trainer at start: a legend of the distinct codecs, one
  // line per run of identical layers over the per-layer sites, and the model-wide sites.
  std::string table() const;

 private:
  CodecOptions& at(int layer, Site site);

  int n_layer_;
  int64_t min_bytes_;
  int calibrate_steps_;
  int chunks_;
  // per_layer_[layer][site] for per-layer sites; model_wide_[site] for the others.
  std::vector<std::array<CodecOptions, kNumSites>> per_layer_;
  std::array<CodecOptions, kNumSites> model_wide_;
};

}  // namespace taco
