// Token shards: write, memory-map + validate, and sample windows (see shards.h for the contract).
#include "engine/data/shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "kernels/check.h"

namespace taco {

static_assert(std::endian::native == std::endian::little,
              "llm.c shards are little-endian; this reader maps them as-is");

namespace {

constexpr size_t kHeaderInts = kShardHeaderBytes / sizeof(int32_t);
const char* const kRemake = "re-create it with taco-prep";

std::string errno_text() { return std::strerror(errno); }

// One memory-mapped shard: tokens[0..count) point into the mapping, just past the header.
struct MappedShard {
  std::string path;
  void* mapping = nullptr;
  size_t mapping_bytes = 0;
  const uint16_t* tokens = nullptr;
  size_t count = 0;
};

// A file descriptor closed on every path out of open_shard.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) close(fd);
  }
};

// Maps `path` into `shard` and checks the header and the file size against it.
void map_shard(const std::string& path, MappedShard& shard) {
  shard.path = path;
  FileDescriptor file{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    throw UserError(path + ": cannot open token shard (" + errno_text() +
                    "); check the path and its permissions");
  }
  struct stat st {};
  if (fstat(file.fd, &st) != 0) {
    throw UserError(path + ": cannot stat token shard (" + errno_text() + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    throw UserError(path + ": not a regular file; point the data pattern at token shards (*.bin)");
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kShardHeaderBytes) {
    throw UserError(path + ": truncated: " + std::to_string(bytes) +
                    " bytes, shorter than the 1024-byte shard header; " + kRemake);
  }
  void* mapping = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (mapping == MAP_FAILED) {
    throw UserError(path + ": cannot map token shard (" + errno_text() + ")");
  }
  shard.mapping = mapping;
  shard.mapping_bytes = bytes;

  int32_t header[kHeaderInts];
  std::memcpy(header, mapping, kShardHeaderBytes);
  if (header[0] != kShardMagic) {
    throw UserError(path + ": bad magic " + std::to_string(header[0]) + " (expected " +
                    std::to_string(kShardMagic) + "): not an llm.c token shard; " + kRemake);
  }
  if (header[1] != kShardVersion) {
    throw UserError(path + ": shard version " + std::to_string(header[1]) +
                    " is not supported (expected " + std::to_string(kShardVersion) + "); " +
                    kRemake);
  }
  if (header[2] < 0) {
    throw UserError(path + ": header token count " + std::to_string(header[2]) +
                    " is negative: the file is corrupt; " + kRemake);
  }
  const size_t count = static_cast<size_t>(header[2]);
  const size_t token_bytes = bytes - kShardHeaderBytes;
  if (token_bytes < count * sizeof(uint16_t)) {
    throw UserError(path + ": truncated: the header says " + std::to_string(count) + " tokens (" +
                    std::to_string(count * sizeof(uint16_t)) + " bytes) but only " +
                    std::to_string(token_bytes) + " token bytes follow; " + kRemake);
  }
  if (token_bytes > count * sizeof(uint16_t)) {
    throw UserError(path + ": " + std::to_string(token_bytes) +
                    " token bytes follow the header but it says " + std::to_string(count) +
                    " tokens (" + std::to_string(count * sizeof(uint16_t)) +
                    " bytes): the file is corrupt; " + kRemake);
  }
  shard.tokens =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping) + kShardHeaderBytes);
  shard.count = count;
}

// Throws for the first token id >= vocab_size. A parallel max finds whether one exists (one
// vectorized pass over the mapping); only then a serial scan locates the first.
void check_token_ids(const MappedShard& shard, int vocab_size) {
  const int64_t n = static_cast<int64_t>(shard.count);
  const uint16_t* tokens = shard.tokens;
  int max_id = 0;
#pragma omp parallel for reduction(max : max_id) schedule(static)
  for (int64_t i = 0; i < n; ++i) max_id = std::max(max_id, static_cast<int>(tokens[i]));
  if (max_id < vocab_size) return;
  const auto bad = std::find_if(tokens, tokens + n, [&](uint16_t t) { return t >= vocab_size; });
  throw UserError(shard.path + ": token id " + std::to_string(*bad) + " at position " +
                  std::to_string(bad - tokens) + " is >= vocab_size " + std::to_string(vocab_size) +
                  "; use shards made with the model's tokenizer or raise model.vocab_size");
}

