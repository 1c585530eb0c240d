// Byte-level shards of the fortunes corpus (installed by tools/setup.sh) for training tests:
// the first 95% of the text is train, the rest val. Made once per process; under MPI rank 0
// writes and the others wait.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <filesystem>
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
  if (rank == 0) {
    // Test processes may run this at the same time (ctest -j): never delete, write atomically.
    fs::create_directories(dir);
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator("/usr/share/games/fortunes")) {
      const std::string base = e.path().filename().string();
      if (e.is_regular_file() && e.path().extension().empty() && base[0] != '.')
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    std::string text;
    for (const auto& f : files) text += read_file(f);
    std::vector<uint16_t> ids = ByteTokenizer().encode(text);
    const size_t val_n = ids.size() / 20;
    write_shard(dir + "/train_000000.bin", std::vector<uint16_t>(ids.begin(), ids.end() - val_n));
    write_shard(dir + "/val_000000.bin", std::vector<uint16_t>(ids.end() - val_n, ids.end()));
  }
  if (init) MPI_Barrier(MPI_COMM_WORLD);
  made = dir;
  return made;
}

}  // namespace taco::test
