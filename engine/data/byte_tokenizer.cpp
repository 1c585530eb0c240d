#include "engine/data/byte_tokenizer.h"

#include "kernels/check.h"

namespace taco {

void ByteTokenizer::encode(std::string_view text, std::vector<uint16_t>& out) const {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint16_t> out;
  encode(text, out);
  return out;
}

namespace {

template <typename Id>
std::string decode_bytes(const Id* ids, size_t n) {
  std::string text(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= ByteTokenizer::kVocabSize) {
      throw UserError("byte tokenizer: token id " + std::to_string(id) + " at position " +
                      std::to_string(i) +
                      " is not a byte (vocab 256); decode these tokens with the tokenizer that "
                      "made them");
    }
    text[i] = static_cast<char>(static_cast<unsigned char>(id));
  }
  return text;
}

}  // namespace

std::string ByteTokenizer::decode(const uint16_t* ids, size_t n) const {
  return decode_bytes(ids, n);
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t n) const {
  return decode_bytes(ids, n);
}

}  // namespace taco
