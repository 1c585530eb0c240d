// safetensors files, the weight format Hugging Face libraries load, written from the format's
// public description:
//
//   u64 N (little-endian) | N bytes of JSON header | the tensors' raw bytes
//
// The header is one JSON object: for each tensor "name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]} (byte offsets into the data part, end exclusive), plus an
// optional "__metadata__": {string: string}. We write the tensors back to back in header order,
// without gaps, and pad the header with spaces so that the data starts 8-byte aligned. Values
// are little-endian float32, row-major.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace taco {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  // Writes the tensor's product(shape) values, row-major, into `out`.
  std::function<void(float* out)> fill;
  int64_t numel() const;
};

// The JSON header text (before padding) for `tensors` in this order, with `metadata` as
// __metadata__ (left out when empty).
std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               const std::vector<std::pair<std::string, std::string>>& metadata);

// Writes `path` (float32 tensors). Builds one tensor at a time, so memory holds the largest
// tensor, not the file. Throws Error (exit 1) when the file cannot be written.
void write_safetensors_f32(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                           const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace taco
