// taco-bench comm under mpirun with 3 ranks on the CPU: every op and codec gives a row; the
// native collective reproduces MPI's result exactly (#wrong 0), the codecs put about half the
// bytes of bf16 on the wire with the error of two (all-reduce) or one FP8 rounding, and the
// JSON holds what the table shows.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_util.h"

namespace taco {
namespace {

double field(const std::string& record, const std::string& key) {
  const size_t at = record.find("\"" + key + "\": ");
  EXPECT_NE(at, std::string::npos) << key << " in " << record;
  return at == std::string::npos ? -1 : std::stod(record.substr(at + key.size() + 4));
}

TEST(BenchComm, ThreeRanksGiveEveryRowWithExactNativeResultsAndCodecErrors) {
  const std::string dir = test::scratch_dir("bench_comm");
  const std::string cmd = std::string(TACO_MPIEXEC) +
                          " --oversubscribe --allow-run-as-root -np 3 -x OMP_NUM_THREADS=1 " +
                          test::binary_dir() +
                          "/taco-bench comm --min-bytes 96K --max-bytes 400K --factor 4 "
                          "--iters 2 --warmup 1 --cols 128 --device cpu --chunks 3 --json " +
                          dir + "/comm.json";
  const auto r = test::run_command("timeout 300 " + cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string json = test::read_file(dir + "/comm.json");
  int rows = 0;
  for (size_t at = json.find('{'); at != std::string::npos; at = json.find('{', at + 1)) {
    const std::string rec = json.substr(at, json.find('}', at) - at + 1);
    ++rows;
    SCOPED_TRACE(rec);
    EXPECT_EQ(field(rec, "wrong"), 0);
    EXPECT_EQ(field(rec, "ranks"), 3);
    // CPU ranks run the host codecs; --chunks applies to device buffers only.
    EXPECT_NE(rec.find("\"chunks\": \"host\""), std::string::npos);
    const double size = field(rec, "size_bytes"), wire = field(rec, "wire_bytes");
    const double err = field(rec, "rel_err");
    if (rec.find("\"codec\": \"none\"") != std::string::npos) {
      EXPECT_EQ(err, 0);
    } else {
      const bool reduce = rec.find("\"op\": \"all_reduce\"") != std::string::npos;
      // FP8 E4M3 with group scales: ~2.6e-2 per rounding (docs/design.md §4), two for an
      // all-reduce.
      EXPECT_GT(err, 0.01);
      EXPECT_LT(err, reduce ? 0.05 : 0.035);
      // Each rank sends what the native collective would (factor 2(p-1)/p or (p-1)/p of the
      // bf16 size), in FP8 plus scales and headers: a little over half of it.
      const double native = size * (reduce ? 4.0 / 3.0 : 2.0 / 3.0);
      EXPECT_GT(wire, 0.5 * native);
      EXPECT_LT(wire, 0.6 * native);
    }
  }
  EXPECT_EQ(rows, 2 * 3 * 3);  // 2 sizes x 3 ops x 3 codecs
  EXPECT_NE(r.output.find("busbw"), std::string::npos) << r.output;
}

// No silent fallback: NCCL on CPU ranks is refused with one line and exit 2 on every rank.
TEST(BenchComm, NcclBackendOnCpuRanksExitsTwoSayingWhy) {
  const std::string cmd = std::string(TACO_MPIEXEC) +
                          " --oversubscribe --allow-run-as-root -np 2 " + test::binary_dir() +
                          "/taco-bench comm --device cpu --backend nccl --min-bytes 64K "
                          "--max-bytes 64K";
  const auto r = test::run_command("timeout 120 " + cmd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--backend nccl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("busbw"), std::string::npos) << "no table: " << r.output;
}

}  // namespace
}  // namespace taco
