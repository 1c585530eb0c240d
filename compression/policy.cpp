#include "compression/policy.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "compression/spec.h"
#include "kernels/check.h"

namespace taco {

namespace {

// "SOURCE[:LINE]: KEY: PROBLEM" (appended piece by piece: GCC 12 warns, wrongly, on
// `":" + std::to_string(line)` here).
std::string error_line(const std::string& source, int line, const std::string& key,
                       const std::string& problem) {
  std::string out = source;
  if (line > 0) out.append(":").append(std::to_string(line));
  return out.append(": ").append(key).append(": ").append(problem);
}

// 0.25, 1.5, 1e-05: a number as a message shows it.
std::string short_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

}  // namespace

CompressionError::CompressionError(const std::string& source, int line, std::string key,
                                   std::string problem)
    : UserError(error_line(source, line, key, problem)),
      key_(std::move(key)),
      problem_(std::move(problem)) {}

namespace {

// The codec a spec gives: its options, or with codec: auto the candidate's.
struct Choice {
  CodecOptions options;
  bool automatic = false;
};

struct ParsedRule {
  std::vector<bool> layers;  // per layer
  bool all_layers = false;
  std::array<bool, kNumSites> sites{};
  Choice choice;
};

// Checks a section and turns its rules into ParsedRules; every failure is a CompressionError
// naming the key to change.
class SectionReader {
 public:
  SectionReader(int n_layer, int d_model, const std::string& source)
      : n_layer_(n_layer), d_model_(d_model), source_(source) {}

  [[noreturn]] void fail(const std::string& key, const std::string& problem, int line = 0) const {
    throw CompressionError(source_, line, key, problem);
  }

  // `key` names the spec: "compression.default" or "compression.rules[i]".
  Choice choice(CodecSpec spec, const std::string& key, int line) const {
    if (spec.codec_auto) {
      if (spec.candidate == CodecKind::none)
        fail(key + ".candidate",
             "none is no candidate for codec: auto (it chooses between none and the candidate); "
             "expected fp8_tensor, fp8_block or taco",
             line);
      if (spec.group == kAutoGroup)
        fail(key + ".group",
             "auto cannot be combined with codec: auto (a message that auto sends uncompressed "
             "gives calibration nothing to see); expected 32, 64, 128, 256 or 512",
             line);
      spec.codec = spec.candidate;
    }
    return Choice{options(spec, key, line), spec.codec_auto};
  }

  CodecOptions options(const CodecSpec& spec, const std::string& key, int line) const {
    const bool grouped = spec.codec == CodecKind::fp8_block || spec.codec == CodecKind::taco;
    if (grouped && spec.group != kAutoGroup) {
      // Block-wise codecs cut the hidden dimension into groups of `group` values.
      if (!is_group_size(spec.group))
        fail(key + ".group",
             std::to_string(spec.group) +
                 " is not a supported group size; expected 32, 64, 128, 256, 512 or auto",
             line);
      if (d_model_ % spec.group != 0)
        fail(key + ".group",
             std::to_string(spec.group) + " does not divide model.d_model = " +
                 std::to_string(d_model_) + "; expected a group size that divides d_model, or auto",
             line);
    }
    // Names are enums and the group is checked: what is left cannot fail.
    const CodecOptions o = codec_options_from_spec(spec);
    const std::string problem = validate(o, /*allow_auto_group=*/true);
    TACO_CHECK(problem.empty(), key + ": " + problem);
    return o;
  }

  ParsedRule rule(const CompressionRule& rule, size_t index) const {
    const std::string key = "compression.rules[" + std::to_string(index) + "]";
    ParsedRule p;
    p.layers.assign(size_t(n_layer_), false);
    try {
      for (int l : parse_layer_ranges(rule.layers, n_layer_)) p.layers[size_t(l)] = true;
    } catch (const UserError& e) {
      fail(key + ".layers", e.what(), rule.line);
    }
    p.all_layers = std::all_of(p.layers.begin(), p.layers.end(), [](bool b) { return b; });
    if (rule.sites.empty()) p.sites.fill(true);
    for (size_t j = 0; j < rule.sites.size(); ++j) {
      const std::string& name = rule.sites[j];
      const std::string site_key = key + ".sites[" + std::to_string(j) + "]";
      Site site;
      if (!parse_site(name, &site))
        fail(site_key, "unknown site '" + name + "'; expected one of " + site_list(), rule.line);
      if (!site_is_compressible(site))
        fail(site_key,
             name +
                 " is never compressed (it always takes the backend's own collective); "
                 "expected one of " +
                 site_list(),
             rule.line);
      if (!site_is_per_layer(site) && !p.all_layers)
        fail(site_key,
             name +
                 " belongs to no layer, so a rule naming it needs layers: all; expected layers: "
                 "all, or " +
                 name + " moved to a rule of its own with layers: all",
             rule.line);
      p.sites[size_t(site)] = true;
    }
    p.choice = choice(rule.spec, key, rule.line);
    return p;
  }

