// Checkpoints (engine/train/checkpoint.h): the rank-file format catches truncation and damage;
// stopping at a step and resuming gives bit-identical losses to an uninterrupted run; a partial
// or damaged newest checkpoint is skipped for an older one; only the newest `keep` stay; another
// layout, a missing checkpoint and a run that would overwrite checkpoints are refused with one
// clear line; and taco-train stops on a real SIGTERM with exit code 143 and resumes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "kernels/check.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

// The trainer builds its communicators over MPI_COMM_WORLD: this binary joins MPI.
extern "C" const int taco_test_joins_mpi = 1;

namespace taco {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 10;

Config small_config(const std::vector<std::string>& extra = {}) {
  const std::string data = test::fortune_shards();
  std::vector<std::string> overrides = {"model.n_layer=2",
                                        "model.n_head=2",
                                        "model.d_model=32",
                                        "model.seq_len=32",
                                        "train.micro_batch_size=4",
                                        "train.global_batch_tokens=256",
                                        "train.steps=" + std::to_string(kSteps),
                                        "train.lr=3e-3",
                                        "train.warmup_steps=3",
                                        "log.every=1",
                                        "log.eval_every=4",
                                        "log.eval_batches=2",
                                        "data.train=" + data + "/train_*.bin",
                                        "data.val=" + data + "/val_*.bin"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "tiny-cpu.yaml", overrides);
}

RunContext in_dir(const std::string& dir, int stop_at = -1) {
  RunContext ctx;
  ctx.run_dir = dir;
  if (stop_at > 0)
    ctx.after_step = [stop_at](int done) {
      if (done == stop_at) request_stop(SIGTERM);
    };
  return ctx;
}

// Trains in `dir` until the stop request after `stop_at` steps; returns the history.
TrainHistory train_and_stop(const Config& cfg, const std::string& dir, int stop_at) {
  clear_stop_request();
  TrainHistory h = Trainer(cfg, in_dir(dir, stop_at)).run();
  clear_stop_request();
  return h;
}

const TrainHistory& straight_run() {
  static TrainHistory h = Trainer(small_config(), RunContext{}).run();
  return h;
}

// Losses of `resumed` (starting after `start` steps) equal the straight run's, bit for bit.
void expect_continues_straight_run(const TrainHistory& resumed, int start) {
  const TrainHistory& ref = straight_run();
  ASSERT_EQ(resumed.start_step, start);
  ASSERT_EQ(resumed.train_loss.size(), size_t(kSteps - start));
  for (int i = start; i < kSteps; ++i)
    EXPECT_EQ(resumed.train_loss[i - start], ref.train_loss[i]) << "step " << i + 1;
  ASSERT_FALSE(resumed.val_loss.empty());
  EXPECT_EQ(resumed.val_loss.back().second, ref.val_loss.back().second);
}

std::vector<std::string> step_folders(const std::string& ckpt) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ckpt)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointFile, RoundTripsAndRejectsTruncationDamageAndForeignFiles) {
  const std::string dir = test::scratch_dir("ckpt_file");
  const std::string path = dir + "/rank_00000.bin";
  std::vector<uint8_t> a(1000), b(37);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(255 - i);
  write_rank_checkpoint(path, {{"layout", "tp=1"}, {"step", "12"}}, {{"a", a}, {"b", b}});
  EXPECT_FALSE(fs::exists(path + ".part"));
  const RankCheckpoint r = read_rank_checkpoint(path);
  EXPECT_EQ(r.header.at("layout"), "tp=1");
  EXPECT_EQ(r.header.at("step"), "12");
  ASSERT_NE(r.find("a"), nullptr);
  EXPECT_EQ(r.find("a")->bytes, a);
  EXPECT_EQ(r.find("b")->bytes, b);
  EXPECT_EQ(r.find("c"), nullptr);

  const std::string bytes = test::read_file(path);
  auto expect_rejected = [&](const std::string& content, const std::string& what) {
    test::write_file(dir + "/bad.bin", content);
    try {
      read_rank_checkpoint(dir + "/bad.bin");
      ADD_FAILURE() << what << ": accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(dir + "/bad.bin"), std::string::npos) << e.what();
    }
  };
  expect_rejected(bytes.substr(0, bytes.size() - 1), "last byte cut");
  expect_rejected(bytes.substr(0, bytes.size() / 2), "half the file");
  expect_rejected(bytes.substr(0, 5), "only the start of the magic");
  for (size_t at : {size_t(20), bytes.size() / 2, bytes.size() - 20}) {
    std::string flipped = bytes;
    flipped[at] = char(flipped[at] ^ 0x10);
    expect_rejected(flipped, "bit flipped at " + std::to_string(at));
  }
  expect_rejected("layout=tp=1\n", "a text file");
}

