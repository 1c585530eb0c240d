// tools/bench/trace/gpu_gaps.py on a made-up trace whose gaps were worked out by hand, and its
// one-line exit 2 on bad input.
//
// The trace (ns): step boundary "adamw" ends at 1000 and at 10000. Between them:
//   kernel A 1500..3000   (gap 500 after adamw)
//   memset   3000..3100   (no gap)
//   kernel B 3050..5000   (overlaps the memset: no gap)
//   kernel C 7000..9000   (gap 2000 after B)
//   adamw    9500..10000  (gap 500 after C)
// So the step lasts 9.0 us with 3.0 us idle in 3 gaps, the largest 2.0 us between B and C.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_util.h"

namespace {

using taco::test::run_command;
using taco::test::write_file;

std::string script() {
  return "python3 " + taco::test::source_dir() + "/tools/bench/trace/gpu_gaps.py";
}

TEST(GpuGaps, FindsTheHandWorkedGaps) {
  const std::string dir = taco::test::scratch_dir("gpu_gaps");
  write_file(dir + "/trace.txt",
             "500 1000 K void taco::cuda::adamw_ranges_kernel(int)\n"
             "1500 3000 K kernel_a\n"
             "3000 3100 S memset bytes=4\n"
             "3050 5000 K kernel_b<float>(int)\n"
             "7000 9000 K kernel_c\n"
             "9500 10000 K void taco::cuda::adamw_ranges_kernel(int)\n");
  const auto r = run_command(script() + " " + dir + "/trace.txt");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string& out = r.output;
  EXPECT_NE(out.find("9.0 us, idle 3.0 us (33.3%) in 3 gaps, 5 operations"), std::string::npos)
      << out;
  EXPECT_NE(out.find("2.0 us  after kernel_b<float>  before kernel_c"), std::string::npos) << out;
  EXPECT_NE(out.find("0.5 us    1x  taco::cuda::adamw_ranges_kernel"), std::string::npos) << out;
}

TEST(GpuGaps, BadInputGetsOneLineAndExitTwo) {
  const std::string dir = taco::test::scratch_dir("gpu_gaps_bad");
  write_file(dir + "/garbled.txt", "100 200 K ok\nnot a trace line\n");
  auto r = run_command(script() + " " + dir + "/garbled.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("garbled.txt:2: expected '<start> <end> <K|C|S> <name>'"),
            std::string::npos)
      << r.output;
  write_file(dir + "/one_step.txt", "100 200 K adamw\n300 400 K other\n");
  r = run_command(script() + " " + dir + "/one_step.txt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fewer than two steps"), std::string::npos) << r.output;
}

}  // namespace
