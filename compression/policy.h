// Which codec compresses which message: the config's compression section resolved into a
// table over (layer, site) (docs/design.md §3, §9).
//
//   compression:
//     default: { codec: none }
//     min_bytes: 65536                  # smaller messages go uncompressed
//     calibrate_steps: 20               # needed when a rule says group: auto (group 0)
//     chunks: auto                      # pipeline pieces of a device collective (or N >= 1)
//     auto_margin: 0.1                  # codec: auto compresses where >= 10% faster predicted
//     auto_recheck_steps: 0             # codec: auto measures again every N steps (0: never)
//     rules:                            # first match wins
//       - { layers: "1-3", sites: [attn.out.fwd, mlp.out.fwd], codec: taco, group: 128 }
//       - { layers: all, sites: [mlp.in.bwd], codec: auto, candidate: fp8_block, group: 64 }
//
// codec: auto (a rule's or the default's) leaves the choice between none and the spec's
// `candidate` (taco unless it says otherwise; format, group and scales are the candidate's) to
// measurement, per (layer, site, message size): configured() and resolve() give the candidate,
// automatic() says that it is only a candidate, and the compressing SiteComm asks its
// CodecAutotune (parallel/codec_autotune.h) whether encode + compressed transfer + decode beats
// the native collective by auto_margin. Messages under min_bytes stay uncompressed either way.
// A candidate must be a codec (not none) with a fixed group (group: auto is refused with it).
//
// A rule matches a per-layer site (attn.*, mlp.*) when the layer is in its `layers` and the
// site in its `sites` (empty = every compressible site; a never-compressed site such as sp.grad is
// refused, compression/sites.h). Model-wide sites (embed.*, head.in.*, pp.*,
// dp.grad) belong to no layer: only rules with layers "all" reach them, and a rule that names
// one of them with a narrower layer range is rejected.
//
// Building the policy is the one check of a compression section beyond its YAML types: config
// validation builds one at load time (engine/config/config_validate.cpp), so that every problem
// is reported there with the file, line and key; the trainer builds it again from the checked
// section.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/codec_options.h"
#include "compression/sites.h"
#include "kernels/check.h"

namespace taco {

struct CompressionSection;

// A compression section that no policy can be built from. what() is one line
// "SOURCE[:LINE]: KEY: PROBLEM" (LINE: the YAML line of the rule, when known); key() and problem()
// let config validation place the same message at the key's own line or --set instead.
class CompressionError : public UserError {
 public:
  // `key` as config messages write it ("compression.rules[2].sites[0]"); `problem` is
  // "what is wrong; expected what".
  CompressionError(const std::string& source, int line, std::string key, std::string problem);

  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string key_;
  std::string problem_;
};

// The group used while a site with group auto is still being calibrated.
constexpr int kUncalibratedGroup = 128;

class CompressionPolicy {
 public:
  // Checks the section against the model (layer ranges below n_layer, groups that divide
  // d_model, sites, calibration) and resolves it; the first problem throws CompressionError
  // naming `source` (the config file). n_layer < 1 throws UserError.
  CompressionPolicy(const CompressionSection& section, int n_layer, int d_model,
                    const std::string& source = "config");

  int n_layer() const { return n_layer_; }
  int64_t min_bytes() const { return min_bytes_; }
  int calibrate_steps() const { return calibrate_steps_; }
  // Pipeline pieces per compressed collective on the device: >= 1, or 0 = auto
  // (parallel/device_compressed_collectives.h).
  int chunks() const { return chunks_; }
  // codec: auto (see above): the fraction by which a compressed message must be predicted faster,
  // and the steps between re-measurements (0: never).
  double auto_margin() const { return auto_margin_; }
  int auto_recheck_steps() const { return auto_recheck_steps_; }
  // Whether (layer, site) says codec: auto, i.e. its configured options are only a candidate.
  bool automatic(int layer, Site site) const;
  bool any_automatic() const;

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
  // Counts the changes since construction (apply_calibration): a table resolved from this
  // policy is stale once the revision it was built at differs.
  int revision() const { return revision_; }

  // The effective table, printed by the trainer at start: a legend of the distinct codecs, one
  // line per run of identical layers over the per-layer sites, and the model-wide sites.
  std::string table() const;

 private:
  CodecOptions& at(int layer, Site site);

  int n_layer_;
  int64_t min_bytes_;
  int calibrate_steps_;
  int chunks_;
  double auto_margin_;
  int auto_recheck_steps_;
  int revision_ = 0;
  // per_layer_[layer][site] for per-layer sites; model_wide_[site] for the others.
  std::vector<std::array<CodecOptions, kNumSites>> per_layer_;
  std::array<CodecOptions, kNumSites> model_wide_;
  // The same tables for codec: auto.
  std::vector<std::array<bool, kNumSites>> per_layer_auto_;
  std::array<bool, kNumSites> model_wide_auto_{};
};

}  // namespace taco