TEST(CheckpointResume, StopAndResumeGivesBitIdenticalLosses) {
  const std::string dir = test::scratch_dir("ckpt_resume");
  const TrainHistory first = train_and_stop(small_config(), dir, 4);
  EXPECT_EQ(first.stopped_by_signal, SIGTERM);
  EXPECT_EQ(first.steps_done, 4);
  EXPECT_EQ(first.checkpoint, dir + "/ckpt/step_00000004");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(first.train_loss[i], straight_run().train_loss[i]);

  Trainer resumed(small_config({"checkpoint.resume=true"}), in_dir(dir));
  EXPECT_EQ(resumed.start_step(), 4);
  expect_continues_straight_run(resumed.run(), 4);

  // metrics.jsonl holds each step once, in order: the resumed run appended after step 4.
  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line;
  int expected = 1;
  while (std::getline(metrics, line)) {
    if (line.find("\"tok_per_s\"") == std::string::npos) continue;
    EXPECT_NE(line.find("\"step\": " + std::to_string(expected) + ","), std::string::npos) << line;
    ++expected;
  }
  EXPECT_EQ(expected, kSteps + 1);
}

TEST(CheckpointResume, DamagedOrPartialNewestFallsBackToAnOlderOne) {
  const std::string dir = test::scratch_dir("ckpt_damaged");
  // Checkpoints after steps 3, 6 and the stop at 7.
  train_and_stop(small_config({"checkpoint.every=3"}), dir, 7);
  const std::string ckpt = dir + "/ckpt";
  EXPECT_EQ(step_folders(ckpt),
            (std::vector<std::string>{"step_00000003", "step_00000006", "step_00000007"}));
  // The newest loses its last bytes; an interrupted save of step 8 left a folder without marker.
  const std::string newest = ckpt + "/step_00000007/" + rank_file_name(0);
  fs::resize_file(newest, fs::file_size(newest) - 100);
  fs::create_directories(ckpt + "/step_00000008");
  test::write_file(ckpt + "/step_00000008/" + rank_file_name(0), "partial");

  Trainer resumed(small_config({"checkpoint.resume=auto"}), in_dir(dir));
  EXPECT_EQ(resumed.start_step(), 6);
  expect_continues_straight_run(resumed.run(), 6);
}

TEST(CheckpointResume, KeepZeroWritesNone) {
  const std::string dir = test::scratch_dir("ckpt_keep0");
  const TrainHistory h =
      Trainer(small_config({"checkpoint.every=2", "checkpoint.keep=0"}), in_dir(dir)).run();
  EXPECT_EQ(h.steps_done, kSteps);
  EXPECT_FALSE(fs::exists(dir + "/ckpt"));
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
}

TEST(CheckpointResume, KeepsOnlyTheNewestAndSavesAtTheEnd) {
  const std::string dir = test::scratch_dir("ckpt_keep");
  Trainer(small_config({"checkpoint.every=2", "checkpoint.keep=2"}), in_dir(dir)).run();
  EXPECT_EQ(step_folders(dir + "/ckpt"),
            (std::vector<std::string>{"step_00000008", "step_00000010"}));
  for (const std::string s : {"step_00000008", "step_00000010"}) {
    EXPECT_TRUE(fs::exists(dir + "/ckpt/" + s + "/COMPLETE"));
    EXPECT_NO_THROW(read_rank_checkpoint(dir + "/ckpt/" + s + "/" + rank_file_name(0)));
  }
  // Resuming a finished run trains nothing.
  Trainer again(small_config({"checkpoint.resume=true"}), in_dir(dir));
  EXPECT_EQ(again.start_step(), kSteps);
  EXPECT_TRUE(again.run().train_loss.empty());
}

