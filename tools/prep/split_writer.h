// Streams one split's tokens (train or val) into shards DIR/SPLIT_000000.bin, ...
//
// Shards hold shard_tokens tokens each, except the last two, which share the remainder evenly:
// no shard is shorter than half of shard_tokens (unless the whole split is), so a tail shard is
// never too short for the trainer's window. At most 2 * shard_tokens tokens are held in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace taco::prep {

class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string split, size_t shard_tokens);

  void add_document(const std::vector<uint16_t>& tokens);
  void finish();  // writes what is buffered

  size_t documents() const { return documents_; }
  size_t tokens() const { return tokens_; }
  size_t shards() const { return shards_; }
  std::string shard_path(size_t index) const;

 private:
  void write(size_t count);  // the first `count` buffered tokens, as the next shard

  std::string dir_, split_;
  size_t shard_tokens_;
  std::vector<uint16_t> buffer_;
  size_t documents_ = 0, tokens_ = 0, shards_ = 0;
};

// Removes DIR/SPLIT_NNNNNN.bin files with NNNNNN >= `keep` (left by an earlier, larger run, they
// would join this run's data through the trainer's glob). Returns how many it removed.
size_t remove_stale_shards(const std::string& dir, const std::string& split, size_t keep);

}  // namespace taco::prep
