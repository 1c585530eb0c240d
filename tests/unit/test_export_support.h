// For test_export: an independent minimal JSON parser and safetensors reader (written from the
// formats' public descriptions, sharing no code with tools/export/), so the exported files are
// checked by a second implementation rather than by the writer itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_util.h"

namespace taco::test {

struct Json {
  enum Kind { null, boolean, number, string, array, object } kind = null;
  bool flag = false;
  double num = 0;
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in the file's order

  const Json* find(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
  const Json& at(const std::string& key) const {
    const Json* v = find(key);
    if (!v) throw std::runtime_error("JSON: no key " + key);
    return *v;
  }
};

// Enough JSON for config files and safetensors headers: objects, arrays, strings (with \" \\ \/
// \n \t \uXXXX below 0x80), numbers, true/false/null. Throws std::runtime_error on anything else.
class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : s_(text) {}
  Json parse() {
    Json v = value();
    space();
    if (at_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON at byte " + std::to_string(at_) + ": " + what);
  }
  void space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t'))
      ++at_;
  }
  char peek() {
    space();
    if (at_ >= s_.size()) fail("unexpected end");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  bool word(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(at_, n, w) != 0) return false;
    at_ += n;
    return true;
  }
  std::string text() {
    expect('"');
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      char c = s_[at_++];
      if (c == '\\') {
        if (at_ >= s_.size()) fail("cut escape");
        const char e = s_[at_++];
        if (e == 'n')
          c = '\n';
        else if (e == 't')
          c = '\t';
        else if (e == 'u') {
          c = char(std::stoi(s_.substr(at_, 4), nullptr, 16));
          at_ += 4;
        } else
          c = e;  // " \ /
      }
      out += c;
    }
    if (at_ >= s_.size()) fail("unterminated string");
    ++at_;
    return out;
  }
  Json value() {
    Json v;
    const char c = peek();
    if (c == '{') {
      v.kind = Json::object;
      ++at_;
      if (peek() == '}') return ++at_, v;
      for (;;) {
        std::string key = text();
        expect(':');
        v.members.emplace_back(key, value());
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::array;
      ++at_;
      if (peek() == ']') return ++at_, v;
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::string;
      v.str = text();
      return v;
    }
    if (word("true")) {
      v.kind = Json::boolean;
      v.flag = true;
      return v;
    }
    if (word("false")) {
      v.kind = Json::boolean;
      return v;
    }
    if (word("null")) return v;
    size_t used = 0;
    v.kind = Json::number;
    v.num = std::stod(s_.substr(at_), &used);
    at_ += used;
    return v;
  }

  const std::string& s_;
  size_t at_ = 0;
};

struct StTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct StFile {
  std::vector<std::string> order;  // tensor names in header order
  std::map<std::string, StTensor> tensors;
  Json metadata;
  size_t data_start = 0;
};

// Reads a safetensors file of F32 tensors, checking the layout the format requires: u64 LE
// header size, a JSON object header, data_offsets that tile the data part without gaps or
// overlap, and sizes that match dtype x shape.
inline StFile read_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 8) throw std::runtime_error(path + ": shorter than the size field");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  if (8 + n > bytes.size()) throw std::runtime_error(path + ": header beyond the file");
  StFile f;
  f.data_start = 8 + n;
  const Json header = JsonParser(bytes.substr(8, n)).parse();
  uint64_t expected_begin = 0;
  for (const auto& [name, entry] : header.members) {
    if (name == "__metadata__") {
      f.metadata = entry;
      continue;
    }
    StTensor t;
    t.dtype = entry.at("dtype").str;
    if (t.dtype != "F32") throw std::runtime_error(name + ": dtype " + t.dtype + ", not F32");
    int64_t numel = 1;
    for (const Json& d : entry.at("shape").items) {
      t.shape.push_back(int64_t(d.num));
      numel *= int64_t(d.num);
    }
    const auto& off = entry.at("data_offsets").items;
    if (off.size() != 2) throw std::runtime_error(name + ": data_offsets is not [begin, end]");
    const uint64_t begin = uint64_t(off[0].num), end = uint64_t(off[1].num);
    if (begin != expected_begin) throw std::runtime_error(name + ": gap or overlap before it");
    if (end - begin != uint64_t(numel) * 4) throw std::runtime_error(name + ": size != shape");
    if (f.data_start + end > bytes.size()) throw std::runtime_error(name + ": beyond the file");
    t.values.resize(size_t(numel));
    for (int64_t i = 0; i < numel; ++i) {
      const size_t at = f.data_start + begin + size_t(i) * 4;
      const uint32_t u = uint32_t(uint8_t(bytes[at])) | uint32_t(uint8_t(bytes[at + 1])) << 8 |
                         uint32_t(uint8_t(bytes[at + 2])) << 16 |
                         uint32_t(uint8_t(bytes[at + 3])) << 24;
      std::memcpy(&t.values[size_t(i)], &u, 4);
    }
    expected_begin = end;
    f.order.push_back(name);
    f.tensors[name] = std::move(t);
  }
  if (f.data_start + expected_begin != bytes.size())
    throw std::runtime_error(path + ": bytes after the last tensor");
  return f;
}

}  // namespace taco::test
