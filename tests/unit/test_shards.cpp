// Token shards (llm.c format): reading back what write_shard wrote, counter-based sampling that
// any layout or resume reproduces, eval windows, the byte tokenizer, and one clear error for
// every kind of bad shard.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/shards.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"

namespace {

using taco::TokenShards;

std::vector<uint16_t> random_tokens(size_t n, int vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> dist(0, vocab - 1);
  std::vector<uint16_t> t(n);
  for (auto& x : t) x = uint16_t(dist(rng));
  return t;
}

// Shard s holds tokens s * kStride + p at position p: a window lies in one shard exactly when its
// tokens count up by one and share the same s.
constexpr int kStride = 10000;
constexpr int kPatternVocab = 60000;

std::vector<size_t> write_pattern_shards(const std::string& dir, std::vector<size_t> sizes) {
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> t(sizes[s]);
    for (size_t p = 0; p < t.size(); ++p) t[p] = uint16_t(s * kStride + p);
    taco::write_shard(dir + "/train_" + std::to_string(s) + ".bin", t);
  }
  return sizes;
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  Batch(int rows, int T) : inputs(size_t(rows) * T), targets(size_t(rows) * T) {}
  bool operator==(const Batch&) const = default;
};

Batch sample(const TokenShards& d, uint64_t seed, int64_t step, int micro, int row_begin, int rows,
             int T) {
  Batch b(rows, T);
  d.sample_batch(seed, step, micro, row_begin, rows, T, b.inputs.data(), b.targets.data());
  return b;
}

// Writes a raw file: the header ints given, then `token_bytes` bytes of tokens.
void write_raw_shard(const std::string& path, std::vector<int32_t> header_ints,
                     const std::vector<uint16_t>& tokens, size_t header_bytes = 1024) {
  std::vector<char> bytes(header_bytes, 0);
  std::memcpy(bytes.data(), header_ints.data(),
              std::min(header_bytes, header_ints.size() * sizeof(int32_t)));
  const char* t = reinterpret_cast<const char*>(tokens.data());
  bytes.insert(bytes.end(), t, t + tokens.size() * sizeof(uint16_t));
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// Opening `pattern` must throw UserError (exit code 2) whose one-line message holds every part.
void expect_user_error(const std::string& pattern, int vocab, int window,
                       const std::vector<std::string>& parts) {
  try {
    TokenShards d(pattern, vocab, window);
    FAIL() << "opening " << pattern << " did not throw";
  } catch (const taco::UserError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const auto& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing from: " << msg;
    }
  }
}

TEST(TokenShards, ReadsBackWhatWriteShardWroteInSortedOrder) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("shards_readback");
  // Written in non-sorted order; sizes random so a count mix-up shows.
  const std::vector<std::string> names = {"train_002.bin", "train_000.bin", "train_001.bin"};
  std::vector<std::vector<uint16_t>> data;
  size_t total = 0;
  for (const auto& name : names) {
    data.push_back(random_tokens(100 + rng() % 900, 50257, rng));
    total += data.back().size();
    taco::write_shard(dir + "/" + name, data.back());
  }
  taco::write_shard(dir + "/val_000.bin", random_tokens(100, 50257, rng));  // not matched

  TokenShards d(dir + "/train_*.bin", 50257, 65);
  ASSERT_EQ(d.num_shards(), 3u);
  EXPECT_EQ(d.num_tokens(), total);
  ASSERT_EQ(d.files(), (std::vector<std::string>{dir + "/train_000.bin", dir + "/train_001.bin",
                                                 dir + "/train_002.bin"}));
  // eval window 0 of T = 64 is the first 65 tokens of the first shard in sorted order.
  Batch b(1, 64);
  d.eval_batch(0, 1, 0, 1, 64, b.inputs.data(), b.targets.data());
  for (int t = 0; t < 64; ++t) {
    ASSERT_EQ(b.inputs[t], data[1][t]);
    ASSERT_EQ(b.targets[t], data[1][t + 1]);
  }
}

