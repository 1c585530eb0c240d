// tools/bench/crossover.py on a made-up codec bench JSON whose crossover was worked out by hand,
// and its one-line exit 2 on bad input.
//
// The row: 1 GiB of bf16, 1 byte per element on the wire (W = S / 2), encode and decode at
// 1000 GB/s, decode-sum-encode at 500 GB/s. Codec time t = 1.5 S/1e12 (encode: S + W) +
// (W + W/p)/5e11 + 1.5 S/1e12 (decode: W + S); B* = 2 (p-1)/p (S - W) / t:
//   p = 2: t = 4.5 S/1e12,  B* = 0.5 S / t  = 1e12 / 9    = 111.11 GB/s
//   p = 4: t = 4.25 S/1e12, B* = 0.75 S / t = 0.75e12/4.25 = 176.47 GB/s
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/support/test_util.h"

namespace {

using taco::test::read_file;
using taco::test::run_command;
using taco::test::write_file;

std::string script() { return "python3 " + taco::test::source_dir() + "/tools/bench/crossover.py"; }

double value_for(const std::string& json, const std::string& p) {
  const std::regex re("\"" + p + "\": ([0-9.eE+-]+)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(json, m, re)) << json;
  return m.empty() ? -1 : std::stod(m[1]);
}

TEST(Crossover, MatchesTheHandWorkedModel) {
  const std::string dir = taco::test::scratch_dir("crossover_model");
  write_file(dir + "/codec.json",
             "{\"bench\":\"codec\",\"backend\":\"gpu\",\"results\":[\n"
             "{\"message_bytes\":1073741824,\"codec\":\"taco e4m3 g128 dual hidden\","
             "\"bytes_per_element\":1.0,\"encode_gbps\":1000,\"decode_gbps\":1000,"
             "\"decode_sum_encode_gbps\":500}]}\n");
  const auto r =
      run_command(script() + " " + dir + "/codec.json --ranks 2,4 --json " + dir + "/cross.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& out = r.output;
  const std::string json = read_file(dir + "/cross.json");
  EXPECT_NEAR(value_for(json, "2"), 1e3 / 9, 1e-6);
  EXPECT_NEAR(value_for(json, "4"), 750 / 4.25, 1e-6);
  EXPECT_NE(out.find("taco e4m3 g128 dual hidden"), std::string::npos) << out;
}

TEST(Crossover, BadInputGetsOneLineAndExitTwo) {
  const std::string dir = taco::test::scratch_dir("crossover_bad");
  write_file(dir + "/cpu.json", "{\"bench\":\"codec\",\"results\":[{\"codec\":\"taco\"}]}\n");
  auto r = run_command(script() + " " + dir + "/cpu.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no matching GPU codec rows"), std::string::npos) << r.output;
  r = run_command(script() + " " + dir + "/missing.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("expected the JSON of taco-bench codec"), std::string::npos) << r.output;
}

}  // namespace
