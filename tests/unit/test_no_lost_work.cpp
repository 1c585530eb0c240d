// No lost work (engine/train/checkpoint.h, engine/train/main.cpp): retention counts verified
// checkpoints only and moves damaged ones aside; a refused run leaves the run folder's files as
// they were and --resume is not saved as config; a folder that cannot take checkpoints is refused
// before training; the surprises that used to pass silently get one warning line each; and
// taco-generate falls back past a damaged newest checkpoint as the trainer does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/shards.h"
#include "engine/train/checkpoint.h"
#include "kernels/check.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

// Checkpointer runs over MPI_COMM_SELF here: this binary joins MPI (as a singleton).
extern "C" const int taco_test_joins_mpi = 1;

namespace taco {
namespace {

namespace fs = std::filesystem;

// --- retention ----------------------------------------------------------------------------

// Fresh random bytes per test run: a section that a save wrote and the load must give back.
std::vector<CheckpointPart> random_sections(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<CheckpointPart> parts = {{"params", {}}, {"adam_m", {}}};
  for (auto& p : parts) {
    p.bytes.resize(3000 + rng() % 1000);
    for (auto& b : p.bytes) b = uint8_t(rng());
  }
  return parts;
}

std::string save(Checkpointer& ck, int64_t step, uint64_t seed) {
  return ck.save(step, "layout-A", {{"seed", "1"}}, random_sections(seed + uint64_t(step)));
}

// The folder names under `dir`, sorted: what a user sees with ls.
std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void truncate_rank_file(const std::string& folder) {
  const std::string f = folder + "/" + rank_file_name(0);
  fs::resize_file(f, fs::file_size(f) / 2);
}

void flip_a_byte(const std::string& folder) {
  const std::string f = folder + "/" + rank_file_name(0);
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(fs::file_size(f) / 2));
  const char c = char(io.get());
  io.seekp(std::streamoff(fs::file_size(f) / 2));
  io.put(char(c ^ 0x10));
}

// The brief's case: keep 1, the newest checkpoint's rank file truncated. The resumed run falls
// back to the older one; its first save keeps itself, moves the damaged folder aside and only
// then drops the older good one; later saves replace each other as keep 1 says.
TEST(Retention, KeepOneNeverTradesAGoodCheckpointForADamagedNewerOne) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = test::scratch_dir("nlw_keep1");
  {
    Checkpointer first(dir, 2, MPI_COMM_SELF);
    save(first, 2, seed);
    truncate_rank_file(save(first, 4, seed));
  }
  Checkpointer run(dir, 1, MPI_COMM_SELF);
  RankCheckpoint loaded;
  ASSERT_EQ(run.restore("layout-A", &loaded), 2);
  EXPECT_EQ(loaded.find("params")->bytes, random_sections(seed + 2)[0].bytes);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"step_00000002", "step_00000004"}))
      << "resuming deletes nothing";
  save(run, 3, seed);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"step_00000003", "step_00000004.damaged"}));
  save(run, 5, seed);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"step_00000004.damaged", "step_00000005"}));
  // What a crash now would resume from: the newest save, checked byte for byte.
  Checkpointer after_crash(dir, 1, MPI_COMM_SELF);
  ASSERT_EQ(after_crash.restore("layout-A", &loaded), 5);
  EXPECT_EQ(loaded.find("adam_m")->bytes, random_sections(seed + 5)[1].bytes);
}

// Every checkpoint damaged: restore finds none (taco-train then refuses to run, see
// RunFolder.EveryCheckpointDamagedIsRefusedAndLeftAsItWas); a save into such a folder keeps
// itself and moves the damaged folders aside, never deleting them.
TEST(Retention, EveryCheckpointDamagedStartsAfreshAndKeepsTheNewSaves) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = test::scratch_dir("nlw_all_damaged");
  {
    Checkpointer first(dir, 3, MPI_COMM_SELF);
    truncate_rank_file(save(first, 6, seed));
    flip_a_byte(save(first, 8, seed));
  }
  Checkpointer run(dir, 1, MPI_COMM_SELF);
  RankCheckpoint loaded;
  EXPECT_EQ(run.restore("layout-A", &loaded), -1);
  save(run, 1, seed);
  save(run, 2, seed);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"step_00000002", "step_00000006.damaged",
                                                    "step_00000008.damaged"}));
  EXPECT_EQ(Checkpointer(dir, 1, MPI_COMM_SELF).restore("layout-A", &loaded), 2);
}

