// config_to_yaml: every key, one flow map per section, in the layout of configs/*.yaml.
#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/config_schema.h"
#include "engine/config/config_source.h"

namespace taco {
namespace config_detail {
namespace {

constexpr size_t kColumns = 100;
constexpr size_t kKeyWidth = 12;  // "checkpoint: " lines the maps up

bool is_plain_safe(const std::string& s) {
  if (s.empty() || s[0] == '-' || s == "null" || s == "Null" || s == "NULL") return false;
  for (unsigned char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string quoted(const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

std::string yaml_value(const std::string& s) { return is_plain_safe(s) ? s : quoted(s); }
std::string yaml_value(bool b) { return b ? "true" : "false"; }
std::string yaml_value(double d) { return number_text(d); }
std::string yaml_value(int v) { return std::to_string(v); }
std::string yaml_value(int64_t v) { return std::to_string(v); }
std::string yaml_value(uint64_t v) { return std::to_string(v); }
std::string yaml_value(CodecKind v) { return yaml_value(std::string(codec_kind_name(v))); }
std::string yaml_value(Fp8Format v) { return yaml_value(std::string(fp8_format_name(v))); }
std::string yaml_value(Fp8Scales v) { return yaml_value(std::string(fp8_scales_name(v))); }

namespace {

template <class S>
std::vector<std::string> items(const S& section, const std::vector<Field<S>>& table) {
  std::vector<std::string> out;
  for (const auto& f : table) out.push_back(std::string(f.key) + ": " + field_value(section, f));
  return out;
}

// candidate only where it matters (codec: auto) or was changed, so that configs without auto
// read back as they always did.
std::vector<std::string> codec_items(const CodecSpec& spec) {
  std::vector<std::string> out = {"codec: " +
                                  (spec.codec_auto ? std::string("auto") : yaml_value(spec.codec))};
  if (spec.codec_auto || spec.candidate != CodecSpec{}.candidate)
    out.push_back("candidate: " + yaml_value(spec.candidate));
  out.push_back("format: " + yaml_value(spec.format));
  out.push_back("group: " + (spec.group == 0 ? std::string("auto") : std::to_string(spec.group)));
  out.push_back("scales: " + yaml_value(spec.scales));
  return out;
}

// "{ a: 1, b: 2 }" starting at column `column`: the entries joined by ", ", wrapped before kColumns
// with continuation lines aligned under the first entry.
std::string flow_map(const std::vector<std::string>& entries, size_t column) {
  std::string out = "{ ";
  size_t width = column + 2;
  for (size_t i = 0; i < entries.size(); ++i) {
    const bool last = i + 1 == entries.size();
    const size_t need = entries[i].size() + (last ? 2 : 1);
    if (i > 0 && width + 1 + need > kColumns) {
      out += "\n" + std::string(column + 2, ' ');
      width = column + 2;
    } else if (i > 0) {
      out += " ";
      ++width;
    }
    out += entries[i] + (last ? " }" : ",");
    width += need;
  }
  return entries.empty() ? "{}" : out;
}

std::string line(const std::string& indent, const std::string& key,
                 const std::vector<std::string>& entries) {
  std::string head = indent + key + ":";
  head.resize(std::max(head.size() + 1, kKeyWidth), ' ');
  return head + flow_map(entries, head.size()) + "\n";
}

std::string rule_text(const CompressionRule& rule) {
  std::vector<std::string> entries = {"layers: " + quoted(rule.layers)};
  // One piece per site, so that a long list wraps between sites: "sites: [a", "b", "c]".
  if (rule.sites.empty()) entries.push_back("sites: []");
  for (size_t i = 0; i < rule.sites.size(); ++i) {
    entries.push_back((i == 0 ? "sites: [" : "") + yaml_value(rule.sites[i]) +
                      (i + 1 == rule.sites.size() ? "]" : ""));
  }
  for (auto& e : codec_items(rule.spec)) entries.push_back(e);
  return "    - " + flow_map(entries, 6) + "\n";
}

}  // namespace
}  // namespace config_detail

std::string config_to_yaml(const Config& c) {
  using namespace config_detail;
  std::string out;
  out += line("", "run", items(c.run, kRunFields));
  out += line("", "model", items(c.model, kModelFields));
  out += line("", "parallel", items(c.parallel, kParallelFields));
  out += line("", "train", items(c.train, kTrainFields));
  out += line("", "data", items(c.data, kDataFields));
  out += "compression:\n";
  out += line("  ", "default", codec_items(c.compression.default_spec));
  out += "  min_bytes: " + std::to_string(c.compression.min_bytes) + "\n";
  out += "  calibrate_steps: " + std::to_string(c.compression.calibrate_steps) + "\n";
  out += "  chunks: " +
         (c.compression.chunks == 0 ? std::string("auto") : std::to_string(c.compression.chunks)) +
         "\n";
  out += "  auto_margin: " + yaml_value(c.compression.auto_margin) + "\n";
  out += "  auto_recheck_steps: " + std::to_string(c.compression.auto_recheck_steps) + "\n";
  out += c.compression.rules.empty() ? "  rules: []\n" : "  rules:\n";
  for (const auto& rule : c.compression.rules) out += rule_text(rule);
  out += line("", "checkpoint", items(c.checkpoint, kCheckpointFields));
  out += line("", "log", items(c.log, kLogFields));
  return out;
}

}  // namespace taco
