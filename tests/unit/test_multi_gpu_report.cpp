// tools/bench/multi_gpu_report.py (issue 9's summary) on made-up results: the min_bytes it takes
// from a comm benchmark, the throughput ratios, communication share and MFU of training runs,
// the loss-parity difference, and its one-line exit 2 on bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include "tests/support/test_util.h"

namespace {

using taco::test::read_file;
using taco::test::run_command;
using taco::test::write_file;

std::string script() {
  return "python3 " + taco::test::source_dir() + "/tools/bench/multi_gpu_report.py";
}

// all_reduce rows: none and taco times (us) at 1, 4 and 16 MiB.
std::string comm_json(double n1, double t1, double n4, double t4, double n16, double t16) {
  std::string rows;
  const auto row = [&](const char* codec, long long size, double us) {
    rows += std::string(rows.empty() ? "" : ",\n") + "{\"op\": \"all_reduce\", \"codec\": \"" +
            codec + "\", \"size_bytes\": " + std::to_string(size) +
            ", \"time_us\": " + std::to_string(us) + "}";
  };
  row("none", 1 << 20, n1), row("taco", 1 << 20, t1);
  row("none", 4 << 20, n4), row("taco", 4 << 20, t4);
  row("none", 16 << 20, n16), row("taco", 16 << 20, t16);
  return "[" + rows + "]\n";
}

std::string min_bytes(const std::string& json) {
  const std::string dir = taco::test::scratch_dir("mgr_min_bytes");
  write_file(dir + "/comm.json", json);
  const auto r = run_command(script() + " min-bytes " + dir + "/comm.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output.substr(0, r.output.find('\n'));
}

TEST(MultiGpuReport, MinBytesIsWhereTacoStaysFaster) {
  // slower at 1 MiB, faster from 4 MiB up
  EXPECT_EQ(min_bytes(comm_json(10, 20, 40, 30, 160, 100)), "4194304");
  // faster at 1 MiB but not at 4 MiB: only the sizes from which it keeps winning count
  EXPECT_EQ(min_bytes(comm_json(10, 5, 40, 50, 160, 100)), "16777216");
  // never faster: nothing gets compressed
  EXPECT_EQ(min_bytes(comm_json(10, 20, 40, 50, 160, 200)), "4611686018427387904");
}

void write_run(const std::string& dir, double tok_per_s, double ms, double comm_ms,
               double last_loss) {
  std::filesystem::create_directories(dir);
  write_file(dir + "/config.yaml",
             "model: { n_layer: 2, n_head: 2, d_model: 128, seq_len: 64, vocab_size: 256 }\n");
  std::string lines;
  for (int step = 1; step <= 5; ++step) {
    lines += "{\"step\": " + std::to_string(step) +
             ", \"loss\": " + std::to_string(step == 5 ? last_loss : 5.0) +
             ", \"ms\": " + std::to_string(ms) +
             ", \"tok_per_s\": " + std::to_string(step <= 2 ? 1.0 : tok_per_s) +
             ", \"comm_ms\": " + std::to_string(comm_ms) + "}\n";
  }
  write_file(dir + "/metrics.jsonl", lines);
}

double number_after(const std::string& text, const std::string& key) {
  const std::regex re("\"" + key + "\": ([0-9.eE+-]+)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, re)) << key << " in " << text;
  return m.empty() ? -1 : std::stod(m[1]);
}

TEST(MultiGpuReport, SummaryComparesEachRunWithItsNoneRun) {
  const std::string out = taco::test::scratch_dir("mgr_summary");
  write_file(out + "/comm-nvlink.json", comm_json(10, 20, 40, 30, 160, 100));
  write_run(out + "/runs/nvlink-1.3b-tp2pp1-sp0-none", 1000, 100, 25, 4.0);
  write_run(out + "/runs/nvlink-1.3b-tp2pp1-sp0-taco", 1500, 100, 10, 4.0);
  write_run(out + "/runs/parity-none", 1000, 100, 0, 4.0);
  write_run(out + "/runs/parity-taco", 1000, 100, 0, 4.02);
  const auto r = run_command(script() + " summary " + out + " --gpus 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string json = read_file(out + "/summary.json");
  // the taco run: 1.5x its none run, communication 10 of 100 ms; warm-up steps left out
  const size_t taco = json.find("\"run\": \"nvlink-1.3b-tp2pp1-sp0-taco\"");
  ASSERT_NE(taco, std::string::npos) << json;
  const std::string taco_row = json.substr(taco, json.find('}', taco) - taco);
  EXPECT_NEAR(number_after(taco_row, "vs_none"), 1.5, 1e-9);
  EXPECT_NEAR(number_after(taco_row, "comm_share"), 0.1, 1e-9);
  EXPECT_NEAR(number_after(taco_row, "tok_per_s"), 1500, 1e-9);
  // MFU = tok/s * (6 * (12 L d^2 + V d) + 6 L T d) / (gpus * 989e12)
  const double flops = 6.0 * (12 * 2 * 128 * 128 + 256 * 128) + 6.0 * 2 * 64 * 128;
  EXPECT_NEAR(number_after(taco_row, "mfu"), 1500 * flops / (2 * 989e12), 1e-15);
  EXPECT_NEAR(number_after(json, "final_loss_rel_diff"), 0.005, 1e-9);
  EXPECT_NE(r.output.find("4194304"), std::string::npos) << r.output;  // the crossover
}

TEST(MultiGpuReport, BadInputGetsOneLineAndExitTwo) {
  const std::string dir = taco::test::scratch_dir("mgr_bad");
  write_file(dir + "/comm.json", "[{\"op\": \"all_gather\", \"codec\": \"none\"}]\n");
  for (const std::string& args :
       {" min-bytes " + dir + "/comm.json", " min-bytes " + dir + "/missing.json",
        std::string(" frobnicate")}) {
    const auto r = run_command(script() + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("multi_gpu_report.py: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  }
}

}  // namespace
