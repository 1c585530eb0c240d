// docs/config-reference.md and taco-train --help's key list, written from the key tables
// (config_schema.h) and the site names (compression/spec.h). The prose around the tables lives
// here too, so regenerating the file never loses text.
#include "engine/config/config_reference.h"

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/config/config_schema.h"

namespace taco {
namespace config_detail {
namespace {

// What each communication site moves (docs/design.md §3). Keyed by name; every name in
// kSiteNames needs an entry (undocumented_config_keys checks).
struct SiteDoc {
  const char* site;
  const char* scope;
  const char* doc;
};

const std::vector<SiteDoc> kSiteDocs = {
    {"embed.fwd", "model-wide",
     "All-reduce of the vocab-parallel embedding's output (SP: reduce-scatter)."},
    {"embed.bwd", "model-wide", "Nothing without SP; SP: all-gather of the embedding's gradient."},
    {"attn.in.fwd", "per layer", "Nothing without SP; SP: all-gather of LN1's output rows."},
    {"attn.in.bwd", "per layer",
     "All-reduce of the gradient flowing back into LN1's output (SP: reduce-scatter)."},
    {"attn.out.fwd", "per layer",
     "All-reduce of the row-parallel attention projection's partial sums (SP: reduce-scatter)."},
    {"attn.out.bwd", "per layer",
     "Nothing without SP; SP: all-gather of the projection output's gradient."},
    {"mlp.in.fwd", "per layer", "Nothing without SP; SP: all-gather of LN2's output rows."},
    {"mlp.in.bwd", "per layer",
     "All-reduce of the gradient flowing back into LN2's output (SP: reduce-scatter)."},
    {"mlp.out.fwd", "per layer",
     "All-reduce of the row-parallel fc2's partial sums (SP: reduce-scatter)."},
    {"mlp.out.bwd", "per layer", "Nothing without SP; SP: all-gather of fc2 output's gradient."},
    {"head.in.fwd", "model-wide",
     "Nothing without SP; SP: all-gather of the final LayerNorm's output rows."},
    {"head.in.bwd", "model-wide",
     "All-reduce of the gradient flowing back into the final LayerNorm's output (SP: "
     "reduce-scatter)."},
    {"pp.act", "model-wide", "Activations sent to the next pipeline stage (pp > 1)."},
    {"pp.grad", "model-wide", "Activation gradients sent back to the previous stage (pp > 1)."},
    {"dp.grad", "model-wide",
     "Gradient sum over the dp replicas: all-reduce, or reduce-scatter with parallel.zero: 1."},
};

// Names that appear in the logs and metrics.jsonl but that no rule can name: always native.
const std::vector<SiteDoc> kAccountedOnly = {
    {"sp.grad", "per layer and model-wide",
     "SP only: sum over tp of the replicated parameters' gradients (LayerNorms, positions)."},
    {"tied.grad", "model-wide",
     "pp > 1: sum of the tied word embedding's two gradient copies (first and last stage)."},
    {"dp.param", "model-wide", "parallel.zero: 1: all-gather of the updated parameter shards."},
};

const SiteDoc* site_doc(std::string_view site) {
  for (const auto& d : kSiteDocs)
    if (site == d.site) return &d;
  return nullptr;
}

const KeyDoc* key_doc(std::string_view path) {
  for (const auto& d : kCompressionDocs)
    if (path == d.path) return &d;
  return nullptr;
}

template <class S>
const Field<S>* field(const std::vector<Field<S>>& table, std::string_view key) {
  for (const auto& f : table)
    if (key == f.key) return &f;
  return nullptr;
}

// A Markdown table cell: '|' would end the cell.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// `text` as Markdown lines of at most 100 columns (a word longer than that stands alone), ending
// in a newline; the Markdown renders the same, and the file reads well as plain text.
std::string wrap(std::string_view text) {
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(at, end - at);
    if (!line.empty() && line.size() + 1 + word.size() > 100) {
      out += line + "\n";
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    at = end + 1;
  }
  return out + line + "\n";
}

// One table row: `name` in code, then the other cells escaped.
std::string row(const std::string& name, const std::vector<std::string>& cells) {
  std::string out = "| `" + name + "` |";
  for (const auto& c : cells) out += " " + cell(c) + " |";
  return out + "\n";
}

const char* const kKeyTable = "| key | type | default | meaning |\n|---|---|---|---|\n";
const char* const kSiteTable = "| site | scope | what it moves |\n|---|---|---|\n";

std::string code(const std::string& text) { return text.empty() ? "\"\"" : "`" + text + "`"; }

template <class S>
std::string type_of(const Field<S>& f) {
  if (!f.choices.empty()) return join(f.choices, " | ");
  struct Visitor {
    std::string operator()(int S::*) const { return "integer"; }
    std::string operator()(int64_t S::*) const { return "integer"; }
    std::string operator()(uint64_t S::*) const { return "integer >= 0"; }
    std::string operator()(double S::*) const { return "number"; }
    std::string operator()(bool S::*) const { return "true | false"; }
    std::string operator()(std::string S::*) const { return "string"; }
    // Enums always list their choices (above).
    std::string operator()(CodecKind S::*) const { return "string"; }
    std::string operator()(Fp8Format S::*) const { return "string"; }
    std::string operator()(Fp8Scales S::*) const { return "string"; }
  };
  return std::visit(Visitor{}, f.member);
}

template <class S>
std::string section_table(const std::string& name, const std::vector<Field<S>>& table,
                          bool required) {
  const S defaults{};
  std::string out = kKeyTable;
  for (const auto& f : table) {
    const std::string value = required ? "required" : code(field_value(defaults, f));
    out += row(name + "." + f.key, {type_of(f), value, f.doc});
  }
  return out;
}

std::string codec_default(const CodecSpec& spec, std::string_view key) {
  if (key == "group") return spec.group == 0 ? "auto" : std::to_string(spec.group);
  const Field<CodecSpec>* f = field(kCodecFields, key);
  return f ? field_value(spec, *f) : "";
}

// Type and meaning of one codec-spec key (codec, format, group, scales).
std::pair<std::string, std::string> codec_key_doc(std::string_view key) {
  if (key == "group") {
    const KeyDoc* d = key_doc("codec.group");
    return {d ? d->type : "", d ? d->doc : ""};
  }
  const Field<CodecSpec>* f = field(kCodecFields, key);
  return {f ? type_of(*f) : "", f ? f->doc : ""};
}

// Long on purpose: mostly the prose and examples of the compression section, in reading order.
std::string compression_part() {
  const CompressionSection defaults{};
  std::string out;
  out += kKeyTable;
  for (const auto& key : kCompressionKeys) {
    const std::string path = "compression." + key;
    const KeyDoc* d = key_doc(path);
    std::string value;
    if (key == "default") value = "`{ codec: " + yaml_value(defaults.default_spec.codec) + " }`";
    if (key == "min_bytes") value = code(std::to_string(defaults.min_bytes));
    if (key == "calibrate_steps") value = code(std::to_string(defaults.calibrate_steps));
    if (key == "chunks")
      value = code(defaults.chunks == 0 ? "auto" : std::to_string(defaults.chunks));
    if (key == "auto_margin") value = code(yaml_value(defaults.auto_margin));
    if (key == "auto_recheck_steps") value = code(std::to_string(defaults.auto_recheck_steps));
    if (key == "rules") value = "`[]`";
    out += row(path, {d ? d->type : "", value, d ? d->doc : ""});
  }

  out += "\n### Codec spec: `compression.default` and each rule\n\n" +
         wrap(
             "Keys a codec does not use are ignored (`fp8_tensor` has no group; `fp8_block` sends "
             "one scale per group, so `dual` reads as `single`).") +
         "\n" + kKeyTable;
  const CodecSpec spec_defaults{};
  for (const auto& key : kCodecKeys) {
    const auto [type, doc] = codec_key_doc(key);
    out += row(key, {type, code(codec_default(spec_defaults, key)), doc});
  }

  out += "\n### Rules: `compression.rules[i]`\n\n" +
         wrap(
             "A rule is a map of the keys below; a message at (layer, site) takes the first rule "
             "whose `layers` and `sites` both match it, else `compression.default`, and a message "
             "under `compression.min_bytes` always goes uncompressed.") +
         "\n" + kKeyTable;
  for (const auto& key : kRuleKeys) {
    const KeyDoc* d = key_doc("rule." + key);
    if (d) {
      const std::string value = key == "layers" ? "`\"all\"`" : "`[]` (every site)";
      out += row(key, {d->type, value, d->doc});
    } else {
      const auto [type, doc] = codec_key_doc(key);
      out += row(key, {type, code(codec_default(spec_defaults, key)), "as in the codec spec"});
    }
  }
  out +=
      "\n" +
      wrap(
          "Layer syntax (`layers`): `all`; one block `3`; an inclusive range `1-3`; a comma "
          "list of both, `0,2,5-7` (spaces around items are ignored). Indices count from 0 "
          "and must be below `model.n_layer`. Model-wide sites belong to no layer: a rule "
          "reaches them only when its layers cover every block (`all`, or a list naming them "
          "all), and a rule that names one in `sites` with fewer layers is refused.") +
      "\n" +
      wrap(
          "Example: taco on the two row-parallel outputs of blocks 1-3, FP8 block scaling on "
          "every other site:") +
      "\n"
      "```yaml\n"
      "compression:\n"
      "  default: { codec: fp8_block, group: 64, scales: e8m0 }\n"
      "  min_bytes: 65536\n"
      "  rules:\n"
      "    - { layers: \"1-3\", sites: [attn.out.fwd, mlp.out.fwd], codec: taco }\n"
      "```\n"
      "\n" +
      wrap(
          "`codec: auto` lets the run decide instead of `min_bytes`: at the first use of each "
          "(layer, site, message size) the group times its native collective at three sizes "
          "(once per group: a latency and bandwidth fit), times the candidate's encode and decode "
          "on a "
          "message of that shape, and compresses only where encode + compressed transfer + decode "
          "is "
          "predicted below (1 - `auto_margin`) x the native transfer. Every rank of the group "
          "decides on the slowest rank's numbers, so all agree. The decisions are logged as a "
          "table after the first step. Pipeline messages (`pp.act`, `pp.grad`) are decided "
          "before the first step, since the two ends of a send cannot agree inside it: the pp "
          "group times a ring of send_recv calls for its link, and both ends read the one "
          "decision. Example: decide for every site, with fp8_block "
          "as the candidate of the MLP's input gradient:") +
      "\n"
      "```yaml\n"
      "compression:\n"
      "  default: { codec: auto }            # candidate taco\n"
      "  auto_margin: 0.1\n"
      "  auto_recheck_steps: 500\n"
      "  rules:\n"
      "    - { layers: all, sites: [mlp.in.bwd], codec: auto, candidate: fp8_block, group: 64 }\n"
      "```\n";
  return out;
}

std::string sites_part() {
  std::string out =
      wrap(
          "Every collective of a training step names one of these sites; a rule's `sites` list "
          "takes these names. Per-layer sites have one instance per block (the layer a rule's "
          "`layers` selects); model-wide ones have none. \"Nothing\" means the mapping is an "
          "identity in that direction, so the site carries no traffic; SP is "
          "`parallel.sequence_parallel: true`. The tensor-parallel sites (`embed.*`, `attn.*`, "
          "`mlp.*`, `head.in.*`) carry traffic only when `parallel.tp` > 1.") +
      "\n" + kSiteTable;
  for (const auto& name : kSiteNames) {
    const SiteDoc* d = site_doc(name);
    out += row(std::string(name), {d ? d->scope : "", d ? d->doc : ""});
  }
  out += "\n" +
         wrap(
             "These names also appear in the logs and metrics.jsonl but no rule can name them; "
             "they always take the backend's own collective:") +
         "\n" + kSiteTable;
  for (const auto& d : kAccountedOnly) out += row(d.site, {d.scope, d.doc});
  out += "\n" + wrap(
                    "The cross-entropy's two small reductions (row max and exp-sum over the "
                    "vocabulary shards) and the step's loss and gradient-norm sums are exact and "
                    "never compressed.");
  return out;
}

}  // namespace
}  // namespace config_detail

std::string config_reference_markdown() {
  using namespace config_detail;
  std::string out =
      "# Config reference\n\n" +
      wrap(
          "<!-- Generated by `build/taco-train --print-config-reference` from "
          "engine/config/config_schema.h, engine/config/config_reference.cpp and "
          "compression/spec.h; edit the meaning texts there, not here. "
          "tests/unit/test_config_reference.cpp fails when this file is out of date. -->") +
      "\n" +
      wrap(
          "A taco experiment is one YAML file of the sections below (`configs/tiny-cpu.yaml` is "
          "the "
          "embedded default that `taco-train` runs without a file). Any key can also be set on the "
          "command line, applied in order after the file: `--set train.lr=3e-4`, "
          "`--set compression.default={codec: taco}`, `--set compression.rules.0.codec=fp8_block`. "
          "An unknown key, a wrong type or a value out of range stops every rank before any work, "
          "with one line naming the file and line (or the `--set`), the key and what is accepted "
          "(exit code 2). The effective config, every default filled in, is printed at start and "
          "saved as `runs/<name>/config.yaml`, which loads again as a config.") +
      "\n" +
      wrap(
          "Defaults are what a key left out of the file takes. The `model` section must be "
          "present with all five keys.");
  out += "\n## run\n\n" + section_table("run", kRunFields, false);
  out += "\n## model\n\n" + section_table("model", kModelFields, true);
  out += "\n## parallel\n\n" + section_table("parallel", kParallelFields, false);
  out += "\n## train\n\n" + section_table("train", kTrainFields, false);
  out += "\n## data\n\n" + section_table("data", kDataFields, false);
  out += "\n## compression\n\n" +
         wrap(
             "Which codec each tensor-parallel, pipeline and data-parallel message travels "
             "with, per layer and per site ([architecture.md](architecture.md) has the wire "
             "format and where each site sits in a step).") +
         "\n" + compression_part();
  out += "\n## checkpoint\n\n" + section_table("checkpoint", kCheckpointFields, false);
  out += "\n## log\n\n" + section_table("log", kLogFields, false);
  out += "\n## Communication sites\n\n" + sites_part();
  return out;
}

std::vector<std::string> undocumented_config_keys() {
  using namespace config_detail;
  std::vector<std::string> missing;
  auto check = [&](const std::string& section, const auto& table) {
    for (const auto& f : table)
      if (f.doc == nullptr || std::string_view(f.doc).empty())
        missing.push_back(section + "." + f.key);
  };
  check("run", kRunFields);
  check("model", kModelFields);
  check("parallel", kParallelFields);
  check("train", kTrainFields);
  check("data", kDataFields);
  check("checkpoint", kCheckpointFields);
  check("log", kLogFields);
  check("codec", kCodecFields);
  auto need = [&](const std::string& path) {
    const KeyDoc* d = key_doc(path);
    if (!d || std::string_view(d->doc).empty()) missing.push_back(path);
  };
  for (const auto& key : kCompressionKeys) need("compression." + key);
  for (const auto& key : kCodecKeys) {
    if (key == "group")
      need("codec.group");
    else if (!field(kCodecFields, key))
      missing.push_back("codec." + key);
  }
  for (const auto& key : kRuleKeys) {
    if (!field(kCodecFields, key) && key != "group") need("rule." + key);
  }
  for (const auto& name : kSiteNames) {
    const SiteDoc* d = site_doc(name);
    if (!d || std::string_view(d->doc).empty()) missing.push_back("site " + std::string(name));
  }
  return missing;
}

std::string config_keys_brief() {
  using namespace config_detail;
  std::string out;
  // "  head: a b c ...", wrapped before 90 columns under the first key.
  auto line = [&](const std::string& head, const std::vector<std::string>& keys) {
    std::string text = "  " + head;
    const size_t indent = text.size();
    size_t width = indent;
    for (const auto& k : keys) {
      if (width + 1 + k.size() > 90 && width > indent) {
        text += "\n" + std::string(indent, ' ');
        width = indent;
      }
      text += " " + k;
      width += 1 + k.size();
    }
    out += text + "\n";
  };
  line("run:", keys_of(kRunFields));
  line("model:", keys_of(kModelFields));
  line("parallel:", keys_of(kParallelFields));
  line("train:", keys_of(kTrainFields));
  line("data:", keys_of(kDataFields));
  line("compression:",
       {"default{" + join(kCodecKeys, " ") + "}", "min_bytes", "calibrate_steps", "chunks",
        "auto_margin", "auto_recheck_steps", "rules[{" + join(kRuleKeys, " ") + "}]"});
  line("checkpoint:", keys_of(kCheckpointFields));
  line("log:", keys_of(kLogFields));
  out += "Sites a rule can name (compression.rules[].sites):\n";
  std::vector<std::string> per_layer, model_wide;
  for (const auto& name : kSiteNames) {
    const SiteDoc* d = site_doc(name);
    const bool layer = d && std::string_view(d->scope) == "per layer";
    (layer ? per_layer : model_wide).emplace_back(name);
  }
  line("per layer:", per_layer);
  line("model-wide:", model_wide);
  return out;
}

}  // namespace taco
