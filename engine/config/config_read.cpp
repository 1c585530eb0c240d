// The typed reading of a config tree: every key known, every value of its key's type, enum
// values among their choices (the codec names into compression/'s enums), and the five model keys
// present. Ranges come later (config_validate.cpp).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config_schema.h"
#include "engine/config/config_source.h"

namespace taco::config_detail {
namespace {

// One `key: value` of a map, with the line of its key (or of the list item).
struct Entry {
  std::string key;
  YAML::Node value;
  std::string path;
  YAML::Mark mark;
};

// Levenshtein distance where swapping two neighbours also costs 1 ("trian" -> "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// " (did you mean PATH?)" for the known key closest to `key`, within 2 edits and no more edits
// than half its length ("foo" is not a typo of "log"), else "".
std::string suggestion(const std::string& key, const std::vector<std::string>& known,
                       const std::string& parent) {
  const std::string* best = nullptr;
  size_t best_distance = 3;
  for (const auto& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_distance && 2 * d <= std::max(key.size(), k.size())) {
      best = &k;
      best_distance = d;
    }
  }
  return best ? " (did you mean " + join_path(parent, *best) + "?)" : "";
}

std::string shown(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "no value";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "'" + n.Scalar() + "'";
}

template <class T>
std::optional<T> parse_number(std::string text) {
  if (!text.empty() && text[0] == '+') text.erase(0, 1);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

class Reader {
 public:
  explicit Reader(const ConfigSource& source) : source_(source) {}

  Config config() const {
    Config c;
    bool have_model = false;
    const Entry root{"", source_.root(), "", YAML::Mark::null_mark()};
    each_entry(root, kSections, "a map of sections: " + join(kSections, ", "), [&](const Entry& e) {
      if (e.key == "run") fields(e, kRunFields, &c.run);
      if (e.key == "model") {
        model(e, &c.model);
        have_model = true;
      }
      if (e.key == "parallel") fields(e, kParallelFields, &c.parallel);
      if (e.key == "train") fields(e, kTrainFields, &c.train);
      if (e.key == "data") fields(e, kDataFields, &c.data);
      if (e.key == "compression") compression(e, &c.compression);
      if (e.key == "checkpoint") fields(e, kCheckpointFields, &c.checkpoint);
      if (e.key == "log") fields(e, kLogFields, &c.log);
    });
    if (!have_model)
      source_.fail("model", "missing required section",
                   "model: { n_layer: N, n_head: N, d_model: N, seq_len: N, vocab_size: N }");
    return c;
  }

 private:
  [[noreturn]] void fail(const Entry& e, const std::string& what,
                         const std::string& expected) const {
    source_.fail(e.path, what, expected, e.mark);
  }

  // Checks that `map` is a map (no value = empty) whose keys are all in `known`, once each, and
  // calls fn(entry) for each.
  template <class Fn>
  void each_entry(const Entry& map, const std::vector<std::string>& known,
                  const std::string& expected_map, Fn fn) const {
    const YAML::Node& node = map.value;
    if (node.IsNull()) return;
    if (!node.IsMap()) fail(map, "got " + shown(node), expected_map);
    std::vector<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar())
        source_.fail(map.path, "a key that is " + shown(it->first), "key names", it->first.Mark());
      const Entry e{it->first.Scalar(), it->second, join_path(map.path, it->first.Scalar()),
                    it->first.Mark()};
      if (std::find(known.begin(), known.end(), e.key) == known.end())
        fail(e, "unknown key" + suggestion(e.key, known, map.path), "one of " + join(known, ", "));
      if (std::find(seen.begin(), seen.end(), e.key) != seen.end())
        fail(e, "duplicate key", "each key at most once");
      seen.push_back(e.key);
      fn(e);
    }
  }

  template <class S>
  void fields(const Entry& map, const std::vector<Field<S>>& table, S* out) const {
    const auto keys = keys_of(table);
    each_entry(map, keys, "a map { " + join(keys, ", ") + " }", [&](const Entry& e) {
      for (const auto& f : table) {
        if (e.key == f.key)
          std::visit([&](auto member) { read(e, f.choices, &(out->*member)); }, f.member);
      }
    });
  }

