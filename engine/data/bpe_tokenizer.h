// GPT-2's byte-level BPE tokenizer, as OpenAI's encoder.py, from its encoder.json + vocab.bpe
// (tools/fetch_bpe.sh fetches both). Vocab 50257; ids fit llm.c's uint16 shards.
//
//   text --gpt2_pretokenize--> words --UTF-8 bytes--> one token per byte
//        --merge the adjacent pair of lowest rank in vocab.bpe, until none is left--> ids
//
// Where we differ from encoder.py, and why:
//  - Input is bytes, not a Python str. Bytes that are not valid UTF-8 each count as one
//    non-letter, non-digit, non-space character, and their tokens decode back to the same bytes
//    (Python could not decode such a file at all; the npm port would see U+FFFD).
//  - decode returns the exact bytes; encoder.py replaces invalid UTF-8 with U+FFFD.
//  - Letters (\p{L}) and digits (\p{N}) beyond ASCII come from a Unicode 14.0 table; the `regex`
//    module that encoder.py uses may know a slightly newer Unicode, so a letter of a script added
//    after 14.0 splits differently. ASCII is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace taco {

// Words of `text` by GPT-2's pattern (one alternative after another, first match wins):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// \s is Unicode White_Space. The words are views into `text` and cover it exactly, in order.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class BpeTokenizer {
 public:
  static constexpr int kGpt2VocabSize = 50257;

  // Reads DIR/encoder.json and DIR/vocab.bpe. Throws UserError naming the file (and line or byte
  // offset) for a missing file, bad JSON, a token with a character outside GPT-2's byte alphabet,
  // ids that are not 0..N-1 or exceed 65535, or a merge whose tokens are not in encoder.json or
  // that uses a token before a merge makes it.
  static BpeTokenizer from_dir(const std::string& dir);
  static BpeTokenizer from_files(const std::string& encoder_json, const std::string& vocab_bpe);

  int vocab_size() const { return static_cast<int>(id_to_bytes_.size()); }
  size_t num_merges() const { return merges_.size(); }
  // The id of "<|endoftext|>" (50256 in GPT-2), or -1 when the vocabulary has none.
  int eot_id() const { return eot_id_; }

  // Appends the ids of `text`. Words seen before come from a cache, so encode is not const and
  // one tokenizer must not encode on two threads at once.
  void encode(std::string_view text, std::vector<uint16_t>& out);
  std::vector<uint16_t> encode(std::string_view text);

  // The bytes of ids[0..n). Throws UserError for an id >= vocab_size.
  std::string decode(const uint16_t* ids, size_t n) const;
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<uint16_t>& ids) const {
    return decode(ids.data(), ids.size());
  }

 private:
  struct Merge {
    uint32_t rank;
    uint16_t merged;
  };
  static uint32_t pair_key(uint16_t left, uint16_t right) { return uint32_t(left) << 16 | right; }

  BpeTokenizer() = default;
  void encode_word(std::string_view word, std::vector<uint16_t>& out) const;
  template <typename Id>
  std::string decode_ids(const Id* ids, size_t n) const;

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, uint16_t> bytes_to_id_;
  uint16_t byte_id_[256] = {};                  // the single-byte token of each byte value
  std::unordered_map<uint32_t, Merge> merges_;  // pair_key(left, right) -> rank, result
  std::unordered_map<std::string, std::vector<uint16_t>> cache_;  // word bytes -> ids
  int eot_id_ = -1;
};

}  // namespace taco
