// Byte-level shards of the fortunes corpus (installed by tools/setup.sh) for training tests:
// the first 95% of the text is train, the rest val. Made once per process; under MPI rank 0
// writes and the others wait. A machine without the corpus (a GPU box the setup script never
// ran on) gets the repository's own text (Markdown and sources) instead. A failure on rank 0 is
// raised on every rank, never left as a hang in a barrier.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/data/byte_tokenizer.h"
#include "engine/data/shards.h"
#include "tests/support/test_util.h"

namespace taco::test {

inline std::string fortune_shards(const std::string& name = "fortune_shards") {
  namespace fs = std::filesystem;
  static std::string made;
  if (!made.empty()) return made;
  int rank = 0, init = 0;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string dir = binary_dir() + "/test-scratch/" + name;
  std::string failure;
  if (rank == 0) {
    try {
      // Test processes may run this at the same time (ctest -j): never delete, write atomically.
      fs::create_directories(dir);
      const std::string corpus = "/usr/share/games/fortunes";
      const bool fortunes = fs::is_directory(corpus);
      std::vector<std::string> files;
      auto take = [&](const fs::path& p) {
        const std::string base = p.filename().string();
        if (base[0] == '.') return;
        const std::string ext = p.extension().string();
        const bool source_text = ext == ".md" || ext == ".h" || ext == ".cpp" || ext == ".cu";
        if (fortunes ? ext.empty() : source_text) files.push_back(p.string());
      };
      if (fortunes) {
        for (const auto& e : fs::directory_iterator(corpus))
          if (e.is_regular_file()) take(e.path());
      } else {
        for (const auto& e : fs::recursive_directory_iterator(source_dir()))
          if (e.is_regular_file() && e.path().string().find("/build") == std::string::npos)
            take(e.path());
      }
      std::sort(files.begin(), files.end());
      std::string text;
      for (const auto& f : files) text += read_file(f);
      if (text.size() < 100000) throw std::runtime_error("too little text for training tests");
      std::vector<uint16_t> ids = ByteTokenizer().encode(text);
      const size_t val_n = ids.size() / 20;
      write_shard(dir + "/train_000000.bin", std::vector<uint16_t>(ids.begin(), ids.end() - val_n));
      write_shard(dir + "/val_000000.bin", std::vector<uint16_t>(ids.end() - val_n, ids.end()));
    } catch (const std::exception& e) {
      failure = e.what();
      if (failure.empty()) failure = "unknown error";
    }
  }
  if (init) {
    int failed = failure.empty() ? 0 : 1;
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (failed && failure.empty()) failure = "rank 0 could not write them";
  }
  if (!failure.empty()) throw std::runtime_error("training-test shards in " + dir + ": " + failure);
  made = dir;
  return made;
}

}  // namespace taco::test