std::vector<std::string> glob_sorted(const std::string& pattern) {
  glob_t found{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> files;
  if (rc == 0) files.assign(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  globfree(&found);
  if (rc == GLOB_NOMATCH || (rc == 0 && files.empty())) {
    throw UserError("data pattern '" + pattern +
                    "' matches no file; make the shards with `taco-prep --tokenizer byte --out "
                    "data/fortunes /usr/share/games/fortunes` (or the demo script) or fix the "
                    "data path");
  }
  if (rc != 0) {
    throw UserError("data pattern '" + pattern + "': glob failed (" + errno_text() +
                    "); check the directories in the path and their permissions");
  }
  std::sort(files.begin(), files.end());  // byte order, independent of the locale
  return files;
}

}  // namespace

uint64_t count_shard_tokens(const std::string& pattern) {
  glob_t found{};
  uint64_t total = 0;
  if (glob(pattern.c_str(), 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) {
      int32_t header[3] = {0, 0, 0};
      if (std::FILE* f = std::fopen(found.gl_pathv[i], "rb")) {
        if (std::fread(header, sizeof header, 1, f) == 1 && header[0] == kShardMagic &&
            header[2] > 0)
          total += uint64_t(header[2]);
        std::fclose(f);
      }
    }
  }
  globfree(&found);
  return total;
}

namespace {

// splitmix64's finalizer: a bijection on 64 bits with full avalanche.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The random key of one training row: each stage is a bijection of (previous key ^ counter).
uint64_t row_key(uint64_t seed, int64_t step, int micro, int64_t row) {
  uint64_t key = splitmix64(seed);
  key = splitmix64(key ^ static_cast<uint64_t>(step));
  key = splitmix64(key ^ static_cast<uint64_t>(static_cast<int64_t>(micro)));
  return splitmix64(key ^ static_cast<uint64_t>(row));
}

// Uniform in [0, n) from a 64-bit key: floor(key * n / 2^64). Bias <= n / 2^64, negligible.
uint64_t scale_to_range(uint64_t key, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(key) * n) >> 64);
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw UserError(path + ": " + std::to_string(tokens.size()) +
                    " tokens do not fit one shard (at most 2^31 - 1); use smaller shards");
  }
  int32_t header[kHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  // Written under a temporary name and renamed, so a reader never sees a half-written shard.
  // The temporary name is per process, so concurrent writers of one path never collide.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw UserError(path + ": cannot create (" + errno_text() + "); check the directory");
  const bool ok = std::fwrite(header, sizeof header, 1, f) == 1 &&
                  (tokens.empty() ||
                   std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f) == tokens.size());
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    throw UserError(path + ": cannot write (" + why + "); check free space and permissions");
  }
}

struct TokenShards::Impl {
  std::vector<std::string> files;
  std::vector<MappedShard> shards;
  size_t num_tokens = 0;
  int window = 0;

  ~Impl() {
    for (auto& s : shards) {
      if (s.mapping) munmap(s.mapping, s.mapping_bytes);
    }
  }

  // Prefix sums of per-shard window counts: cum[s] = windows in shards [0, s).
  template <typename CountFn>
  std::vector<uint64_t> cumulative(CountFn windows_in) const {
    std::vector<uint64_t> cum(shards.size() + 1, 0);
    for (size_t s = 0; s < shards.size(); ++s) cum[s + 1] = cum[s] + windows_in(shards[s].count);
    return cum;
  }

  // The shard holding global window w, and w's index within it.
  static std::pair<size_t, uint64_t> locate(const std::vector<uint64_t>& cum, uint64_t w) {
    const size_t s = std::upper_bound(cum.begin(), cum.end(), w) - cum.begin() - 1;
    return {s, w - cum[s]};
  }