// taco-generate samples from the run's newest checkpoint: the prompt, then one byte per token.
TEST(TacoGenerate, SamplesFromARunsCheckpointAndReportsBadInput) {
  const std::string dir = test::scratch_dir("ckpt_generate");
  Trainer(small_config({"train.steps=3"}), in_dir(dir)).run();
  test::write_file(dir + "/config.yaml", config_to_yaml(small_config({"train.steps=3"})));
  const std::string gen = test::binary_dir() + "/taco-generate " + dir;
  auto a = test::run_command(gen + " --prompt 'The ' --tokens 20 --seed 5 2>/dev/null");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output.rfind("The ", 0), 0u) << a.output;
  EXPECT_EQ(a.output.size(), 4u + 20u + 1u) << a.output;
  // Same seed, same text; greedy decoding is repeatable too; a checkpoint folder works as well.
  EXPECT_EQ(test::run_command(gen + " --prompt 'The ' --tokens 20 --seed 5 2>/dev/null").output,
            a.output);
  auto g1 = test::run_command(gen + "/ckpt/step_00000003 --tokens 10 --temperature 0 2>/dev/null");
  auto g2 = test::run_command(gen + " --tokens 10 --temperature 0 2>/dev/null");
  ASSERT_EQ(g1.exit_code, 0) << g1.output;
  EXPECT_EQ(g1.output, g2.output);

  auto none = test::run_command(test::binary_dir() + "/taco-generate " + dir + "/nowhere");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("config.yaml"), std::string::npos) << none.output;
  auto bad = test::run_command(gen + " --tokens many");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--tokens: 'many' is not a number"), std::string::npos) << bad.output;
}

// taco-reshard writes a run's checkpoint for another layout and back, bit for bit; it refuses
// to change the model or to write over the source run.
TEST(TacoReshard, RewritesACheckpointForAnotherLayoutAndBack) {
  const std::string dir = test::scratch_dir("ckpt_reshard");
  const Config cfg = small_config({"train.steps=3", "run.dir=" + dir, "run.name=src"});
  Trainer(cfg, in_dir(dir + "/src")).run();
  test::write_file(dir + "/src/config.yaml", config_to_yaml(cfg));
  const std::string tool = test::binary_dir() + "/taco-reshard ";
  auto to2 = test::run_command(tool + dir + "/src --set parallel.tp=2 --set run.name=tp2");
  ASSERT_EQ(to2.exit_code, 0) << to2.output;
  EXPECT_NE(to2.output.find("mpirun -np 2"), std::string::npos) << to2.output;
  const std::string step = "/ckpt/step_00000003/";
  for (const char* f : {"rank_00000.bin", "rank_00001.bin", "COMPLETE"})
    EXPECT_TRUE(fs::exists(dir + "/tp2" + step + f)) << f;
  auto back = test::run_command(tool + dir + "/tp2 --set parallel.tp=1 --set run.name=back");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  const RankCheckpoint a = read_rank_checkpoint(dir + "/src" + step + rank_file_name(0));
  const RankCheckpoint b = read_rank_checkpoint(dir + "/back" + step + rank_file_name(0));
  ASSERT_EQ(a.sections.size(), b.sections.size());
  for (size_t i = 0; i < a.sections.size(); ++i)
    EXPECT_TRUE(a.sections[i].bytes == b.sections[i].bytes) << a.sections[i].name;
  EXPECT_EQ(a.header.at("layout"), b.header.at("layout"));

  auto model = test::run_command(tool + dir + "/src --set model.n_layer=4 --set run.name=m");
  EXPECT_EQ(model.exit_code, 2) << model.output;
  EXPECT_NE(model.output.find("does not change the model"), std::string::npos) << model.output;
  auto same = test::run_command(tool + dir + "/src --set parallel.tp=2");
  EXPECT_EQ(same.exit_code, 2) << same.output;
  EXPECT_NE(same.output.find("is the source run"), std::string::npos) << same.output;
}

