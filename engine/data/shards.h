// Token shards in llm.c's format (docs/design.md §8) and deterministic batch sampling.
//
// File layout: a 1024-byte header of 256 int32 (header[0] = 20240520 magic, header[1] = 1
// version, header[2] = token count), then token count uint16 tokens. Shards are memory-mapped.
//
// Sampling is counter-based: the window for (seed, step, micro-batch, row) is a pure function of
// those numbers, so any tp/pp/dp layout and a resumed run see exactly the same global batch,
// each rank taking its rows. Windows never cross a shard boundary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace taco {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 1024;

// The tokens of every shard matching `pattern`, from their headers only (TokenShards validates
// them); 0 where nothing matches or a header cannot be read. For the trainer's warning about data
// smaller than one batch.
uint64_t count_shard_tokens(const std::string& pattern);

// Writes one shard (used by taco-prep and by tests).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

class TokenShards {
 public:
  // Opens every file matching the glob `pattern` (sorted by name). Throws UserError naming the
  // file for: no match, a truncated file, a bad magic, a wrong version, a token id >= vocab_size,
  // or a shard shorter than one window of `window` tokens (window = seq_len + 1).
  TokenShards(const std::string& pattern, int vocab_size, int window);
  ~TokenShards();
  TokenShards(const TokenShards&) = delete;
  TokenShards& operator=(const TokenShards&) = delete;

  size_t num_shards() const;
  size_t num_tokens() const;  // over all shards
  const std::vector<std::string>& files() const;

  // Random training windows: rows [row_begin, row_begin + rows) of micro-batch `micro` of
  // optimizer step `step`; inputs/targets are [rows, T] with targets shifted by one.
  void sample_batch(uint64_t seed, int64_t step, int micro, int row_begin, int rows, int T,
                    int32_t* inputs, int32_t* targets) const;

  // Evaluation windows: batch `batch_index` (0-based), rows as above; consecutive non-overlapping
  // windows from the start of the shards, wrapping around, so every eval sees the same tokens.
  void eval_batch(int batch_index, int batch_rows, int row_begin, int rows, int T, int32_t* inputs,
                  int32_t* targets) const;

  // Evaluation windows of T + 1 tokens over all shards before eval_batch wraps around (window k
  // of a shard starts at k * T, so each token is a target once): the batches that cover the
  // data once are ceil(num_eval_windows(T) / batch_rows).
  size_t num_eval_windows(int T) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace taco
