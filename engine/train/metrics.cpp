#include "engine/train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "kernels/check.h"

namespace taco {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

JsonRecord& JsonRecord::add(const std::string& key, double value) {
  char buf[64];
  if (std::isfinite(value)) {
    std::snprintf(buf, sizeof buf, "%.9g", value);
  } else {
    std::snprintf(buf, sizeof buf, "null");  // JSON has no NaN/Inf
  }
  fields_.emplace_back(key, buf);
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& key, long long value) {
  fields_.emplace_back(key, std::to_string(value));
  return *this;
}

JsonRecord& JsonRecord::add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, "\"" + json_escape(value) + "\"");
  return *this;
}

JsonRecord& JsonRecord::add_raw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

std::string JsonRecord::str() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i) s += ", ";
    s += "\"" + json_escape(fields_[i].first) + "\": " + fields_[i].second;
  }
  return s + "}";
}

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw UserError(path + ": cannot open metrics file: " + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const JsonRecord& record) {
  if (!file_) return;
  std::fputs((record.str() + "\n").c_str(), file_);
  std::fflush(file_);
}

}  // namespace taco