void expect_user_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(CheckpointResume, RefusesAnotherLayoutAMissingCheckpointAndOverwriting) {
  const std::string dir = test::scratch_dir("ckpt_refuse");
  Trainer(small_config({"train.steps=2"}), in_dir(dir)).run();
  // The model differs (3 layers instead of 2): refused, naming both layouts.
  expect_user_error(
      [&] {
        Trainer(small_config({"train.steps=2", "model.n_layer=3", "checkpoint.resume=true"}),
                in_dir(dir));
      },
      "checkpoint written with 'tp=1 pp=1 dp=1 zero=0 sp=0 world=1 | L=2");
  // Starting afresh over existing checkpoints would lose them.
  expect_user_error([&] { Trainer(small_config({"train.steps=2"}), in_dir(dir)); },
                    "pass --resume");
  // --resume where there is nothing to resume; auto starts from step 0 there.
  const std::string empty = test::scratch_dir("ckpt_none");
  expect_user_error([&] { Trainer(small_config({"checkpoint.resume=true"}), in_dir(empty)); },
                    "no complete checkpoint in " + empty + "/ckpt");
  EXPECT_EQ(Trainer(small_config({"checkpoint.resume=auto"}), in_dir(empty)).start_step(), 0);

  // A run that calibrates its codec groups (group: auto) starts with resume: auto, but resuming
  // one is refused until the calibration is saved with checkpoints.
  const std::vector<std::string> calibrated = {"compression.default={codec: taco, group: auto}",
                                               "compression.calibrate_steps=2",
                                               "checkpoint.resume=auto", "train.steps=2"};
  const std::string cal = test::scratch_dir("ckpt_calibrated");
  Trainer(small_config(calibrated), in_dir(cal)).run();
  expect_user_error([&] { Trainer(small_config(calibrated), in_dir(cal)); }, "group: auto");
}

// --- taco-train and a real SIGTERM ------------------------------------------------------------

std::string loss_lines(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"loss\": ");
    if (at == std::string::npos) continue;
    out += line.substr(0, line.find(',')) + " " + line.substr(at, line.find(',', at) - at) + "\n";
  }
  return out;
}

TEST(TacoTrainCli, SigtermSavesACheckpointExits143AndResumeMatchesAStraightRun) {
  const std::string data = test::fortune_shards();
  const std::string dir = test::scratch_dir("ckpt_cli");
  const std::string train = test::binary_dir() + "/taco-train";
  const std::string args =
      " --set model.n_layer=2 --set model.d_model=64 --set model.n_head=2 --set model.seq_len=64"
      " --set train.steps=40 --set train.global_batch_tokens=2048 --set log.every=1"
      " --set log.eval_every=0 --set data.train=" +
      data + "/train_*.bin --set data.val=" + data + "/val_*.bin";
  auto straight = test::run_command("cd " + dir + " && " + train + args + " --set run.name=a");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  // Started in the background; SIGTERM once a few steps are logged.
  const std::string log = dir + "/b.log";
  auto started = test::run_command("cd " + dir + " && (" + train + args + " --set run.name=b > " +
                                   log + " 2>&1; echo $? > b.rc) > /dev/null 2>&1 & echo $!");
  ASSERT_EQ(started.exit_code, 0);
  const std::string metrics = dir + "/runs/b/metrics.jsonl";
  bool signalled = false;
  // Generous waits (2 min each): ctest -j runs other tests on the same cores.
  for (int i = 0; i < 2400 && !signalled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string logged = loss_lines(metrics);
    if (std::count(logged.begin(), logged.end(), '\n') >= 3) {
      // taco-train itself (not the shell around it), found by its command line.
      test::run_command(
          "for p in $(pgrep -f 'run.name=b'); do [ \"$(cat /proc/$p/comm)\" = "
          "taco-train ] && kill -TERM $p; done; true");
      signalled = true;
    }
  }
  ASSERT_TRUE(signalled) << "no 3 logged steps within 2 min:\n" << test::read_file(log);
  for (int i = 0; i < 2400 && !fs::exists(dir + "/b.rc"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(dir + "/b.rc")) << "taco-train did not stop";
  const std::string out = test::read_file(log);
  EXPECT_EQ(std::stoi(test::read_file(dir + "/b.rc")), 128 + SIGTERM) << out;
  EXPECT_NE(out.find("stopped by SIGTERM after step"), std::string::npos) << out;
  EXPECT_NE(out.find("continue with --resume"), std::string::npos) << out;
  ASSERT_FALSE(newest_complete_checkpoint(dir + "/runs/b/ckpt", nullptr).empty()) << out;

  auto resumed =
      test::run_command("cd " + dir + " && " + train + args + " --set run.name=b --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  // Every step's loss, as logged to metrics.jsonl, equals the straight run's.
  EXPECT_EQ(loss_lines(metrics), loss_lines(dir + "/runs/a/metrics.jsonl"));
}

}  // namespace
}  // namespace taco
