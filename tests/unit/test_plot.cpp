// tools/plot on made-up metrics.jsonl files in taco-train's format: a PNG with one panel per
// quantity (the site-error panel only when some run has per-site errors), and exit code 2 with
// one line for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "tests/support/test_util.h"

namespace {

namespace fs = std::filesystem;
using taco::test::run_command;
using taco::test::write_file;

std::string plot() { return taco::test::source_dir() + "/tools/plot"; }

// taco-train's records: a train line every 10 steps, a val line every 50; `sites` adds per-site
// errors as the compressed runs report them.
std::string metrics(std::mt19937_64& rng, int steps, bool sites) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::string text;
  char line[512];
  for (int step = 1; step <= steps; step += 10) {
    const double loss = 1.0 + 4.5 * std::exp(-step / 100.0) + 0.1 * u(rng);
    std::snprintf(
        line, sizeof line,
        "{\"step\": %d, \"loss\": %.9g, \"lr\": 0.001, \"grad_norm\": %.9g, \"ms\": 12.5, "
        "\"tok_per_s\": %.9g",
        step, loss, 1 + u(rng), 4000 + 500 * u(rng));
    text += line;
    if (sites) {
      std::snprintf(line, sizeof line,
                    ", \"sites\": {\"attn.out.fwd\": {\"rel_err\": %.9g}, "
                    "\"mlp.out.fwd\": {\"rel_err\": %.9g}}",
                    0.025 + 0.002 * u(rng), 0.03 + 0.002 * u(rng));
      text += line;
    }
    text += "}\n";
    if (step % 50 == 1) {
      std::snprintf(line, sizeof line, "{\"step\": %d, \"val_loss\": %.9g}\n", step, loss + 0.2);
      text += line;
    }
  }
  // The end-of-run record (engine/train/site_traffic.h): nothing to draw, and no error to raise.
  if (sites)
    text += "{\"step\": " + std::to_string(steps) +
            ", \"summary\": {\"steps\": 300, \"dtype\": \"fp32\", \"rows\": [{\"site\": "
            "\"attn.out.fwd\", \"layers\": \"0-3\", \"rel_err\": 0.026, \"max_rel_err\": "
            "0.027}]}}\n";
  return text;
}

struct PngSize {
  uint32_t width = 0, height = 0;
};

// Width and height from the IHDR chunk; zero when `bytes` is not a PNG.
PngSize png_size(const std::string& bytes) {
  if (bytes.size() < 24 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {};
  const auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) v = v << 8 | static_cast<uint8_t>(bytes[at + k]);
    return v;
  };
  return {be32(16), be32(20)};
}

#define SKIP_WITHOUT_MATPLOTLIB(result)                                                   \
  do {                                                                                    \
    if ((result).output.find("matplotlib not found") != std::string::npos)                \
      GTEST_SKIP() << "python3-matplotlib is not installed (tools/setup.sh installs it)"; \
  } while (0)

TEST(Plot, DrawsLossThroughputAndSiteErrorPanelsForRunsSideBySide) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::string dir = taco::test::scratch_dir("plot_runs");
  fs::create_directories(dir + "/runs/none");
  fs::create_directories(dir + "/runs/taco");
  write_file(dir + "/runs/none/metrics.jsonl", metrics(rng, 300, false));
  write_file(dir + "/runs/taco/metrics.jsonl", metrics(rng, 300, true));

  // A run directory and a metrics file, into an output folder that does not exist yet.
  const auto r = run_command(plot() + " " + dir + "/out/cmp.png " + dir + "/runs/none " + dir +
                             "/runs/taco/metrics.jsonl");
  SKIP_WITHOUT_MATPLOTLIB(r);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + dir + "/out/cmp.png (2 runs)"), std::string::npos) << r.output;
  const std::string png = taco::test::read_file(dir + "/out/cmp.png");
  // Three 6 x 4.5 inch panels at 100 dpi; a PNG of curves and text is well over 20 KB.
  EXPECT_EQ(png_size(png).width, 1800u);
  EXPECT_EQ(png_size(png).height, 450u);
  EXPECT_GT(png.size(), 20000u);

  // Without per-site errors there is no third panel.
  const auto r2 = run_command(plot() + " " + dir + "/none.png " + dir + "/runs/none");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_EQ(png_size(taco::test::read_file(dir + "/none.png")).width, 1200u);
}

TEST(Plot, BadInputExitsWithCode2AndOneLine) {
  const std::string dir = taco::test::scratch_dir("plot_bad");
  write_file(dir + "/good.jsonl", "{\"step\": 1, \"loss\": 5.5}\n");
  write_file(dir + "/broken.jsonl", "{\"step\": 1, \"loss\": 5.5}\n{\"step\": 2, \"loss\":\n");
  write_file(dir + "/sites.jsonl", "{\"step\": 1, \"loss\": 5.5, \"sites\": [0.1]}\n");
  write_file(dir + "/empty.jsonl", "\n");
  fs::create_directories(dir + "/emptyrun");
  const std::pair<std::string, std::string> cases[] = {
      {dir + "/o.png " + dir + "/broken.jsonl", dir + "/broken.jsonl:2: not JSON"},
      {dir + "/o.png " + dir + "/sites.jsonl", dir + "/sites.jsonl:1: \"sites\" must be an object"},
      {dir + "/o.png " + dir + "/empty.jsonl", dir + "/empty.jsonl: no records"},
      {dir + "/o.png " + dir + "/missing", dir + "/missing: no such file or directory"},
      {dir + "/o.png " + dir + "/emptyrun", dir + "/emptyrun: holds no metrics.jsonl"},
      {dir + "/good.jsonl " + dir + "/o.png", "must end in .png"},
      {dir + "/o.png", "need an output PNG and at least one run"},
  };
  for (const auto& [args, part] : cases) {
    const auto r = run_command(plot() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir + "/o.png"));
}

}  // namespace
