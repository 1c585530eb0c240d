#include "engine/data/bpe_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <queue>
#include <string>

#include "kernels/check.h"

namespace taco {
namespace {

constexpr uint32_t kMaxVocab = 65536;                // ids must fit uint16 shards
constexpr size_t kMaxCachedWords = size_t(1) << 20;  // the cache is cleared when it grows past
constexpr const char* kFetchHint = "; run tools/fetch_bpe.sh or give --bpe-dir";

std::string read_whole_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")" + kFetchHint);
  std::string text;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw UserError(path + ": read error" + std::string(kFetchHint));
  return text;
}

// GPT-2's byte alphabet (bytes_to_unicode in encoder.py): the printable bytes '!'..'~',
// 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes, in increasing order, for
// U+0100, U+0101, ... so that every token is printable text. unicode_to_byte() inverts it.
class ByteAlphabet {
 public:
  ByteAlphabet() {
    std::fill(std::begin(byte_of_), std::end(byte_of_), -1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_of_[printable ? b : next++] = b;
    }
  }
  // -1 for a code point outside the alphabet.
  int unicode_to_byte(uint32_t c) const { return c < kSize ? byte_of_[c] : -1; }

 private:
  static constexpr uint32_t kSize = 256 + 68;
  int byte_of_[kSize];
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

// Appends code point c as UTF-8.
void append_utf8(uint32_t c, std::string& out) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F)),
        out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | c >> 18), out += char(0x80 | (c >> 12 & 0x3F));
    out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  }
}

// The bytes a token's text stands for: each UTF-8 character of `text` through the byte
// alphabet. False when a character is not in it (or the text is not UTF-8).
bool token_bytes(std::string_view text, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < text.size();) {
    const uint8_t b0 = static_cast<uint8_t>(text[i]);
    const size_t len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : 0;
    if (len == 0 || i + len > text.size()) return false;
    uint32_t c = len == 1 ? b0 : b0 & (len == 2 ? 0x1F : 0x0F);
    for (size_t k = 1; k < len; ++k) {
      if ((text[i + k] & 0xC0) != 0x80) return false;
      c = c << 6 | (text[i + k] & 0x3F);
    }
    const int byte = byte_alphabet().unicode_to_byte(c);  // -1 for c past U+0143
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || byte < 0) return false;
    bytes += char(byte);
    i += len;
  }
  return true;
}

// A reader for encoder.json: one flat JSON object of "token": id pairs.
class EncoderJsonReader {
 public:
  EncoderJsonReader(std::string path, std::string_view text) : path_(std::move(path)), s_(text) {}

  // Calls add(token_text, id) for every pair, in file order.
  template <typename Add>
  void read(Add add) {
    expect('{');
    if (peek() == '}') fail("an empty object");
    std::string key;
    for (;;) {
      read_string(key);
      expect(':');
      add(key, read_id());
      if (peek() == '}') break;
      expect(',');
    }
    expect('}');
    if (peek() != 0) fail("text after the closing '}'");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError(path_ + ": byte " + std::to_string(pos_) + ": " + what +
                    "; expected GPT-2's encoder.json (a flat {\"token\": id} object)");
  }

 private:
  // The next non-space byte (0 at the end), not consumed.
  char peek() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) {
      ++pos_;
    }
    return pos_ < s_.size() ? s_[pos_] : 0;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("a truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("a bad \\u escape");
      v = v << 4 | uint32_t(d);
    }
    return v;
  }
  void read_string(std::string& out) {
    expect('"');
    out.clear();
    for (;;) {
      if (pos_ >= s_.size()) fail("an unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return;
      if (static_cast<uint8_t>(c) < 0x20) fail("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("an unterminated string");
      switch (const char e = s_[pos_++]) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t c1 = hex4();
          if (c1 >= 0xD800 && c1 <= 0xDBFF) {  // a surrogate pair: \uD8xx\uDCxx
            if (s_.substr(pos_, 2) != "\\u") fail("a lone surrogate");
            pos_ += 2;
            const uint32_t c2 = hex4();
            if (c2 < 0xDC00 || c2 > 0xDFFF) fail("a lone surrogate");
            c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
          } else if (c1 >= 0xDC00 && c1 <= 0xDFFF) {
            fail("a lone surrogate");
          }
          append_utf8(c1, out);
          break;
        }
        default:
          fail(std::string("an unknown escape \\") + e);
      }
    }
  }
  uint32_t read_id() {
    if (peek() < '0' || peek() > '9') fail("expected a token id (a non-negative integer)");
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + uint64_t(s_[pos_++] - '0');
      if (v >= kMaxVocab) fail("a token id over 65535, which uint16 shards cannot hold");
    }
    return static_cast<uint32_t>(v);
  }

  std::string path_;
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

BpeTokenizer BpeTokenizer::from_dir(const std::string& dir) {
  return from_files(dir + "/encoder.json", dir + "/vocab.bpe");
}

