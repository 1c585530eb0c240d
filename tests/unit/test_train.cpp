// The CPU training loop end to end: it learns real text, it is deterministic, and the
// taco-train command reports bad input with one line and exit code 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/trainer.h"
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