  // inputs[t] = tokens[start + t], targets[t] = tokens[start + t + 1], t < T.
  static void copy_window(const MappedShard& shard, uint64_t start, int T, int32_t* inputs,
                          int32_t* targets) {
    const uint16_t* w = shard.tokens + start;
    for (int t = 0; t < T; ++t) {
      inputs[t] = w[t];
      targets[t] = w[t + 1];
    }
  }
};

TokenShards::TokenShards(const std::string& pattern, int vocab_size, int window)
    : impl_(std::make_unique<Impl>()) {
  TACO_CHECK(vocab_size > 0 && vocab_size <= 65536, "vocab_size must be in [1, 65536]");
  TACO_CHECK(window >= 2, "a window holds at least one input and its target");
  impl_->window = window;
  impl_->files = glob_sorted(pattern);
  impl_->shards.reserve(impl_->files.size());
  for (const auto& path : impl_->files) {
    impl_->shards.emplace_back();
    MappedShard& shard = impl_->shards.back();
    map_shard(path, shard);
    if (shard.count < static_cast<size_t>(window)) {
      throw UserError(path + ": " + std::to_string(shard.count) +
                      " tokens, shorter than one window of " + std::to_string(window) +
                      " tokens (seq_len + 1); use larger shards or a smaller model.seq_len");
    }
    check_token_ids(shard, vocab_size);
    impl_->num_tokens += shard.count;
  }
}

TokenShards::~TokenShards() = default;

size_t TokenShards::num_shards() const { return impl_->shards.size(); }
size_t TokenShards::num_tokens() const { return impl_->num_tokens; }
const std::vector<std::string>& TokenShards::files() const { return impl_->files; }

void TokenShards::sample_batch(uint64_t seed, int64_t step, int micro, int row_begin, int rows,
                               int T, int32_t* inputs, int32_t* targets) const {
  TACO_CHECK(T >= 1 && T + 1 <= impl_->window, "sample_batch: T + 1 exceeds the opened window");
  TACO_CHECK(row_begin >= 0 && rows >= 0, "sample_batch: negative rows");
  // A shard of n tokens has n - T window starts; drawing uniformly over all starts of all
  // shards picks each shard in proportion to its windows.
  const auto cum = impl_->cumulative([&](size_t n) { return uint64_t(n - T); });
  for (int r = 0; r < rows; ++r) {
    const uint64_t key = row_key(seed, step, micro, int64_t(row_begin) + r);
    const auto [s, start] = Impl::locate(cum, scale_to_range(key, cum.back()));
    Impl::copy_window(impl_->shards[s], start, T, inputs + size_t(r) * T, targets + size_t(r) * T);
  }
}

size_t TokenShards::num_eval_windows(int T) const {
  TACO_CHECK(T >= 1 && T + 1 <= impl_->window, "num_eval_windows: T + 1 exceeds the window");
  size_t total = 0;
  for (const auto& s : impl_->shards) total += (s.count - 1) / T;
  return total;
}

void TokenShards::eval_batch(int batch_index, int batch_rows, int row_begin, int rows, int T,
                             int32_t* inputs, int32_t* targets) const {
  TACO_CHECK(T >= 1 && T + 1 <= impl_->window, "eval_batch: T + 1 exceeds the opened window");
  TACO_CHECK(batch_index >= 0 && batch_rows >= 0 && row_begin >= 0 && rows >= 0,
             "eval_batch: negative index");
  // Window k of a shard starts at k * T: inputs tile the shard and every token after the first
  // is a target exactly once. A shard of n tokens holds floor((n - 1) / T) windows.
  const auto cum = impl_->cumulative([&](size_t n) { return uint64_t((n - 1) / T); });
  const uint64_t first = uint64_t(batch_index) * uint64_t(batch_rows) + uint64_t(row_begin);
  for (int r = 0; r < rows; ++r) {
    const auto [s, k] = Impl::locate(cum, (first + r) % cum.back());
    Impl::copy_window(impl_->shards[s], k * T, T, inputs + size_t(r) * T, targets + size_t(r) * T);
  }
}

}  // namespace taco