// keep 2: a damaged folder between good ones is not counted; the one resumed from stays.
TEST(Retention, ADamagedFolderIsNotCountedAsKept) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = test::scratch_dir("nlw_not_counted");
  {
    Checkpointer first(dir, 3, MPI_COMM_SELF);
    save(first, 2, seed);
    save(first, 4, seed);
    flip_a_byte(save(first, 6, seed));
  }
  Checkpointer run(dir, 2, MPI_COMM_SELF);
  RankCheckpoint loaded;
  ASSERT_EQ(run.restore("layout-A", &loaded), 4);
  save(run, 5, seed);
  EXPECT_EQ(listing(dir),
            (std::vector<std::string>{"step_00000004", "step_00000005", "step_00000006.damaged"}));
}

// keep 1, the newest checkpoint unreadable when the run resumes (a file system's passing fault,
// here a truncation later undone) and readable again at the first save: that newer folder now
// checks out, yet the save just written stays; it used to be deleted by its own retention, and
// so was every later save of the run.
TEST(Retention, TheSaveJustWrittenIsNeverDeletedByItsOwnRetention) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string dir = test::scratch_dir("nlw_own_save");
  std::string file;
  {
    Checkpointer first(dir, 2, MPI_COMM_SELF);
    save(first, 2, seed);
    file = save(first, 4, seed) + "/" + rank_file_name(0);
  }
  const std::string bytes = test::read_file(file);
  fs::resize_file(file, bytes.size() / 2);
  Checkpointer run(dir, 1, MPI_COMM_SELF);
  RankCheckpoint loaded;
  ASSERT_EQ(run.restore("layout-A", &loaded), 2);
  test::write_file(file, bytes);
  save(run, 3, seed);
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"step_00000003", "step_00000004"}));
  EXPECT_NO_THROW(verify_rank_checkpoint(dir + "/step_00000003/" + rank_file_name(0)));
}

// --- the checkpoint folder probe ----------------------------------------------------------

TEST(WritableProbe, RefusesAFolderThatCannotTakeCheckpointsAndLeavesNothingBehind) {
  const std::string ok = test::scratch_dir("nlw_probe") + "/ckpt";
  EXPECT_NO_THROW(check_checkpoint_dir_writable(ok, MPI_COMM_SELF));
  EXPECT_TRUE(fs::is_directory(ok));
  EXPECT_TRUE(fs::is_empty(ok)) << "the probe file is removed";
  // Root may write anywhere on a normal filesystem: /proc refuses even root.
  for (const std::string& bad : {std::string("/proc/self"), std::string("/proc/self/ckpt")}) {
    try {
      check_checkpoint_dir_writable(bad, MPI_COMM_SELF);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      EXPECT_NE(what.find("checkpoint.dir"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    }
  }
}

// --- config: parallel.timeout_s and the warm-up warning -----------------------------------

Config tiny(const std::vector<std::string>& overrides) {
  const std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "tiny-cpu.yaml", overrides);
}

TEST(Config, TimeoutKeyDefaultsTo600RoundTripsAndRefusesNegatives) {
  EXPECT_EQ(tiny({}).parallel.timeout_s, 600);
  const Config c = tiny({"parallel.timeout_s=2.5"});
  EXPECT_EQ(c.parallel.timeout_s, 2.5);
  EXPECT_EQ(load_config_text(config_to_yaml(c), "saved.yaml").parallel.timeout_s, 2.5);
  EXPECT_EQ(tiny({"parallel.timeout_s=0"}).parallel.timeout_s, 0) << "0 turns it off";
  try {
    tiny({"parallel.timeout_s=-1"});
    ADD_FAILURE() << "a negative timeout was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.timeout_s"), std::string::npos) << e.what();
  }
}

