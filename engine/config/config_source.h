// Internal to engine/config: the YAML tree of one experiment, where each value in it came from
// (a line of the file or a --set override), and the one-line error that names that place.
//
// Paths name values the way messages print them: "train.lr", "compression.rules[2].sites[0]".
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/config/config.h"

namespace taco::config_detail {

class ConfigSource {
 public:
  // `root` must be a map (an empty document is passed as an empty map).
  ConfigSource(std::string name, YAML::Node root);

  const std::string& name() const { return name_; }
  const YAML::Node& root() const { return root_; }

  // Applies "key.path=value" to the tree as if it were written in the file: the value is parsed
  // as YAML (scalar, [flow list] or {flow map}); missing maps on the way are created; a number
  // segment indexes an existing list item ("compression.rules.0.codec=taco").
  void apply_override(const std::string& assignment);

  // True when the value at `path` (or a map or list above it) was written by an override.
  bool from_override(const std::string& path) const;

  // "FILE:LINE" of `path` (the line of its key, else of the nearest key above it that exists), or
  // "FILE: --set KEY" when an override wrote it. A non-null `mark` overrides the lookup.
  std::string where(const std::string& path,
                    const YAML::Mark& mark = YAML::Mark::null_mark()) const;

  // Throws UserError "WHERE: PATH: WHAT; expected EXPECTED".
  [[noreturn]] void fail(const std::string& path, const std::string& what,
                         const std::string& expected,
                         const YAML::Mark& mark = YAML::Mark::null_mark()) const;

 private:
  const std::string* override_key(const std::string& path) const;
  YAML::Mark mark_of(const std::string& path) const;

  std::string name_;
  YAML::Node root_;
  std::vector<std::pair<std::string, std::string>> set_by_;  // (tree path, override key as typed)
};

// `text` with line breaks written as \n, so that every message stays one line.
std::string one_line(const std::string& text);

std::string join_path(const std::string& parent, const std::string& key);
std::string index_path(const std::string& parent, size_t index);

// Shortest text that reads back as the same double ("0.001", "1e-08").
std::string number_text(double value);

// The types of every key (the tree -> typed structs; unknown keys, wrong types, bad enum values,
// missing model keys).
Config read_config(const ConfigSource& source);

// Value ranges and the constraints between keys (sizes that must divide); the compression section
// by building its CompressionPolicy (compression/policy.h), which checks ranges, sites and groups.
void validate_config(const Config& config, const ConfigSource& source);

}  // namespace taco::config_detail