TEST(TokenShards, SampleIsAPureFunctionOfSeedStepMicroAndRow) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("shards_determinism");
  for (int s = 0; s < 3; ++s) {
    taco::write_shard(dir + "/d_" + std::to_string(s) + ".bin", random_tokens(5000, 256, rng));
  }
  const int T = 32, rows = 16;
  TokenShards d(dir + "/d_*.bin", 256, T + 1);
  TokenShards reopened(dir + "/d_*.bin", 256, T + 1);  // a resumed run opens the data again

  const Batch a = sample(d, seed, 7, 1, 0, rows, T);
  EXPECT_EQ(a, sample(d, seed, 7, 1, 0, rows, T));
  EXPECT_EQ(a, sample(reopened, seed, 7, 1, 0, rows, T));
  // Different counters give different windows: 16 rows x 32 tokens from ~15k starts collide
  // with probability far below 1e-30.
  EXPECT_NE(a, sample(d, seed, 8, 1, 0, rows, T));
  EXPECT_NE(a, sample(d, seed, 7, 0, 0, rows, T));
  EXPECT_NE(a, sample(d, seed + 1, 7, 1, 0, rows, T));

  // Rows requested by two ranks (halves) or one row at a time are the rows of one call.
  const Batch lo = sample(d, seed, 7, 1, 0, rows / 2, T);
  const Batch hi = sample(d, seed, 7, 1, rows / 2, rows / 2, T);
  Batch joined(0, T);
  joined.inputs = lo.inputs;
  joined.inputs.insert(joined.inputs.end(), hi.inputs.begin(), hi.inputs.end());
  joined.targets = lo.targets;
  joined.targets.insert(joined.targets.end(), hi.targets.begin(), hi.targets.end());
  EXPECT_EQ(joined, a);
  const Batch row5 = sample(d, seed, 7, 1, 5, 1, T);
  EXPECT_TRUE(std::equal(row5.inputs.begin(), row5.inputs.end(), a.inputs.begin() + 5 * T));
}

TEST(TokenShards, WindowsStayInOneShardAndTargetsAreInputsShiftedByOne) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("shards_windows");
  const int T = 16;
  // Short shards (some exactly one window) make a boundary-crossing bug likely to show.
  std::vector<size_t> sizes;
  for (int s = 0; s < 5; ++s) sizes.push_back(T + 1 + rng() % 40);
  sizes[2] = T + 1;
  write_pattern_shards(dir, sizes);
  TokenShards d(dir + "/train_*.bin", kPatternVocab, T + 1);

  const int rows = 5000;
  const Batch b = sample(d, seed, 3, 0, 0, rows, T);
  std::set<std::pair<int, int>> starts;
  for (int r = 0; r < rows; ++r) {
    const int32_t* in = &b.inputs[size_t(r) * T];
    const int32_t* tg = &b.targets[size_t(r) * T];
    const int shard = in[0] / kStride, start = in[0] % kStride;
    ASSERT_LT(shard, 5);
    ASSERT_LE(size_t(start + T + 1), sizes[shard]) << "window runs past the end of its shard";
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(in[t], in[0] + t) << "row " << r << " is not one contiguous window";
      ASSERT_EQ(tg[t], in[t] + 1) << "row " << r << " target is not the next token";
    }
    starts.insert({shard, start});
  }
  // 5000 draws over at most 5 * 40 starts: every start, including the one start of the
  // one-window shard, is drawn (one start is missed with probability (1 - 1/200)^5000 < 2e-11).
  size_t all_starts = 0;
  for (size_t n : sizes) all_starts += n - T;
  EXPECT_EQ(starts.size(), all_starts);
}

TEST(TokenShards, ShardsAreChosenInProportionToTheirWindows) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = taco::test::scratch_dir("shards_proportion");
  const int T = 8;
  // Windows: 1000 and 3000, so shard 0 should take 1/4 of the rows.
  write_pattern_shards(dir, {1000 + T, 3000 + T});
  TokenShards d(dir + "/train_*.bin", kPatternVocab, T + 1);
  const int rows = 40000;
  const Batch b = sample(d, seed, 0, 0, 0, rows, T);
  int in_first = 0;
  for (int r = 0; r < rows; ++r) in_first += b.inputs[size_t(r) * T] / kStride == 0;
  // Binomial std of the fraction is sqrt(0.25 * 0.75 / 40000) = 0.0022; 0.015 is ~7 sigma.
  EXPECT_NEAR(double(in_first) / rows, 0.25, 0.015);
}

TEST(TokenShards, EvalBatchesTileTheShardsFromTheStartAndWrapAround) {
  const std::string dir = taco::test::scratch_dir("shards_eval");
  const int T = 10;
  // Windows per shard: (35 - 1) / 10 = 3 and (21 - 1) / 10 = 2.
  write_pattern_shards(dir, {35, 21});
  TokenShards d(dir + "/train_*.bin", kPatternVocab, T + 1);
  ASSERT_EQ(d.num_eval_windows(T), 5u);
  const std::vector<int> expected_first = {0, 10, 20, kStride, kStride + 10};

  const int batch_rows = 3;
  for (int batch = 0; batch < 4; ++batch) {
    Batch b(batch_rows, T);
    d.eval_batch(batch, batch_rows, 0, batch_rows, T, b.inputs.data(), b.targets.data());
    for (int r = 0; r < batch_rows; ++r) {
      const int w = (batch * batch_rows + r) % 5;
      EXPECT_EQ(b.inputs[size_t(r) * T], expected_first[w]) << "batch " << batch << " row " << r;
      for (int t = 0; t < T; ++t) {
        ASSERT_EQ(b.targets[size_t(r) * T + t], b.inputs[size_t(r) * T + t] + 1);
      }
    }
    // The second rank's rows alone are the same rows.
    Batch tail(batch_rows - 1, T);
    d.eval_batch(batch, batch_rows, 1, batch_rows - 1, T, tail.inputs.data(), tail.targets.data());
    EXPECT_TRUE(std::equal(tail.inputs.begin(), tail.inputs.end(), b.inputs.begin() + T));
  }
}