TEST(Config, WarmupBeyondTheRunIsWarnedAboutOnce) {
  EXPECT_TRUE(config_warnings(tiny({"train.steps=20", "train.warmup_steps=20"})).empty());
  const auto w = config_warnings(tiny({"train.steps=20", "train.warmup_steps=30"}));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("train.warmup_steps = 30"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("train.steps = 20"), std::string::npos) << w[0];
  // The peak it reaches, 3e-3 * 4 / 10, in a few digits (not 0.0012000000000000001).
  const auto peak = config_warnings(tiny({"train.steps=4", "train.warmup_steps=10"}));
  ASSERT_EQ(peak.size(), 1u);
  EXPECT_NE(peak[0].find("(peaks at 0.0012)"), std::string::npos) << peak[0];
}

// --- launch lines ------------------------------------------------------------------------

// Each mpirun command in `text` (from "mpirun -" through its continuation lines: a trailing '\\',
// or a bash array "launch=(mpirun ..." up to its ')').
std::vector<std::string> mpirun_commands(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  bool open = false, array = false;
  while (std::getline(lines, line)) {
    const size_t first = line.find_first_not_of(' ');
    const std::string trimmed = first == std::string::npos ? "" : line.substr(first);
    if (!open && (trimmed.rfind("mpirun -", 0) == 0 || trimmed.rfind("launch=(mpirun -", 0) == 0)) {
      out.emplace_back();
      open = true;
      array = trimmed[0] == 'l';
    }
    if (!open) continue;
    out.back() += trimmed + " ";
    open =
        array ? trimmed.find(')') == std::string::npos : !trimmed.empty() && trimmed.back() == '\\';
  }
  return out;
}

// Ctrl-C under mpirun saves only if mpirun gives the ranks longer than its default 1 s between
// SIGTERM and SIGKILL: every launch line a user copies (README) or runs (the demo) says so.
TEST(LaunchLines, EveryMpirunLineOfTheReadmeAndTheDemoGivesTheRanksTimeToSave) {
  for (const std::string file : {"README.md", "tools/demo.sh"}) {
    const auto commands = mpirun_commands(test::read_file(test::source_dir() + "/" + file));
    EXPECT_FALSE(commands.empty()) << file;
    for (const std::string& command : commands)
      EXPECT_NE(command.find("--mca odls_base_sigkill_timeout "), std::string::npos)
          << file << ": " << command;
  }
}

// --- taco-train and taco-generate from the command line (one process) ---------------------

struct Cli {
  std::string dir, data, train;
  std::string args;  // a model small enough that a run takes about a second
  explicit Cli(const std::string& name)
      : dir(test::scratch_dir(name)),
        data(test::fortune_shards()),
        train(test::binary_dir() + "/taco-train") {
    args =
        " --set model.n_layer=2 --set model.d_model=32 --set model.n_head=2 --set "
        "model.seq_len=32 --set train.micro_batch_size=4 --set train.global_batch_tokens=256 "
        "--set log.every=1 --set log.eval_every=0 --set log.eval_batches=1 --set "
        "train.warmup_steps=1 --set data.train=" +
        data + "/train_*.bin --set data.val=" + data + "/val_*.bin";
  }
  test::CommandResult run(const std::string& extra) const {
    return test::run_command("cd " + dir + " && " + train + args + " " + extra);
  }
};

