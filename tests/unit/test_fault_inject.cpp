// Real failures on two CPU ranks under mpirun (tools/fault_inject.py does the same at random
// points, many times): a rank killed with SIGKILL inside a collective, while writing its
// checkpoint file, or between the written files and the folder's rename, then --resume: the
// final checkpoint and every logged loss equal an uninterrupted run's, bit for bit, and the
// crashed job ended within the watchdog's bound. A rank killed while mpirun is told not to abort
// (the survivor would wait forever): the watchdog ends it with one line naming the site, group
// and peer. Ctrl-C (SIGINT) to mpirun, with the launch flag the README gives, saves a checkpoint.
// The kill points come from the TACO_FAULT_POINT test hook (parallel/fault_point.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "engine/train/checkpoint.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A bound for a crashed job to be gone: the watchdog's timeout (3 s below) + 10 s, as promised,
// + mpirun's start on a loaded 2-core machine.
constexpr double kGoneWithinSeconds = 3 + 10 + 15;
constexpr int kSteps = 8;

// Oversubscribed ranks that yield while they wait, as the suite's mpi tests run.
std::string mpirun(const std::string& flags) {
  std::string line = std::string(TACO_MPIEXEC) + " --oversubscribe --bind-to none -x " +
                     "OMP_NUM_THREADS=1 --mca mpi_yield_when_idle 1";
  if (geteuid() == 0) line += " --allow-run-as-root";
  return line + " " + flags + " -np 2 ";
}

struct Job {
  std::string dir, args;
  explicit Job(const std::string& name) : dir(test::scratch_dir(name)) {
    const std::string data = test::fortune_shards();
    args =
        " --set parallel.tp=2 --set model.n_layer=2 --set model.d_model=32 --set "
        "model.n_head=2 --set model.seq_len=32 --set train.micro_batch_size=4 --set "
        "train.global_batch_tokens=256 --set train.steps=" +
        std::to_string(kSteps) +
        " --set train.warmup_steps=2 --set log.every=1 --set log.eval_every=0 --set "
        "log.eval_batches=1 --set checkpoint.every=2 --set checkpoint.keep=2 --set "
        "parallel.timeout_s=3 --set data.train=" +
        data + "/train_*.bin --set data.val=" + data + "/val_*.bin";
  }
  // taco-train on 2 ranks in run `name`; `env` before the command, `flags` to mpirun.
  test::CommandResult run(const std::string& name, const std::string& extra,
                          const std::string& env = "", const std::string& flags = "") const {
    return test::run_command(
        "cd " + dir + " && " + env + " timeout -k 5 120 " +
        mpirun(flags.empty() ? "--mca orte_abort_on_non_zero_status 1" : flags) +
        test::binary_dir() + "/taco-train configs.yaml --set run.name=" + name + args + " " +
        extra);
  }
};

// The config file every run reads (its path is in every checkpoint's header, so the same one).
void write_config(const Job& job) {
  test::write_file(job.dir + "/configs.yaml",
                   test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml"));
}

std::string losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line, out;
  while (std::getline(in, line))
    if (line.find("\"loss\": ") != std::string::npos)
      out += line.substr(0, line.find("\"lr\"")) + "\n";  // step and loss (%.9g)
  return out;
}

// The final checkpoint of `a` and `b`, every rank file, byte for byte (same config path, step,
// layout: the headers agree too).
void expect_same_final_checkpoint(const std::string& a, const std::string& b) {
  const std::string step = "/ckpt/" + checkpoint_step_name(kSteps) + "/";
  for (int r = 0; r < 2; ++r) {
    const std::string fa = a + step + rank_file_name(r), fb = b + step + rank_file_name(r);
    ASSERT_TRUE(fs::exists(fa) && fs::exists(fb)) << fa << " / " << fb;
    EXPECT_TRUE(test::read_file(fa) == test::read_file(fb)) << fa << " differs from " << fb;
  }
}

