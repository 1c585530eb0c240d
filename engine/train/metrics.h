// metrics.jsonl: one JSON object per line, per logged step and per evaluation, so runs can be
// plotted and compared (tools/plot). Only rank 0 writes.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace taco {

class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double value);
  JsonRecord& add(const std::string& key, long long value);
  JsonRecord& add(const std::string& key, const std::string& value);
  // A pre-rendered JSON value (object or array).
  JsonRecord& add_raw(const std::string& key, const std::string& json);
  std::string str() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

std::string json_escape(const std::string& s);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  explicit MetricsWriter(const std::string& path);  // empty path: writes nothing
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const JsonRecord& record);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace taco