 private:
  int n_layer_;
  int d_model_;
  const std::string& source_;
};

// One character per distinct codec: '.' for none, then A-Z, a-z in order of appearance.
class Legend {
 public:
  char symbol(const CodecOptions& o, bool automatic) {
    if (o.kind == CodecKind::none) return '.';
    for (size_t i = 0; i < seen_.size(); ++i) {
      if (seen_[i].options == o && seen_[i].automatic == automatic) return letter(i);
    }
    seen_.push_back(Choice{o, automatic});
    return letter(seen_.size() - 1);
  }
  std::string text() const {
    std::string s = "  . none\n";
    for (size_t i = 0; i < seen_.size(); ++i) {
      s += std::string("  ") + letter(i) + " " +
           (seen_[i].automatic ? "auto: none or " + describe(seen_[i].options) +
                                     ", whichever measures faster per message size"
                               : describe(seen_[i].options)) +
           "\n";
    }
    return s;
  }

 private:
  static char letter(size_t i) {
    return i < 26 ? char('A' + i) : i < 52 ? char('a' + i - 26) : '?';
  }
  std::vector<Choice> seen_;
};

bool is_auto(const CodecOptions& o) {
  return o.group == kAutoGroup && (o.kind == CodecKind::fp8_block || o.kind == CodecKind::taco);
}

// The policy's tables hold the compressible sites only.
void check_compressible(Site site) {
  TACO_CHECK(site_is_compressible(site), std::string("site ") + site_name(site) +
                                             " is never compressed: the policy has no entry");
}

constexpr Site kBlockSites[] = {Site::attn_in_fwd,  Site::attn_in_bwd, Site::attn_out_fwd,
                                Site::attn_out_bwd, Site::mlp_in_fwd,  Site::mlp_in_bwd,
                                Site::mlp_out_fwd,  Site::mlp_out_bwd};

}  // namespace

CompressionPolicy::CompressionPolicy(const CompressionSection& section, int n_layer, int d_model,
                                     const std::string& source)
    : n_layer_(n_layer),
      min_bytes_(section.min_bytes),
      calibrate_steps_(section.calibrate_steps),
      chunks_(section.chunks),
      auto_margin_(section.auto_margin),
      auto_recheck_steps_(section.auto_recheck_steps),
      per_layer_(size_t(std::max(n_layer, 0))),
      per_layer_auto_(size_t(std::max(n_layer, 0))) {
  if (n_layer < 1) throw UserError(source + ": model.n_layer must be at least 1");
  const SectionReader read(n_layer, d_model, source);
  if (section.min_bytes < 0)
    read.fail("compression.min_bytes", std::to_string(section.min_bytes) +
                                           " is negative; expected an integer >= 0 (0 "
                                           "compresses every message)");
  if (section.calibrate_steps < 0)
    read.fail("compression.calibrate_steps",
              std::to_string(section.calibrate_steps) + " is negative; expected an integer >= 0");
  if (section.chunks < 0)
    read.fail("compression.chunks", std::to_string(section.chunks) +
                                        " is negative; expected auto or a number of pipeline "
                                        "pieces >= 1");
  if (!(section.auto_margin >= 0 && section.auto_margin < 1))
    read.fail("compression.auto_margin",
              short_number(section.auto_margin) +
                  " is out of range; expected a number in [0, 1) (0.1: codec: auto compresses "
                  "where the compressed collective is predicted at least 10% faster)");
  if (section.auto_recheck_steps < 0)
    read.fail("compression.auto_recheck_steps",
              std::to_string(section.auto_recheck_steps) +
                  " is negative; expected an integer >= 0 (0 decides once)");
  const Choice fallback = read.choice(section.default_spec, "compression.default", 0);
  std::vector<ParsedRule> rules;
  for (size_t i = 0; i < section.rules.size(); ++i) rules.push_back(read.rule(section.rules[i], i));

  // The first spec that decides some (layer, site) with group auto, for the message below (a
  // rule that every earlier rule shadows needs no calibration).
  std::string auto_spec;
  auto first_match = [&](int layer, Site site) {
    for (size_t i = 0; i < rules.size(); ++i) {
      const ParsedRule& r = rules[i];
      const bool layer_ok = layer < 0 ? r.all_layers : bool(r.layers[size_t(layer)]);
      if (!layer_ok || !r.sites[size_t(site)]) continue;
      if (auto_spec.empty() && is_auto(r.choice.options))
        auto_spec = "compression.rules[" + std::to_string(i) + "]";
      return r.choice;
    }
    if (auto_spec.empty() && is_auto(fallback.options)) auto_spec = "compression.default";
    return fallback;
  };
  for (Site site : compressible_sites()) {
    const int layers = site_is_per_layer(site) ? n_layer : 1;
    for (int l = 0; l < layers; ++l) {
      const int layer = site_is_per_layer(site) ? l : -1;
      const Choice c = first_match(layer, site);
      at(layer, site) = c.options;
      (layer < 0 ? model_wide_auto_ : per_layer_auto_[size_t(l)])[size_t(site)] = c.automatic;
    }
  }
  if (!auto_spec.empty() && section.calibrate_steps <= 0)
    read.fail("compression.calibrate_steps",
              std::to_string(section.calibrate_steps) + ", but " + auto_spec +
                  " says group: auto; expected an integer >= 1 (the steps whose tensors choose "
                  "the group)");
}

CodecOptions& CompressionPolicy::at(int layer, Site site) {
  check_compressible(site);
  if (!site_is_per_layer(site)) return model_wide_[size_t(site)];
  TACO_CHECK(layer >= 0 && layer < n_layer_,
             std::string("layer ") + std::to_string(layer) + " for site " + site_name(site));
  return per_layer_[size_t(layer)][size_t(site)];
}

const CodecOptions& CompressionPolicy::configured(int layer, Site site) const {
  return const_cast<CompressionPolicy*>(this)->at(layer, site);
}

bool CompressionPolicy::automatic(int layer, Site site) const {
  check_compressible(site);
  if (!site_is_per_layer(site)) return model_wide_auto_[size_t(site)];
  TACO_CHECK(layer >= 0 && layer < n_layer_,
             std::string("layer ") + std::to_string(layer) + " for site " + site_name(site));
  return per_layer_auto_[size_t(layer)][size_t(site)];
}

bool CompressionPolicy::any_automatic() const {
  for (Site site : compressible_sites()) {
    for (int l = 0; l < (site_is_per_layer(site) ? n_layer_ : 1); ++l)
      if (automatic(site_is_per_layer(site) ? l : -1, site)) return true;
  }
  return false;
}

CodecOptions CompressionPolicy::resolve(int layer, Site site, int64_t logical_bytes) const {
  if (logical_bytes < min_bytes_) return CodecOptions{};
  CodecOptions o = configured(layer, site);
  if (is_auto(o)) {
    o.group = kUncalibratedGroup;
    o.axis = GroupAxis::hidden;
  }
  return o;
}

std::vector<Site> CompressionPolicy::sites_to_calibrate() const {
  std::vector<Site> out;
  for (Site site : compressible_sites()) {
    const int layers = site_is_per_layer(site) ? n_layer_ : 1;
    for (int l = 0; l < layers; ++l) {
      if (is_auto(configured(l, site))) {
        out.push_back(site);
        break;
      }
    }
  }
  return out;
}

void CompressionPolicy::apply_calibration(Site site, int group, GroupAxis axis) {
  TACO_CHECK(is_group_size(group), "calibrated group " + std::to_string(group));
  const int layers = site_is_per_layer(site) ? n_layer_ : 1;
  for (int l = 0; l < layers; ++l) {
    CodecOptions& o = at(l, site);
    if (is_auto(o)) {
      o.group = group;
      o.axis = axis;
    }
  }
  ++revision_;
}

std::string CompressionPolicy::table() const {
  Legend legend;
  std::vector<std::string> rows;  // one string of symbols per layer
  for (int l = 0; l < n_layer_; ++l) {
    std::string r;
    for (Site s : kBlockSites) r += legend.symbol(configured(l, s), automatic(l, s));
    rows.push_back(r);
  }
  std::string model_wide = "model-wide:";
  for (Site s : compressible_sites()) {
    if (site_is_per_layer(s)) continue;
    model_wide +=
        std::string(" ") + site_name(s) + " " + legend.symbol(configured(-1, s), automatic(-1, s));
  }

  // min_bytes 0 exempts nothing: say so rather than "messages under 0 bytes".
  const std::string small =
      min_bytes_ > 0 ? "messages under " + std::to_string(min_bytes_) + " bytes go uncompressed"
                     : "every message takes its codec whatever its size (compression.min_bytes 0)";
  std::string out = "compression: first matching rule wins; " + small + "\n" + legend.text();
  out += "  layer   attn.in   attn.out  mlp.in    mlp.out\n";
  out += "          fwd bwd   fwd bwd   fwd bwd   fwd bwd\n";
  for (int l = 0; l < n_layer_;) {
    int end = l;
    while (end + 1 < n_layer_ && rows[size_t(end + 1)] == rows[size_t(l)]) ++end;
    const std::string label =
        l == end ? std::to_string(l) : std::to_string(l) + "-" + std::to_string(end);
    char line[128];
    const std::string& r = rows[size_t(l)];
    std::snprintf(line, sizeof line, "  %-8s%c   %c     %c   %c     %c   %c     %c   %c\n",
                  label.c_str(), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    out += line;
    l = end + 1;
  }
  return out + "  " + model_wide + "\n";
}

}  // namespace taco
