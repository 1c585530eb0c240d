// The CPU training loop end to end: it learns real text, it is deterministic, and the
// taco-train command reports bad input with one line and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "kernels/check.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

// The trainer builds its communicators over MPI_COMM_WORLD: this binary joins MPI.
extern "C" const int taco_test_joins_mpi = 1;

namespace taco {
namespace {

Config small_config(const std::vector<std::string>& extra = {}) {
  const std::string data = test::fortune_shards();
  std::vector<std::string> overrides = {"model.n_layer=2",
                                        "model.n_head=2",
                                        "model.d_model=64",
                                        "model.seq_len=64",
                                        "train.micro_batch_size=8",
                                        "train.global_batch_tokens=1024",
                                        "train.lr=3e-3",
                                        "train.warmup_steps=5",
                                        "log.every=1000",
                                        "log.eval_every=0",
                                        "log.eval_batches=4",
                                        "data.train=" + data + "/train_*.bin",
                                        "data.val=" + data + "/val_*.bin"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "tiny-cpu.yaml", overrides);
}

TEST(Trainer, LearnsRealTextWithinTheCiBudget) {
  Config cfg = small_config({"train.steps=60"});
  Trainer trainer(cfg, RunContext{});
  TrainHistory h = trainer.run();
  ASSERT_EQ(h.train_loss.size(), 60u);
  const double first = h.train_loss.front(), last = h.train_loss.back();
  // Untrained, the byte model is near uniform (ln 256 = 5.55). Learning the byte statistics of
  // English alone takes it below ~3.3 nats; the bar is a fall of at least 40%.
  EXPECT_NEAR(first, std::log(256.0), 0.1);
  EXPECT_LT(last, 0.6 * first) << "first " << first << " last " << last;
  ASSERT_FALSE(h.val_loss.empty());
  EXPECT_LT(h.val_loss.back().second, 0.6 * first);
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
  Config cfg = small_config({"train.steps=3", "train.global_batch_tokens=512"});
  TrainHistory a = Trainer(cfg, RunContext{}).run();
  TrainHistory b = Trainer(cfg, RunContext{}).run();
  ASSERT_EQ(a.train_loss.size(), 3u);
  for (size_t i = 0; i < a.train_loss.size(); ++i) EXPECT_EQ(a.train_loss[i], b.train_loss[i]);
  Config other = small_config({"train.steps=3", "train.global_batch_tokens=512", "train.seed=7"});
  TrainHistory c = Trainer(other, RunContext{}).run();
  EXPECT_NE(a.train_loss[0], c.train_loss[0]) << "the seed must change the run";
}

// A number field of a one-line JSON record ("key": value), NaN when absent.
double json_number(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": ");
  if (at == std::string::npos) return std::nan("");
  return std::atof(line.c_str() + at + key.size() + 4);
}

TEST(Trainer, LogRecordsAverageEveryStepOfTheInterval) {
  const std::string dir = test::scratch_dir("interval_log");
  Config cfg = small_config(
      {"train.steps=7", "log.every=3", "train.global_batch_tokens=512", "checkpoint.keep=0"});
  RunContext ctx;
  ctx.run_dir = dir;
  const TrainHistory h = Trainer(cfg, ctx).run();
  ASSERT_EQ(h.train_loss.size(), 7u);
  // Logged: step 1 (the first), 3, 6 and 7 (the last): intervals of 1, 2, 3 and 1 steps.
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  std::vector<std::pair<int, int>> seen;  // (step, steps in its interval)
  int begin = 0;
  while (std::getline(metrics, line)) {
    if (line.find("\"tok_per_s\"") == std::string::npos) continue;
    const int step = int(json_number(line, "step")), steps = int(json_number(line, "steps"));
    seen.emplace_back(step, steps);
    ASSERT_EQ(begin + steps, step) << line;
    double mean = 0;
    for (int i = begin; i < step; ++i) mean += h.train_loss[size_t(i)];
    mean /= steps;
    // The record's loss is the interval's mean (printed with 9 significant digits).
    EXPECT_NEAR(json_number(line, "loss"), mean, 1e-8 * mean) << line;
    // Its ms/step is the mean of the step times it lists, one per step.
    const size_t list = line.find("\"step_ms\": [");
    ASSERT_NE(list, std::string::npos) << line;
    std::stringstream items(line.substr(list + 12, line.find(']', list) - list - 12));
    double sum = 0;
    int n = 0;
    for (std::string item; std::getline(items, item, ',');) {
      EXPECT_GT(std::atof(item.c_str()), 0.0) << line;
      sum += std::atof(item.c_str());
      ++n;
    }
    EXPECT_EQ(n, steps) << line;
    EXPECT_NEAR(json_number(line, "ms"), sum / n, 1e-3 * sum / n + 1e-3) << line;
    EXPECT_NEAR(json_number(line, "tok_per_s"), 512.0 * 1e3 / json_number(line, "ms"),
                1e-3 * json_number(line, "tok_per_s"))
        << line;
    begin = step;
  }
  const std::vector<std::pair<int, int>> want = {{1, 1}, {3, 2}, {6, 3}, {7, 1}};
  EXPECT_EQ(seen, want);
}

TEST(Trainer, NonFiniteStepIsNeverAppliedAndStopsTheRun) {
  const std::string dir = test::scratch_dir("nonfinite_stop");
  // lr 1e6 overflows within a few steps; a checkpoint after every step that was applied.
  Config cfg =
      small_config({"train.steps=20", "train.lr=1e6", "train.warmup_steps=0",
                    "train.global_batch_tokens=512", "checkpoint.every=1", "checkpoint.keep=50"});
  RunContext ctx;
  ctx.run_dir = dir;
  std::string message;
  try {
    Trainer(cfg, ctx).run();
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_NE(message.find("non-finite"), std::string::npos) << message;
  EXPECT_NE(message.find("was not applied"), std::string::npos) << message;
  EXPECT_NE(message.find("train.nonfinite: skip"), std::string::npos) << message;
  // Every checkpoint written is of a step before the one that stopped the run.
  const size_t at = message.find(": step ");
  ASSERT_NE(at, std::string::npos) << message;
  const int stopped = std::atoi(message.c_str() + at + 7);
  int newest = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/ckpt"))
    newest = std::max(newest, std::atoi(e.path().filename().string().c_str() + 5));
  EXPECT_GT(stopped, 1) << message;
  EXPECT_LT(newest, stopped) << message;
}

TEST(Trainer, NonFiniteStepsAreSkippedWhenAsked) {
  Config cfg = small_config({"train.steps=12", "train.lr=1e6", "train.warmup_steps=0",
                             "train.global_batch_tokens=512", "train.nonfinite=skip"});
  const TrainHistory h = Trainer(cfg, RunContext{}).run();
  EXPECT_EQ(h.steps_done, 12);
  EXPECT_GT(h.skipped_steps, 0);
  int nonfinite = 0;
  for (size_t i = 0; i < h.train_loss.size(); ++i)
    nonfinite += std::isfinite(h.train_loss[i]) && std::isfinite(h.grad_norm[i]) ? 0 : 1;
  EXPECT_EQ(nonfinite, h.skipped_steps);
}

// --- the command line ------------------------------------------------------------------------

std::string taco_train() { return test::binary_dir() + "/taco-train"; }

TEST(TacoTrainCli, BadConfigKeyExitsTwoWithOneLineNamingFileLineAndKey) {
  std::string dir = test::scratch_dir("cli_bad_key");
  test::write_file(dir + "/bad.yaml",
                   "model: { n_layer: 2, n_head: 2, d_model: 64, seq_len: 64, vocab_size: 256 }\n"
                   "train: { stpes: 10 }\n");
  auto r = test::run_command("cd " + dir + " && " + taco_train() + " bad.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stpes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("steps"), std::string::npos) << "should suggest the real key";
}

TEST(TacoTrainCli, ImpossibleValueFromSetExitsTwo) {
  std::string dir = test::scratch_dir("cli_bad_set");
  auto r = test::run_command("cd " + dir + " && " + taco_train() + " --set model.n_head=3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("n_head = 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected"), std::string::npos) << r.output;
}

// No silent fallback: a backend that cannot move this run's memory is refused, not replaced.
TEST(TacoTrainCli, NcclBackendOnCpuRanksExitsTwoSayingWhy) {
  std::string dir = test::scratch_dir("cli_nccl_cpu");
  auto r = test::run_command("cd " + dir + " && " + taco_train() +
                             " --set parallel.backend=nccl --set train.device=cpu"
                             " --set train.steps=1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.backend: nccl"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.device: cpu"), std::string::npos) << r.output;
}

TEST(TacoTrainCli, MissingDataExitsTwoNamingThePattern) {
  std::string dir = test::scratch_dir("cli_no_data");
  auto r = test::run_command("cd " + dir + " && " + taco_train() +
                             " --set data.train=nowhere/train_*.bin");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nowhere/train_*.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("taco-prep"), std::string::npos) << "should say how to make data";
}

TEST(TacoTrainCli, WorldSizeMismatchExitsTwoFromEveryRank) {
  std::string dir = test::scratch_dir("cli_world");
  std::string mpirun = std::string(TACO_MPIEXEC) + " --oversubscribe --allow-run-as-root -np 2 ";
  auto r = test::run_command("cd " + dir + " && timeout 120 " + mpirun + taco_train() +
                             " --set parallel.tp=1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("world size 2"), std::string::npos) << r.output;
}

TEST(TacoTrainCli, RunWritesConfigAndParseableMetrics) {
  const std::string data = test::fortune_shards();
  std::string dir = test::scratch_dir("cli_run");
  auto r = test::run_command(
      "cd " + dir + " && " + taco_train() +
      " --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=32 "
      "--set train.steps=3 --set train.global_batch_tokens=256 --set log.every=1 "
      "--set run.name=t --set data.train=" +
      data + "/train_*.bin --set data.val=" + data + "/val_*.bin");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step     3/3"), std::string::npos) << r.output;
  std::string saved = test::read_file(dir + "/runs/t/config.yaml");
  Config reloaded = load_config_text(saved, "config.yaml");
  EXPECT_EQ(reloaded.train.steps, 3);
  std::ifstream metrics(dir + "/runs/t/metrics.jsonl");
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(metrics, line)) {
    ASSERT_EQ(line.front(), '{') << line;
    ASSERT_EQ(line.back(), '}') << line;
    if (line.find("\"val_loss\"") != std::string::npos)
      ++evals;
    else if (line.find("\"tok_per_s\"") != std::string::npos)
      ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(evals, 1);
}

}  // namespace
}  // namespace taco
