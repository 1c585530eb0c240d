#include "tools/export/safetensors.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "kernels/check.h"

namespace taco {

namespace {

// A JSON string literal: quotes, backslashes and control characters escaped.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

void put_u64_le(std::ofstream& out, uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = char((v >> (8 * i)) & 0xff);
  out.write(bytes, 8);
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) h += ',';
      h += json_string(metadata[i].first);
      h += ':';
      h += json_string(metadata[i].second);
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensor& t = tensors[i];
    TACO_CHECK(t.name != "__metadata__", "safetensors: a tensor cannot be named __metadata__");
    const uint64_t bytes = uint64_t(t.numel()) * sizeof(float);
    if (i || !metadata.empty()) h += ',';
    h += json_string(t.name);
    h += ":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) h += ',';
      h += std::to_string(t.shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) +
         "]}";
    offset += bytes;
  }
  return h + "}";
}

void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::string header = safetensors_header(tensors, metadata);
  header.append((8 - header.size() % 8) % 8, ' ');  // the data then starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot create: " + std::strerror(errno), 1);
  put_u64_le(out, header.size());
  out.write(header.data(), std::streamsize(header.size()));
  std::vector<float> values;
  for (const SafetensorsTensor& t : tensors) {
    values.assign(size_t(t.numel()), 0.f);
    t.fill(values.data());
    if constexpr (std::endian::native == std::endian::big) {
      for (float& v : values)
        v = std::bit_cast<float>(__builtin_bswap32(std::bit_cast<uint32_t>(v)));
    }
    out.write(reinterpret_cast<const char*>(values.data()),
              std::streamsize(values.size() * sizeof(float)));
  }
  out.close();
  if (!out) throw Error(path + ": write failed (disk full?): " + std::strerror(errno), 1);
}

}  // namespace taco
