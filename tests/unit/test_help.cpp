// Every tool answers --help: exit code 0, a usage line or its arguments, and where the config
// keys are described (docs/config-reference.md). The C++ tools are listed by name; the Python
// tools are every tools/bench/*.py plus tools/plot, found at run time, so a new script without
// a working --help fails here. Help needs no MPI launcher, no GPU and no PyTorch.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_util.h"

namespace taco {
namespace {

namespace fs = std::filesystem;

void expect_help(const std::string& command, const std::vector<std::string>& parts) {
  const auto r = test::run_command(command + " --help");
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  EXPECT_NE(r.output.find("docs/config-reference.md"), std::string::npos)
      << command << ": --help does not say where the config keys are\n"
      << r.output;
  for (const auto& part : parts)
    EXPECT_NE(r.output.find(part), std::string::npos) << command << ": no '" << part << "'\n"
                                                      << r.output;
}

TEST(Help, EveryBinaryExplainsItselfAndPointsAtTheKeyReference) {
  const std::string bin = test::binary_dir() + "/";
  // taco-train also lists the sections and the site names.
  expect_help(bin + "taco-train", {"usage: taco-train", "--set", "--resume", "compression:",
                                   "attn.out.fwd", "dp.grad", "docs/logs-and-metrics.md"});
  expect_help(bin + "taco-bench", {"usage: taco-bench", "codec", "comm", "step"});
  expect_help(bin + "taco-bench codec", {"usage: taco-bench codec", "--cpu"});
  expect_help(bin + "taco-bench comm", {"usage: taco-bench comm", "--codecs", "busbw"});
  expect_help(bin + "taco-bench step", {"usage: taco-bench step", "--model"});
  expect_help(bin + "taco-prep", {"usage: taco-prep", "--tokenizer", "--out"});
  expect_help(bin + "taco-generate", {"usage: taco-generate", "--prompt", "--tokens"});
  expect_help(bin + "taco-reshard", {"usage: taco-reshard", "--set", "--config"});
  expect_help(bin + "taco-plan", {"usage: taco-plan", "--cluster", "--layout", "docs/planner.md"});
}

// A bad option of taco-bench step is refused with one line naming it and exit 2, before the step
// looks for a GPU (so also here, without one).
TEST(Help, BadStepOptionsGetOneLineAndExitTwo) {
  const std::string step = test::binary_dir() + "/taco-bench step ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--gemm-candidates 33", "--gemm-candidates: 33 is more than"},
      {"--gemm-candidates 0", "--gemm-candidates: '0'"},
      {"--gemm fastest", "--gemm: 'fastest'"},
  };
  for (const auto& [args, says] : cases) {
    const auto r = test::run_command(step + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("no CUDA device"), std::string::npos)
        << args << ": refused before the device check\n"
        << r.output;
  }
}

TEST(Help, EveryScriptExplainsItselfAndPointsAtTheKeyReference) {
  const std::string src = test::source_dir();
  std::vector<std::string> scripts = {src + "/tools/plot"};
  for (const auto& entry : fs::directory_iterator(src + "/tools/bench"))
    if (entry.path().extension() == ".py") scripts.push_back(entry.path().string());
  ASSERT_GE(scripts.size(), 5u);
  for (const auto& script : scripts) expect_help("python3 " + script, {});
  expect_help("bash " + src + "/tools/demo.sh", {"tp = 2", "docs/logs-and-metrics.md"});
}

}  // namespace
}  // namespace taco