  void model(const Entry& map, ModelSection* out) const {
    fields(map, kModelFields, out);
    for (const auto& f : kModelFields) {
      const YAML::Node& node = map.value;
      if (!node[f.key].IsDefined())
        fail({f.key, {}, join_path(map.path, f.key), map.mark}, "missing required key",
             "an integer; model needs all of " + join(keys_of(kModelFields), ", "));
    }
  }

  void compression(const Entry& map, CompressionSection* out) const {
    each_entry(map, kCompressionKeys, "a map { " + join(kCompressionKeys, ", ") + " }",
               [&](const Entry& e) {
                 if (e.key == "default") codec_spec(e, &out->default_spec);
                 if (e.key == "min_bytes") read(e, {}, &out->min_bytes);
                 if (e.key == "calibrate_steps") read(e, {}, &out->calibrate_steps);
                 if (e.key == "chunks") chunks(e, &out->chunks);
                 if (e.key == "auto_margin") read(e, {}, &out->auto_margin);
                 if (e.key == "auto_recheck_steps") read(e, {}, &out->auto_recheck_steps);
                 if (e.key == "rules") rules(e, &out->rules);
               });
  }

  // Pipeline pieces of a compressed collective: `auto` (0) or an integer >= 1.
  void chunks(const Entry& e, int* out) const {
    const std::string expected = "an integer >= 1 or auto";
    const std::string text = present_scalar(e, expected);
    if (text == "auto") {
      *out = 0;
      return;
    }
    const auto value = parse_number<int>(text);
    if (!value || *value < 1)
      fail(e, "'" + text + "' is not a number of pipeline pieces", expected);
    *out = *value;
  }

  void codec_spec(const Entry& map, CodecSpec* out) const {
    each_entry(map, kCodecKeys,
               "a map like { codec: taco, format: e4m3, group: 128, scales: dual }",
               [&](const Entry& e) { codec_key(e, out); });
  }

  void codec_key(const Entry& e, CodecSpec* out) const {
    if (e.key == "group") {
      const std::string expected = "32, 64, 128, 256, 512 or auto";
      const std::string text = scalar(e, expected);
      if (text == "auto") {
        out->group = 0;
        return;
      }
      const auto group = parse_number<int>(text);
      if (!group || !is_group_size(*group))
        fail(e, "'" + text + "' is not a supported group size", expected);
      out->group = *group;
      return;
    }
    if (e.key == "codec") {
      // codec: auto is no codec of its own: a flag, `candidate` being what it may choose.
      out->codec_auto = scalar(e, "one of " + join(kCodecChoices, ", ")) == "auto";
      if (out->codec_auto) {
        out->codec = CodecKind::none;
        return;
      }
    }
    for (const auto& f : kCodecFields) {
      if (e.key == f.key)
        std::visit([&](auto member) { read(e, f.choices, &(out->*member)); }, f.member);
    }
  }

  void rules(const Entry& list, std::vector<CompressionRule>* out) const {
    const YAML::Node& node = list.value;
    if (node.IsNull()) return;
    const std::string rule_form =
        "{ layers: \"1-3\", sites: [attn.out.fwd, mlp.out.fwd], codec: taco }";
    if (!node.IsSequence()) fail(list, "got " + shown(node), "a list of rules, each " + rule_form);
    for (size_t i = 0; i < node.size(); ++i) {
      const Entry item{"", node[i], index_path(list.path, i), node[i].Mark()};
      if (!item.value.IsMap()) fail(item, "got " + shown(item.value), "a rule " + rule_form);
      CompressionRule rule;
      rule.line = source_.from_override(item.path) ? 0 : item.mark.line + 1;
      each_entry(item, kRuleKeys, "a rule " + rule_form, [&](const Entry& e) {
        if (e.key == "layers") {
          rule.layers = scalar(e, "a string such as \"all\", \"3\", \"1-3\" or \"0,2,5-7\"");
        } else if (e.key == "sites") {
          sites(e, &rule.sites);
        } else {
          codec_key(e, &rule.spec);
        }
      });
      out->push_back(rule);
    }
  }

