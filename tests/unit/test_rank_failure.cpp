// A rank that dies mid-run must not leave the others waiting (docs/design.md §6): mpirun, with the
// settings taco launches with, ends every rank, and the job exits non-zero, in bounded time.
//
// OpenMPI 4.1 does this by default: when a process exits non-zero
// (orte_abort_on_non_zero_status) or without MPI_Finalize, mpirun kills the rest of the job.
// Both defaults can be switched off from the environment or an mca-params.conf
// (OMPI_MCA_orte_abort_on_non_zero_status=0, OMPI_MCA_orte_enable_recovery=1), and then the
// survivors wait in their all-reduce forever. Command-line --mca settings take precedence, so
// taco's launch line pins them; the last test shows that they win over a hostile environment.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_util.h"

namespace {

using taco::test::run_command;

// Far below the 120 s `timeout` limit: a hang shows as 124, a slow abort as a failed bound.
constexpr double kBoundSeconds = 60;

std::string mpirun_line(int np) {
  std::string line = std::string(TACO_MPIEXEC) + " --oversubscribe --bind-to none";
  if (geteuid() == 0) line += " --allow-run-as-root";
  line += " --mca orte_abort_on_non_zero_status 1 --mca orte_enable_recovery 0";
  return line + " -np " + std::to_string(np);
}

struct JobResult {
  int exit_code;
  double seconds;
  std::string output;
};

JobResult launch(const std::string& env, const std::string& pid_dir, long iterations, int fail_rank,
                 int exit_code) {
  const std::string cmd = env + " timeout -k 10 120 " + mpirun_line(3) + " " +
                          TACO_RANK_FAILURE_MAIN + " " + pid_dir + " " +
                          std::to_string(iterations) + " " + std::to_string(fail_rank) + " 50 " +
                          std::to_string(exit_code);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_command(cmd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {r.exit_code, s, cmd + "\n" + r.output};
}

// A zombie (exited, waiting for init to reap it after mpirun left) is not running.
bool running(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = taco::test::read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // "pid (comm) S ...": the state follows the name
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// Every rank wrote its pid; once mpirun has returned, none may still be running.
void expect_no_rank_left(const std::string& pid_dir) {
  for (int rank = 0; rank < 3; ++rank) {
    const std::string text =
        taco::test::read_file(pid_dir + "/rank" + std::to_string(rank) + ".pid");
    ASSERT_FALSE(text.empty()) << "rank " << rank << " never started";
    const pid_t pid = pid_t(std::stol(text));
    bool alive = true;
    for (int i = 0; i < 50 && alive; ++i) {  // up to 5 s for a kill in flight to land
      alive = running(pid);
      if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_FALSE(alive) << "rank " << rank << " (pid " << pid << ") outlived mpirun";
  }
}

void expect_job_ended(const JobResult& run, const std::string& pid_dir) {
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_NE(run.exit_code, 124) << "timed out: a rank waited for the dead peer\n" << run.output;
  EXPECT_NE(run.exit_code, 137) << "killed by timeout -k\n" << run.output;
  EXPECT_LT(run.seconds, kBoundSeconds) << run.output;
  expect_no_rank_left(pid_dir);
}

constexpr long kForever = 1000000000;  // survivors never finish on their own

TEST(RankFailure, HealthyJobExitsZero) {
  const std::string dir = taco::test::scratch_dir("rank_failure_healthy");
  const JobResult run = launch("", dir, 100, -1, 0);
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(RankFailure, RankExitingNonZeroEndsEveryRankWithItsCode) {
  const std::string dir = taco::test::scratch_dir("rank_failure_code3");
  const JobResult run = launch("", dir, kForever, 1, 3);
  expect_job_ended(run, dir);
  EXPECT_EQ(run.exit_code, 3) << "mpirun reports the first failing rank's code\n" << run.output;
}

TEST(RankFailure, RankExitingZeroWithoutFinalizeStillEndsTheJobNonZero) {
  const std::string dir = taco::test::scratch_dir("rank_failure_code0");
  expect_job_ended(launch("", dir, kForever, 1, 0), dir);
}

TEST(RankFailure, LaunchSettingsOverrideAnEnvironmentThatDisablesAborts) {
  const std::string dir = taco::test::scratch_dir("rank_failure_hostile_env");
  const JobResult run =
      launch("OMPI_MCA_orte_abort_on_non_zero_status=0 OMPI_MCA_orte_enable_recovery=1", dir,
             kForever, 2, 3);
  expect_job_ended(run, dir);
}

}  // namespace
