// taco-prep end to end: a made-up fortune directory becomes train/val shards with the documented
// split, skipped files, separators, shard sizes and exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/shards.h"
#include "tests/support/test_util.h"

namespace {

namespace fs = std::filesystem;
using taco::test::run_command;
using taco::test::write_file;

std::string prep() { return taco::test::binary_dir() + "/taco-prep"; }

// Lines of random lowercase words, each line ending in '\n'.
std::string random_text(std::mt19937_64& rng, int max_lines) {
  std::string text;
  const int lines = 1 + int(rng() % max_lines);
  for (int l = 0; l < lines; ++l) {
    const int words = 1 + int(rng() % 8);
    for (int w = 0; w < words; ++w) {
      if (w) text += ' ';
      const int len = 1 + int(rng() % 9);
      for (int c = 0; c < len; ++c) text += char('a' + rng() % 26);
    }
    text += '\n';
  }
  return text;
}

// The tokens of one shard, checked against its header, decoded as bytes.
std::string decode_shard(const std::string& path) {
  const std::string bytes = taco::test::read_file(path);
  EXPECT_GE(bytes.size(), taco::kShardHeaderBytes) << path;
  if (bytes.size() < taco::kShardHeaderBytes) return "";
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], taco::kShardMagic);
  EXPECT_EQ(header[1], taco::kShardVersion);
  std::vector<uint16_t> tokens(static_cast<size_t>(std::max(header[2], 0)));
  EXPECT_EQ(bytes.size(), taco::kShardHeaderBytes + tokens.size() * 2) << path;
  std::memcpy(tokens.data(), bytes.data() + taco::kShardHeaderBytes,
              std::min(tokens.size() * 2, bytes.size() - taco::kShardHeaderBytes));
  return taco::ByteTokenizer().decode(tokens);
}

std::string shard_name(const std::string& dir, const char* split, size_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "_%06zu.bin", index);
  return dir + "/" + split + name;
}

// The text of all shards of one split, in order; each shard holds at most `max_tokens` tokens and
// no fewer than half of that, unless it is the only one. Sets `shards` to their number.
std::string read_split(const std::string& dir, const char* split, size_t max_tokens,
                       size_t& shards) {
  std::string text;
  for (shards = 0; fs::exists(shard_name(dir, split, shards)); ++shards) {
    const std::string part = decode_shard(shard_name(dir, split, shards));
    EXPECT_LE(part.size(), max_tokens) << split << " shard " << shards;
    text += part;
  }
  for (size_t i = 0; shards > 1 && i < shards; ++i) {
    EXPECT_GE(decode_shard(shard_name(dir, split, i)).size(), max_tokens / 2)
        << split << " shard " << i << " is a short tail";
  }
  return text;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(TacoPrep, SplitsFortunesIntoDocumentsSkipsIndexFilesAndSendsEveryKthToVal) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("prep_fortunes");
  const std::string in = dir + "/in", out = dir + "/out";
  fs::create_directories(in + "/sub");

  // "jokes": 5 fortunes between "%" lines (as in Debian's files, which start and end with one).
  std::vector<std::string> fortunes;
  std::string jokes = "%\n";
  for (int i = 0; i < 5; ++i) {
    fortunes.push_back(random_text(rng, 4));
    jokes += fortunes.back() + "%\n";
  }
  write_file(in + "/jokes", jokes);
  // A plain file is one document; "50%" and "%%" are not separators.
  const std::string notes = random_text(rng, 3) + "50%\n%%\n" + random_text(rng, 3);
  write_file(in + "/notes", notes);
  // Left out: the strfile index, a *.u8 alias symlink, a hidden file, a subdirectory's file.
  std::string junk(64, '\0');
  for (auto& c : junk) c = char(rng() & 0xff);
  write_file(in + "/jokes.dat", junk);
  fs::create_symlink("jokes", in + "/jokes.u8");
  write_file(in + "/.hidden", "hidden text\n");
  write_file(in + "/sub/deep", "deep text\n");

  const auto r = run_command(prep() + " --tokenizer byte --out " + out + " --val-every 3 " + in);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Documents k = 0..5 are fortunes 0..4 then notes; k % 3 == 0 (fortunes 0 and 3) is val.
  const std::string val = fortunes[0] + "\n" + fortunes[3] + "\n";
  const std::string train =
      fortunes[1] + "\n" + fortunes[2] + "\n" + fortunes[4] + "\n" + notes + "\n";
  EXPECT_TRUE(contains(r.output, "2 files (4 skipped), 6 documents")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "train: 4 documents, " + std::to_string(train.size()) + " tokens, 1 shard"))
      << r.output;
  EXPECT_TRUE(
      contains(r.output, "val: 2 documents, " + std::to_string(val.size()) + " tokens, 1 shard"))
      << r.output;
  EXPECT_EQ(decode_shard(out + "/val_000000.bin"), val);
  EXPECT_EQ(decode_shard(out + "/train_000000.bin"), train);
  EXPECT_FALSE(fs::exists(out + "/train_000001.bin"));
  // The trainer's reader accepts what taco-prep wrote.
  EXPECT_EQ(taco::TokenShards(out + "/val_*.bin", 256, 2).num_tokens(), val.size());
}