TEST(RunFolder, ARefusedRunChangesNeitherConfigNorLogAndResumeIsNotSaved) {
  Cli cli("nlw_refused");
  ASSERT_EQ(cli.run("--set run.name=r --set train.steps=2").exit_code, 0);
  const std::string run = cli.dir + "/runs/r";
  const std::string config = test::read_file(run + "/config.yaml");
  const std::string log = test::read_file(run + "/log.txt");
  ASSERT_NE(config.find("n_layer: 2"), std::string::npos) << config;

  // Another model on resume; a fresh run into a folder with checkpoints: both refused.
  auto other = cli.run("--set run.name=r --set train.steps=4 --set model.n_layer=4 --resume");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  auto fresh = cli.run("--set run.name=r --set train.steps=4");
  EXPECT_EQ(fresh.exit_code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find("holds checkpoints"), std::string::npos) << fresh.output;
  EXPECT_EQ(test::read_file(run + "/config.yaml"), config) << "a refused run rewrote it";
  EXPECT_EQ(test::read_file(run + "/log.txt"), log) << "a refused run appended to it";

  // A resumed run saves its config, with the file's own resume value, and appends its log.
  auto resumed = cli.run("--set run.name=r --set train.steps=3 --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const Config saved = load_config_file(run + "/config.yaml");
  EXPECT_EQ(saved.checkpoint.resume, "false");
  EXPECT_EQ(saved.train.steps, 3);
  const std::string log_after = test::read_file(run + "/log.txt");
  EXPECT_EQ(log_after.rfind(log, 0), 0u) << "the earlier log is kept";
  EXPECT_NE(log_after.find("resumed from", log.size()), std::string::npos) << log_after;
  // The saved config, run again without --resume, refuses to overwrite instead of resuming.
  auto plain = test::run_command("cd " + cli.dir + " && " + cli.train + " " + run + "/config.yaml");
  EXPECT_EQ(plain.exit_code, 2) << plain.output;
  EXPECT_NE(plain.output.find("pass --resume"), std::string::npos) << plain.output;
}

// Every complete checkpoint damaged: --resume and resume: auto both stop before training with
// one line saying how to start afresh (resume: auto used to start from step 0 over them, and
// --resume to send the user to a plain run, which refuses a folder holding checkpoints); the
// folder and the run's files stay as they were. Following the advice then works.
TEST(RunFolder, EveryCheckpointDamagedIsRefusedAndLeftAsItWas) {
  Cli cli("nlw_all_damaged_cli");
  ASSERT_EQ(cli.run("--set run.name=d --set train.steps=2 --set checkpoint.every=1").exit_code, 0);
  const std::string run = cli.dir + "/runs/d", ckpt = run + "/ckpt";
  truncate_rank_file(ckpt + "/step_00000001");
  flip_a_byte(ckpt + "/step_00000002");
  const std::vector<std::string> before = listing(ckpt);
  const std::string config = test::read_file(run + "/config.yaml");
  const std::string log = test::read_file(run + "/log.txt");
  for (const std::string resume : {"--set checkpoint.resume=auto", "--resume"}) {
    SCOPED_TRACE(resume);
    auto r = cli.run("--set run.name=d --set train.steps=4 " + resume);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("every complete checkpoint in runs/d/ckpt (the newest: step 2)"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("mv runs/d/ckpt runs/d/ckpt.damaged"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("run without --resume"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step     1/"), std::string::npos) << "trained:\n" << r.output;
    EXPECT_EQ(listing(ckpt), before);
    EXPECT_EQ(test::read_file(run + "/config.yaml"), config);
    EXPECT_EQ(test::read_file(run + "/log.txt"), log);
  }
  fs::rename(ckpt, ckpt + ".damaged");
  auto fresh = cli.run("--set run.name=d --set train.steps=2 --set checkpoint.resume=auto");
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(fresh.output.find("resumed from"), std::string::npos) << fresh.output;
  EXPECT_EQ(listing(ckpt + ".damaged"), before);
}

TEST(RunFolder, AnUnwritableCheckpointFolderIsRefusedBeforeTraining) {
  Cli cli("nlw_readonly");
  auto r = cli.run("--set run.name=ro --set train.steps=50 --set checkpoint.dir=/proc/self/ckpt");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/proc/self/ckpt"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step     1/"), std::string::npos) << "trained first:\n" << r.output;
  EXPECT_FALSE(fs::exists(cli.dir + "/runs/ro/config.yaml"));
}

TEST(Warnings, SmallDataWarmupAndAChangedScheduleEachGetOneLine) {
  Cli cli("nlw_warnings");
  // 200 tokens: more than a window of 33, fewer than a batch of 256.
  std::vector<uint16_t> tokens(200);
  std::mt19937 rng(uint32_t(test::fresh_seed()));
  for (auto& t : tokens) t = uint16_t(rng() % 256);
  write_shard(cli.dir + "/small.bin", tokens);
  auto small = cli.run("--set run.name=s --set train.steps=2 --set data.train=" + cli.dir +
                       "/small.bin --set train.warmup_steps=5");
  ASSERT_EQ(small.exit_code, 0) << small.output;
  EXPECT_NE(small.output.find("200 tokens, fewer than one batch"), std::string::npos)
      << small.output;
  EXPECT_NE(small.output.find("train.warmup_steps = 5 is beyond train.steps = 2"),
            std::string::npos)
      << small.output;

  auto first = cli.run("--set run.name=w --set train.steps=4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.output.find("changed schedule"), std::string::npos) << first.output;
  auto longer = cli.run("--set run.name=w --set train.steps=8 --resume");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_NE(longer.output.find("changed schedule (train.steps 4 -> 8"), std::string::npos)
      << longer.output;
  auto same = cli.run("--set run.name=w --set train.steps=8 --resume");
  EXPECT_EQ(same.output.find("changed schedule"), std::string::npos) << same.output;
  // The checkpoint itself records its schedule: continued into another run folder (no config.yaml
  // there to compare with) with more steps, the change is still reported.
  auto elsewhere = cli.run(
      "--set run.name=w2 --set checkpoint.dir=runs/w/ckpt --set "
      "train.steps=12 --set train.lr=0.002 --resume");
  ASSERT_EQ(elsewhere.exit_code, 0) << elsewhere.output;
  EXPECT_NE(elsewhere.output.find("changed schedule (train.steps 8 -> 12, train.lr 0.003 -> 0.002"),
            std::string::npos)
      << elsewhere.output;
}

TEST(TacoGenerate, FallsBackPastADamagedNewestCheckpoint) {
  Cli cli("nlw_generate");
  ASSERT_EQ(cli.run("--set run.name=g --set train.steps=3 --set checkpoint.every=1").exit_code, 0);
  const std::string run = cli.dir + "/runs/g";
  const std::string gen = test::binary_dir() + "/taco-generate " + run + " --tokens 5";
  auto before = test::run_command(gen + " --temperature 0");
  ASSERT_EQ(before.exit_code, 0) << before.output;
  EXPECT_NE(before.output.find("step_00000003"), std::string::npos) << before.output;
  truncate_rank_file(run + "/ckpt/step_00000003");
  auto after = test::run_command(gen + " --temperature 0");
  ASSERT_EQ(after.exit_code, 0) << after.output;
  EXPECT_NE(after.output.find("step_00000003/rank_00000.bin"), std::string::npos)
      << "names the damaged file: " << after.output;
  EXPECT_NE(after.output.find("(step 2)"), std::string::npos) << after.output;
}

TEST(TacoReshard, FallsBackPastADamagedNewestCheckpoint) {
  Cli cli("nlw_reshard");
  ASSERT_EQ(cli.run("--set run.name=r --set train.steps=3 --set checkpoint.every=1").exit_code, 0);
  const std::string run = cli.dir + "/runs/r";
  truncate_rank_file(run + "/ckpt/step_00000003");
  auto r = test::run_command("cd " + cli.dir + " && " + test::binary_dir() + "/taco-reshard " +
                             run + " --set parallel.tp=2 --set run.name=r2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step_00000003/rank_00000.bin"), std::string::npos)
      << "names the damaged file: " << r.output;
  EXPECT_NE(r.output.find("(step 2)"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(cli.dir + "/runs/r2/ckpt/step_00000002/COMPLETE"));
}

}  // namespace
}  // namespace taco
