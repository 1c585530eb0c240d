#include "tools/prep/split_writer.h"

#include <cstdio>
#include <filesystem>
#include <regex>

#include "engine/data/shards.h"
#include "kernels/check.h"

namespace taco::prep {

constexpr size_t kMaxShards = 1000000;  // six-digit names keep glob order = shard order

SplitWriter::SplitWriter(std::string dir, std::string split, size_t shard_tokens)
    : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens) {
  TACO_CHECK(shard_tokens_ > 0, "shard_tokens must be positive");
}

std::string SplitWriter::shard_path(size_t index) const {
  char name[32];
  std::snprintf(name, sizeof name, "_%06zu.bin", index);
  return (std::filesystem::path(dir_) / (split_ + name)).string();
}

void SplitWriter::add_document(const std::vector<uint16_t>& tokens) {
  buffer_.insert(buffer_.end(), tokens.begin(), tokens.end());
  ++documents_;
  tokens_ += tokens.size();
  // Keep more than one shard's worth buffered, so finish() can still balance the last two.
  while (buffer_.size() >= 2 * shard_tokens_) write(shard_tokens_);
}

void SplitWriter::finish() {
  if (buffer_.size() > shard_tokens_) write(buffer_.size() - buffer_.size() / 2);
  if (!buffer_.empty()) write(buffer_.size());
}

void SplitWriter::write(size_t count) {
  if (shards_ == kMaxShards) {
    throw UserError(shard_path(shards_) + ": more than 1000000 shards; raise --shard-tokens");
  }
  write_shard(shard_path(shards_), std::vector<uint16_t>(buffer_.begin(), buffer_.begin() + count));
  buffer_.erase(buffer_.begin(), buffer_.begin() + count);
  ++shards_;
}

size_t remove_stale_shards(const std::string& dir, const std::string& split, size_t keep) {
  const std::regex name(split + "_([0-9]{6})\\.bin");
  size_t removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name) && std::stoul(m[1].str()) >= keep) {
      std::filesystem::remove(entry.path());
      ++removed;
    }
  }
  return removed;
}

}  // namespace taco::prep
