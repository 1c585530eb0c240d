// Byte-level tokenizer: token id = byte value (vocab 256). Needs no files, round-trips any text
// (UTF-8 or not) exactly, and is what the tiny CPU demo trains on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace taco {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  int vocab_size() const { return kVocabSize; }

  // Appends one id per byte of `text` to `out`.
  void encode(std::string_view text, std::vector<uint16_t>& out) const;
  std::vector<uint16_t> encode(std::string_view text) const;

  // Bytes of ids[0..n). Throws UserError for an id >= 256 (tokens of another tokenizer).
  std::string decode(const uint16_t* ids, size_t n) const;
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<uint16_t>& ids) const {
    return decode(ids.data(), ids.size());
  }
};

}  // namespace taco