// Killed at `point` (TACO_FAULT_POINT), then resumed: the same bits as the straight run.
void crash_resume_and_compare(const Job& job, const std::string& point) {
  SCOPED_TRACE(point);
  const std::string name = "crash_" + std::to_string(std::hash<std::string>()(point) % 100000);
  const auto t0 = Clock::now();
  auto crashed = job.run(name, "", "TACO_FAULT_POINT=" + point);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(crashed.exit_code, 0) << crashed.output;
  EXPECT_NE(crashed.exit_code, 124) << "hung: " << crashed.output;
  EXPECT_LT(s, kGoneWithinSeconds) << crashed.output;
  EXPECT_NE(crashed.output.find("SIGKILL at"), std::string::npos) << crashed.output;
  auto resumed = job.run(name, "--resume");
  ASSERT_EQ(resumed.exit_code, 0) << crashed.output << "\n---\n" << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  expect_same_final_checkpoint(job.dir + "/runs/straight", job.dir + "/runs/" + name);
  EXPECT_EQ(losses(job.dir + "/runs/" + name), losses(job.dir + "/runs/straight"));
}

TEST(FaultInject, KilledRanksResumeToTheSameBitsAsAStraightRun) {
  Job job("nlw_faults");
  write_config(job);
  auto straight = job.run("straight", "");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string reference = losses(job.dir + "/runs/straight");
  ASSERT_EQ(std::count(reference.begin(), reference.end(), '\n'), kSteps) << reference;
  // Rank 1 inside its 100th collective (~30 a step: in step 4); rank 1 half-way through its file of
  // the second save; rank 0 with every file of the third save written, before the folder rename.
  crash_resume_and_compare(job, "comm:100@1");
  crash_resume_and_compare(job, "ckpt.write:2@1");
  crash_resume_and_compare(job, "ckpt.rename:3@0");
}