TEST(TacoPrep, FullShardsSplitTheRestEvenlyAndARerunRemovesStaleShards) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("prep_shard_sizes");
  const std::string out = dir + "/out";
  std::vector<std::string> docs;
  std::string files;
  for (int i = 0; i < 4; ++i) {
    docs.push_back(random_text(rng, 40));
    const std::string path = dir + "/doc" + std::to_string(i) + ".txt";
    write_file(path, docs.back());
    files += " " + path;
  }
  // --val-every 4: document 0 is val, 1..3 train.
  const std::string train = docs[1] + "\n" + docs[2] + "\n" + docs[3] + "\n";
  const size_t S = 1 + train.size() / 5;  // 5 shards at most, the last two balanced
  const auto r = run_command(prep() + " --tokenizer=byte --out=" + out +
                             " --val-every 4 --shard-tokens " + std::to_string(S) + files);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  size_t train_shards = 0, val_shards = 0;
  EXPECT_EQ(read_split(out, "train", S, train_shards), train);
  EXPECT_EQ(train_shards, (train.size() + S - 1) / S);
  const std::string val = docs[0] + "\n";
  EXPECT_EQ(read_split(out, "val", S, val_shards), val);
  EXPECT_EQ(val_shards, (val.size() + S - 1) / S);

  // A rerun with one shard per split leaves no shard of the first run behind.
  const auto again =
      run_command(prep() + " --tokenizer byte --out " + out + " --val-every 4" + files);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(
      again.output, "removed " + std::to_string(train_shards + val_shards - 2) + " stale shards"))
      << again.output;
  EXPECT_EQ(taco::TokenShards(out + "/train_*.bin", 256, 2).num_shards(), 1u);
  EXPECT_EQ(decode_shard(out + "/train_000000.bin"), train);
}

// Bad input: exit code 2 and one line that says what was wrong.
void expect_bad_input(const std::string& args, const std::string& part) {
  const auto r = run_command(prep() + " " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_TRUE(contains(r.output, part)) << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(TacoPrep, BadInputExitsWithCode2AndOneLine) {
  const std::string dir = taco::test::scratch_dir("prep_bad");
  write_file(dir + "/empty.txt", "");
  write_file(dir + "/blank.txt", " \n\n");
  write_file(dir + "/one.txt", "one document\n");
  expect_bad_input("--tokenizer byte --out " + dir + "/o " + dir + "/missing.txt",
                   dir + "/missing.txt");
  expect_bad_input("--tokenizer gpt2 --out " + dir + "/o " + dir + "/one.txt",
                   "--tokenizer gpt2 needs --bpe-dir");
  expect_bad_input("--tokenizer sentencepiece --out " + dir + "/o " + dir + "/one.txt",
                   "unknown tokenizer 'sentencepiece'");
  expect_bad_input("--tokenizer byte --out " + dir + "/o", "no INPUT");
  expect_bad_input(
      "--tokenizer byte --out " + dir + "/o " + dir + "/empty.txt " + dir + "/blank.txt",
      "empty corpus");
  expect_bad_input("--tokenizer byte --out " + dir + "/o " + dir + "/one.txt", "only 1 document");
  expect_bad_input("--tokenizer byte --out " + dir + "/o --val-every 0 " + dir + "/one.txt",
                   "--val-every '0'");
  expect_bad_input("--tokenizer byte --out " + dir + "/o --shard-tokens 1e6 " + dir + "/one.txt",
                   "--shard-tokens '1e6'");
  expect_bad_input("--tokenizer byte --bogus " + dir + "/one.txt", "unknown option --bogus");
  EXPECT_FALSE(fs::exists(dir + "/o/train_000000.bin"));
}

TEST(TacoPrep, HelpPrintsUsageAndExitsZero) {
  const auto r = run_command(prep() + " --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "usage: taco-prep --tokenizer byte --out DIR")) << r.output;
}

}  // namespace
