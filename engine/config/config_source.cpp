// Where each value of a config tree came from, overrides applied to the tree, and error lines.
#include "engine/config/config_source.h"

#include <charconv>
#include <string>
#include <vector>

#include "engine/config/config_schema.h"
#include "kernels/check.h"

namespace taco::config_detail {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool parse_index(const std::string& s, size_t* index) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *index);
  return ec == std::errc() && end == s.data() + s.size();
}

// "a.b[2].c" -> {"a", "b", "[2", "c"}: map keys, and list indices marked by a leading '['.
std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> segments;
  std::string current;
  for (char c : path) {
    if (c == '.' || c == '[') {
      if (!current.empty()) segments.push_back(current);
      current = c == '[' ? "[" : "";
    } else if (c != ']') {
      current += c;
    }
  }
  if (!current.empty()) segments.push_back(current);
  return segments;
}

// True when `prefix` is `path` or a map/list above it.
bool is_path_prefix(const std::string& prefix, const std::string& path) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

}  // namespace

std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string number_text(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  TACO_CHECK(ec == std::errc(), "to_chars(double) failed");
  return std::string(buffer, end);
}

ConfigSource::ConfigSource(std::string name, YAML::Node root)
    : name_(std::move(name)), root_(std::move(root)) {}

void ConfigSource::apply_override(const std::string& assignment) {
  const auto eq = assignment.find('=');
  const std::string key = trim(assignment.substr(0, eq));
  const auto bad = [&](const std::string& what, const std::string& expected) {
    const std::string shown = key.empty() || eq == std::string::npos ? assignment : key;
    throw UserError(one_line(name_ + ": --set " + shown + ": " + shown + ": " + what +
                             "; expected " + expected));
  };
  const std::string form = "--set key.path=value, e.g. --set train.lr=3e-4";
  if (eq == std::string::npos) bad("no '=' in the override", form);
  std::vector<std::string> segments;
  size_t start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    segments.push_back(trim(key.substr(start, dot - start)));
    if (segments.back().empty()) bad("empty key name in the path", form);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }

  const std::string text = trim(assignment.substr(eq + 1));
  YAML::Node value;
  try {
    value = text.empty() ? YAML::Node(std::string()) : YAML::Load(text);
  } catch (const YAML::Exception& e) {
    bad("cannot parse value '" + text + "': " + e.msg,
        "a YAML value: a scalar, [a, flow, list] or {a: flow, map: 1} (quote strings with commas)");
  }

  // Walk down; `cur` is always a map or a list. YAML::Node's operator= writes through to the
  // node it refers to, so moving the cursor uses reset().
  YAML::Node cur;
  cur.reset(root_);
  std::string path;
  for (size_t i = 0; i < segments.size(); ++i) {
    const bool last = i + 1 == segments.size();
    const std::string& segment = segments[i];
    const YAML::Node& view = cur;  // const lookups never insert keys
    YAML::Node child;
    if (cur.IsSequence()) {
      size_t index = 0;
      if (!parse_index(segment, &index) || index >= cur.size())
        bad(path + " is a list of " + std::to_string(cur.size()) + " and '" + segment +
                "' is not an index in it",
            "an index 0.." + std::to_string(cur.size()) + " or a whole new list: " + path +
                "=[...]");
      path = index_path(path, index);
      if (last) {
        cur[index] = value;
        set_by_.emplace_back(path, key);
        return;
      }
      child.reset(cur[index]);
    } else {
      size_t index = 0;
      if (parse_index(segment, &index))
        bad((path.empty() ? std::string("the document") : path) + " is not a list to index",
            "an index into an existing list, or a whole new list: " +
                (path.empty() ? "KEY" : path) + "=[...]");
      path = join_path(path, segment);
      if (last) {
        cur[segment] = value;
        set_by_.emplace_back(path, key);
        return;
      }
      const YAML::Node existing = view[segment];  // invalid (not merely null) when absent
      if (!existing.IsDefined() || (!existing.IsMap() && !existing.IsSequence())) {
        cur[segment] = YAML::Node(YAML::NodeType::Map);
        set_by_.emplace_back(path, key);
      }
      child.reset(cur[segment]);
    }
    cur.reset(child);
  }
}

const std::string* ConfigSource::override_key(const std::string& path) const {
  for (auto it = set_by_.rbegin(); it != set_by_.rend(); ++it) {
    if (is_path_prefix(it->first, path)) return &it->second;
  }
  return nullptr;
}

bool ConfigSource::from_override(const std::string& path) const {
  return override_key(path) != nullptr;
}

YAML::Mark ConfigSource::mark_of(const std::string& path) const {
  YAML::Mark found = YAML::Mark::null_mark();
  YAML::Node cur;
  cur.reset(root_);
  for (const std::string& segment : split_path(path)) {
    const YAML::Node& view = cur;
    YAML::Node next;
    bool exists = false;
    size_t index = 0;
    if (segment[0] == '[' && view.IsSequence() && parse_index(segment.substr(1), &index) &&
        index < view.size()) {
      next.reset(view[index]);
      found = next.Mark();
      exists = true;
    } else if (view.IsMap()) {
      for (auto it = view.begin(); it != view.end() && !exists; ++it) {
        if (it->first.IsScalar() && it->first.Scalar() == segment) {
          found = it->first.Mark();
          next.reset(it->second);
          exists = true;
        }
      }
    }
    if (!exists) break;
    cur.reset(next);
  }
  return found;
}

std::string ConfigSource::where(const std::string& path, const YAML::Mark& mark) const {
  if (const std::string* key = override_key(path)) return name_ + ": --set " + *key;
  const YAML::Mark m = mark.is_null() ? mark_of(path) : mark;
  return name_ + ":" + std::to_string(m.is_null() ? 1 : m.line + 1);
}

void ConfigSource::fail(const std::string& path, const std::string& what,
                        const std::string& expected, const YAML::Mark& mark) const {
  throw UserError(one_line(where(path, mark) + ": " + (path.empty() ? "(top level)" : path) + ": " +
                           what + "; expected " + expected));
}

}  // namespace taco::config_detail