// mpirun told to let the job live on when a rank dies: the survivor's watchdog ends it.
TEST(FaultInject, WatchdogEndsTheSurvivorWhateverMpirunIsTold) {
  Job job("nlw_watchdog");
  write_config(job);
  const auto t0 = Clock::now();
  auto r = job.run("w", "", "TACO_FAULT_POINT=comm:30@1",
                   "--mca orte_abort_on_non_zero_status 0 --mca orte_enable_recovery 1");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  EXPECT_LT(s, kGoneWithinSeconds) << r.output;
  // rank 0: "watchdog: 3 s inside all_reduce at site ... of group tp ..., waiting on world
  // rank(s) 1"
  const size_t at = r.output.find("taco: rank 0: watchdog: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find(" at site "), std::string::npos) << line;
  EXPECT_NE(line.find(" of group "), std::string::npos) << line;
  EXPECT_NE(line.find("waiting on world rank(s) 1"), std::string::npos) << line;
  EXPECT_NE(line.find("parallel.timeout_s = 3"), std::string::npos) << line;
  // No rank process left ("[t]": the pattern does not match the shell running pgrep).
  auto left = test::run_command("pgrep -f '[t]aco-train configs.yaml --set run.name=w ' | wc -l");
  EXPECT_EQ(std::stoi(left.output), 0) << "a rank outlived the job";
}

// A rank that dies before MPI_Init leaves the others inside it (OpenMPI's start-up exchange
// waits for every rank): the watchdog watches MPI_Init too, with at least 10 s.
TEST(FaultInject, WatchdogEndsRanksLeftInsideMpiInit) {
  Job job("nlw_watchdog_init");
  write_config(job);
  const auto t0 = Clock::now();
  auto r = job.run("i", "", "TACO_FAULT_POINT=startup@1",
                   "--mca orte_abort_on_non_zero_status 0 --mca orte_enable_recovery 1");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  EXPECT_LT(s, 10 + kGoneWithinSeconds) << r.output;
  const size_t at = r.output.find("taco: rank 0: watchdog: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("inside MPI_Init"), std::string::npos) << line;
  EXPECT_NE(line.find("rank(s) 1"), std::string::npos) << line;
}

// Every value of every section of a CPU (fp32) rank file is finite.
bool rank_file_finite(const std::string& path) {
  const RankCheckpoint ck = read_rank_checkpoint(path);
  for (const CheckpointPart& part : ck.sections) {
    for (size_t i = 0; i + 4 <= part.bytes.size(); i += 4) {
      float v = 0;
      std::memcpy(&v, part.bytes.data() + i, 4);
      if (!std::isfinite(v)) return false;
    }
  }
  return true;
}

// lr 1e6 on 2 ranks with a checkpoint after every step: the step whose gradient norm is NaN is
// not applied, the run stops with one line naming that step (printed once, not once per rank,
// and without the launcher's MPI_Abort banner), and every checkpoint left is complete, finite
// and older than that step.
TEST(FaultInject, NonFiniteStepStopsEveryRankWithOneLineAndKeepsGoodCheckpoints) {
  Job job("nlw_nonfinite");
  write_config(job);
  auto r = job.run("n", "--set train.lr=1e6 --set train.warmup_steps=0 --set train.steps=20 " +
                            std::string("--set checkpoint.every=1 --set checkpoint.keep=3"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  const size_t at = r.output.find("taco-train: error: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("taco-train: error: ", at + 1), std::string::npos)
      << "more than one line:\n"
      << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find("non-finite"), std::string::npos) << line;
  const size_t step_at = line.find(": step ");
  ASSERT_NE(step_at, std::string::npos) << line;
  const int stopped = std::atoi(line.c_str() + step_at + 7);
  EXPECT_NE(test::read_file(job.dir + "/runs/n/log.txt").find(line.substr(19)), std::string::npos)
      << "the line is not in log.txt";
  int folders = 0;
  for (const std::string& folder : complete_checkpoints(job.dir + "/runs/n/ckpt")) {
    ++folders;
    EXPECT_LT(std::atoi(folder.c_str() + folder.rfind("step_") + 5), stopped) << folder;
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_TRUE(rank_file_finite(folder + "/" + rank_file_name(rank))) << folder;
  }
  EXPECT_GT(folders, 0) << r.output;
}

// Ctrl-C to mpirun: OpenMPI 4.1 stops reading the ranks' output, waits odls_base_sigkill_timeout
// seconds, sends them SIGTERM and SIGKILL as long again later (default 1 s; the README raises it).
// A log line written in between used to block rank 0 on its full pty (or kill it with SIGPIPE)
// before it saved; log.every: 1 here writes one per step. Now the ranks finish the step, save and
// stop. (That a resumed run continues bit for bit is the SIGTERM test's part,
// tests/unit/test_checkpoint.cpp.)
TEST(FaultInject, SigintToMpirunSavesACheckpointWithTheReadmeFlag) {
  Job job("nlw_sigint");
  write_config(job);
  const std::string log = job.dir + "/b.log";
  const std::string flags =
      "--mca orte_abort_on_non_zero_status 1 --mca odls_base_sigkill_timeout 3";
  const std::string cmd = mpirun(flags) + test::binary_dir() +
                          "/taco-train configs.yaml --set run.name=b" + job.args +
                          " --set train.steps=100000 --set checkpoint.every=0";
  // env --default-signal: a background job of a shell script starts with SIGINT ignored; a
  // terminal's mpirun does not.
  auto started =
      test::run_command("cd " + job.dir + " && (env --default-signal=INT " + cmd + " > " + log +
                        " 2>&1 & echo $! > mpirun.pid; wait $!; echo $? > b.rc) "
                        "> /dev/null 2>&1 &");
  ASSERT_EQ(started.exit_code, 0);
  bool signalled = false;
  for (int i = 0; i < 2400 && !signalled; ++i) {  // 2 min: ctest -j shares the cores
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string l = losses(job.dir + "/runs/b");
    if (std::count(l.begin(), l.end(), '\n') >= 20) {
      test::run_command("kill -INT $(cat " + job.dir + "/mpirun.pid)");
      signalled = true;
    }
  }
  ASSERT_TRUE(signalled) << test::read_file(log);
  const auto t0 = Clock::now();
  for (int i = 0; i < 1200 && !fs::exists(job.dir + "/b.rc"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = test::read_file(log) + "\n---\n" + cmd;
  ASSERT_TRUE(fs::exists(job.dir + "/b.rc")) << "mpirun did not stop:\n" << out;
  EXPECT_LT(s, kGoneWithinSeconds) << out;
  const std::string saved = test::read_file(job.dir + "/runs/b/log.txt");
  EXPECT_NE(saved.find("stopped by SIGTERM after step"), std::string::npos) << saved;
  const std::string folder = newest_complete_checkpoint(job.dir + "/runs/b/ckpt", nullptr);
  ASSERT_FALSE(folder.empty()) << out;
  for (int r = 0; r < 2; ++r)
    EXPECT_NO_THROW(verify_rank_checkpoint(folder + "/" + rank_file_name(r)));
}

}  // namespace
}  // namespace taco