TEST(TokenShards, NoMatchingFileNamesThePatternAndTacoPrep) {
  const std::string dir = taco::test::scratch_dir("shards_nomatch");
  expect_user_error(dir + "/train_*.bin", 256, 9, {dir + "/train_*.bin", "taco-prep"});
}

TEST(TokenShards, HeaderShorterThan1024BytesIsTruncated) {
  const std::string dir = taco::test::scratch_dir("shards_short_header");
  write_raw_shard(dir + "/a.bin", {taco::kShardMagic, 1, 0}, {}, 500);
  expect_user_error(dir + "/*.bin", 256, 9, {dir + "/a.bin", "truncated", "taco-prep"});
}

TEST(TokenShards, FewerTokenBytesThanTheHeaderSaysIsTruncated) {
  std::mt19937_64 rng(taco::test::fresh_seed());
  const std::string dir = taco::test::scratch_dir("shards_short_tokens");
  write_raw_shard(dir + "/a.bin", {taco::kShardMagic, 1, 1000}, random_tokens(999, 256, rng));
  expect_user_error(dir + "/*.bin", 256, 9, {dir + "/a.bin", "truncated", "1000 tokens"});
}

TEST(TokenShards, BadMagicIsRejected) {
  std::mt19937_64 rng(taco::test::fresh_seed());
  const std::string dir = taco::test::scratch_dir("shards_magic");
  write_raw_shard(dir + "/a.bin", {20240521, 1, 100}, random_tokens(100, 256, rng));
  expect_user_error(dir + "/*.bin", 256, 9, {dir + "/a.bin", "bad magic 20240521"});
}

TEST(TokenShards, WrongVersionIsRejected) {
  std::mt19937_64 rng(taco::test::fresh_seed());
  const std::string dir = taco::test::scratch_dir("shards_version");
  write_raw_shard(dir + "/a.bin", {taco::kShardMagic, 2, 100}, random_tokens(100, 256, rng));
  expect_user_error(dir + "/*.bin", 256, 9, {dir + "/a.bin", "version 2"});
}

TEST(TokenShards, TokenIdAtOrAboveVocabNamesIdPositionAndVocab) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("shards_vocab");
  taco::write_shard(dir + "/a.bin", random_tokens(3000, 256, rng));  // a good shard first
  auto bad = random_tokens(100000, 256, rng);
  const size_t pos = 1 + rng() % (bad.size() - 2);
  bad[pos] = uint16_t(256 + rng() % 1000);
  bad[pos + 1] = 65535;  // a later bad id: the message names the first
  taco::write_shard(dir + "/b.bin", bad);
  expect_user_error(dir + "/*.bin", 256, 9,
                    {dir + "/b.bin", "token id " + std::to_string(bad[pos]),
                     "position " + std::to_string(pos), "vocab_size 256"});
  // The largest id that fits is accepted.
  bad[pos] = bad[pos + 1] = 255;
  taco::write_shard(dir + "/b.bin", bad);
  EXPECT_EQ(TokenShards(dir + "/*.bin", 256, 9).num_tokens(), 103000u);
}

TEST(TokenShards, ShardShorterThanOneWindowIsRejected) {
  std::mt19937_64 rng(taco::test::fresh_seed());
  const std::string dir = taco::test::scratch_dir("shards_too_short");
  taco::write_shard(dir + "/a.bin", random_tokens(128, 256, rng));
  expect_user_error(dir + "/*.bin", 256, 129, {dir + "/a.bin", "128 tokens", "window of 129"});
  EXPECT_EQ(TokenShards(dir + "/*.bin", 256, 128).num_tokens(), 128u);  // exactly one window
}

TEST(ByteTokenizer, RoundTripsAnyBytesAndIdsAreTheBytes) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::string text(4096, '\0');
  for (auto& c : text) c = char(rng() & 0xff);
  text += "caf\xc3\xa9 \xe2\x82\xac";  // UTF-8 stays bytes: 'é' is two tokens
  const taco::ByteTokenizer tok;
  const std::vector<uint16_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) ASSERT_EQ(ids[i], (unsigned char)text[i]);
  EXPECT_EQ(tok.decode(ids), text);
  std::vector<int32_t> wide(ids.begin(), ids.end());
  EXPECT_EQ(tok.decode(wide.data(), wide.size()), text);
  EXPECT_EQ(tok.vocab_size(), 256);
}

TEST(ByteTokenizer, DecodingANonByteIdIsAUserError) {
  const taco::ByteTokenizer tok;
  const std::vector<uint16_t> ids = {104, 105, 256};
  try {
    tok.decode(ids);
    FAIL() << "id 256 decoded";
  } catch (const taco::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 256 at position 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