  // A list of site names; one name alone is a list of one; no value is the empty list.
  void sites(const Entry& e, std::vector<std::string>* out) const {
    const std::string expected = "a list of site names such as [attn.out.fwd, mlp.out.fwd]";
    const YAML::Node& node = e.value;
    if (node.IsNull()) return;
    if (node.IsScalar()) {
      out->push_back(node.Scalar());
      return;
    }
    if (!node.IsSequence()) fail(e, "got " + shown(node), expected);
    for (size_t i = 0; i < node.size(); ++i) {
      const Entry site{"", node[i], index_path(e.path, i), node[i].Mark()};
      out->push_back(scalar(site, "a site name such as attn.out.fwd"));
    }
  }

  // The text of a scalar value (no value reads as ""), or fails with `expected`.
  std::string scalar(const Entry& e, const std::string& expected) const {
    if (e.value.IsNull()) return "";
    if (!e.value.IsScalar()) fail(e, "got " + shown(e.value), expected);
    return e.value.Scalar();
  }

  // A scalar that must be present (numbers and booleans).
  std::string present_scalar(const Entry& e, const std::string& expected) const {
    if (!e.value.IsScalar()) fail(e, "got " + shown(e.value), expected);
    return e.value.Scalar();
  }

  int64_t integer(const Entry& e, int64_t lo, int64_t hi) const {
    const std::string text = present_scalar(e, "an integer");
    const auto value = parse_number<int64_t>(text);
    if (!value) fail(e, "'" + text + "' is not an integer", "an integer");
    if (*value < lo || *value > hi)
      fail(e, "'" + text + "' is out of range",
           "an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
    return *value;
  }

  void read(const Entry& e, const Choices&, int* out) const {
    *out = static_cast<int>(integer(e, INT_MIN, INT_MAX));
  }

  void read(const Entry& e, const Choices&, int64_t* out) const {
    *out = integer(e, INT64_MIN, INT64_MAX);
  }

  void read(const Entry& e, const Choices&, uint64_t* out) const {
    const std::string expected = "an integer from 0 to " + std::to_string(UINT64_MAX);
    const std::string text = present_scalar(e, expected);
    const auto value = parse_number<uint64_t>(text);
    if (!value) fail(e, "'" + text + "' is not a non-negative integer", expected);
    *out = *value;
  }

  void read(const Entry& e, const Choices&, double* out) const {
    const std::string expected = "a number such as 3e-4";
    const std::string text = present_scalar(e, expected);
    const auto value = parse_number<double>(text);
    if (!value || !std::isfinite(*value))
      fail(e, "'" + text + "' is not a finite number", expected);
    *out = *value;
  }

  void read(const Entry& e, const Choices&, bool* out) const {
    const std::string text = present_scalar(e, "true or false");
    std::string lower = text;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower == "true" || lower == "yes" || lower == "on") {
      *out = true;
    } else if (lower == "false" || lower == "no" || lower == "off") {
      *out = false;
    } else {
      fail(e, "'" + text + "' is not a boolean", "true or false");
    }
  }

  void read(const Entry& e, const Choices& choices, std::string* out) const {
    const std::string expected = choices.empty() ? "a string" : "one of " + join(choices, ", ");
    *out = scalar(e, expected);
    if (!choices.empty() && std::find(choices.begin(), choices.end(), *out) == choices.end())
      fail(e, "unknown value '" + *out + "'", expected);
  }

  // An enum of compression/, by its name (the field's choices are those names).
  template <class E>
  void read_enum(const Entry& e, const Choices& choices, bool (*parse)(std::string_view, E*),
                 E* out) const {
    const std::string expected = "one of " + join(choices, ", ");
    const std::string text = scalar(e, expected);
    if (!parse(text, out)) fail(e, "unknown value '" + text + "'", expected);
  }

  void read(const Entry& e, const Choices& choices, CodecKind* out) const {
    read_enum(e, choices, parse_codec_kind, out);
  }
  void read(const Entry& e, const Choices& choices, Fp8Format* out) const {
    read_enum(e, choices, parse_fp8_format, out);
  }
  void read(const Entry& e, const Choices& choices, Fp8Scales* out) const {
    read_enum(e, choices, parse_fp8_scales, out);
  }

  const ConfigSource& source_;
};

}  // namespace

Config read_config(const ConfigSource& source) { return Reader(source).config(); }

}  // namespace taco::config_detail