BpeTokenizer BpeTokenizer::from_files(const std::string& encoder_json,
                                      const std::string& vocab_bpe) {
  BpeTokenizer t;
  // encoder.json: token text -> id; ids must be exactly 0..N-1.
  {
    const std::string text = read_whole_file(encoder_json);
    EncoderJsonReader reader(encoder_json, text);
    std::vector<bool> seen;
    std::string bytes;
    reader.read([&](const std::string& token, uint32_t id) {
      if (!token_bytes(token, bytes) || bytes.empty()) {
        reader.fail("token \"" + token +
                    "\" is empty or has a character outside GPT-2's byte alphabet");
      }
      if (id >= t.id_to_bytes_.size()) t.id_to_bytes_.resize(id + 1), seen.resize(id + 1);
      if (seen[id]) reader.fail("id " + std::to_string(id) + " is given twice");
      if (!t.bytes_to_id_.emplace(bytes, uint16_t(id)).second) {
        reader.fail("token \"" + token + "\" is given twice");
      }
      seen[id] = true;
      t.id_to_bytes_[id] = bytes;
      if (token == "<|endoftext|>") t.eot_id_ = int(id);
    });
    for (size_t id = 0; id < seen.size(); ++id) {
      if (!seen[id]) {
        throw UserError(encoder_json + ": no token has id " + std::to_string(id) +
                        " (ids must be 0..N-1)" + kFetchHint);
      }
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = t.bytes_to_id_.find(std::string(1, char(b)));
      if (it == t.bytes_to_id_.end()) {
        throw UserError(encoder_json + ": no token for byte " + std::to_string(b) +
                        " (a byte-level BPE needs all 256)" + kFetchHint);
      }
      t.byte_id_[b] = it->second;
    }
  }
  // vocab.bpe: "#version" line, then one merge "LEFT RIGHT" per line, rank = its index. A merge
  // may only use tokens made by earlier merges (or single bytes): that order is what makes
  // merging the lowest-rank pair first (encode_word) equal encoder.py's merge rounds.
  const std::string text = read_whole_file(vocab_bpe);
  std::vector<uint32_t> made_at(t.id_to_bytes_.size(), UINT32_MAX);
  for (int b = 0; b < 256; ++b) made_at[t.byte_id_[b]] = 0;
  std::string left, right;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
    const auto where = [&] {
      return vocab_bpe + ":" + std::to_string(line_no) + ": merge '" + std::string(line) + "'";
    };
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos ||
        !token_bytes(line.substr(0, space), left) || !token_bytes(line.substr(space + 1), right) ||
        left.empty() || right.empty()) {
      throw UserError(where() + ": expected two tokens of GPT-2's byte alphabet" + kFetchHint);
    }
    const auto left_it = t.bytes_to_id_.find(left);
    const auto right_it = t.bytes_to_id_.find(right);
    const auto merged_it = t.bytes_to_id_.find(left + right);
    if (left_it == t.bytes_to_id_.end() || right_it == t.bytes_to_id_.end() ||
        merged_it == t.bytes_to_id_.end()) {
      throw UserError(where() +
                      ": a token of it is not in encoder.json; use the two files of one"
                      " vocabulary" +
                      kFetchHint);
    }
    const uint32_t rank = static_cast<uint32_t>(t.merges_.size());
    if (made_at[left_it->second] > rank || made_at[right_it->second] > rank) {
      throw UserError(where() + ": uses a token that no earlier merge makes" + kFetchHint);
    }
    if (!t.merges_
             .emplace(pair_key(left_it->second, right_it->second), Merge{rank, merged_it->second})
             .second) {
      throw UserError(where() + ": the same merge is given twice" + kFetchHint);
    }
    made_at[merged_it->second] = std::min(made_at[merged_it->second], rank + 1);
  }
  return t;
}

// Merges the word's byte tokens, lowest rank first and leftmost first among equal ranks, until no
// adjacent pair has a merge. encoder.py instead merges every occurrence of the lowest-rank pair
// in one round, left to right; the two agree because a merge never forms a pair of lower or equal
// rank (from_files checks that merges only use earlier merges' tokens). A heap of candidate pairs
// over a linked list makes a word of n bytes cost O(n log n) rather than encoder.py's O(n^2).
void BpeTokenizer::encode_word(std::string_view word, std::vector<uint16_t>& out) const {
  const int n = static_cast<int>(word.size());
  std::vector<uint16_t> id(n);
  std::vector<int> prev(n), next(n);  // the list of symbols left; -1: no neighbour
  for (int i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<uint8_t>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    uint32_t rank;
    int left, right;
    uint16_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  std::vector<bool> alive(n, true);
  const auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    const int right = next[left];
    const auto it = merges_.find(pair_key(id[left], id[right]));
    if (it != merges_.end())
      heap.push({it->second.rank, left, right, id[left], id[right], it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when either symbol has merged since the candidate was pushed (a merge changes the
    // left symbol's id and removes the right one).
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || id[c.left] != c.left_id ||
        id[c.right] != c.right_id) {
      continue;
    }
    id[c.left] = c.merged;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (int i = 0; i >= 0 && i < n; i = next[i]) out.push_back(id[i]);
}

void BpeTokenizer::encode(std::string_view text, std::vector<uint16_t>& out) {
  for (std::string_view word : gpt2_pretokenize(text)) {
    auto it = cache_.find(std::string(word));
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxCachedWords) cache_.clear();
      std::vector<uint16_t> ids;
      encode_word(word, ids);
      it = cache_.emplace(std::string(word), std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

std::vector<uint16_t> BpeTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> out;
  encode(text, out);
  return out;
}

template <typename Id>
std::string BpeTokenizer::decode_ids(const Id* ids, size_t n) const {
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = ids[i];
    if (v < 0 || v >= int64_t(id_to_bytes_.size())) {
      throw UserError("token id " + std::to_string(v) + " at position " + std::to_string(i) +
                      " is outside the GPT-2 vocabulary (" + std::to_string(id_to_bytes_.size()) +
                      ")");
    }
    text += id_to_bytes_[size_t(v)];
  }
  return text;
}

std::string BpeTokenizer::decode(const uint16_t* ids, size_t n) const { return decode_ids(ids, n); }
std::string BpeTokenizer::decode(const int32_t* ids, size_t n) const { return decode_ids(ids, n); }

}  // namespace taco
