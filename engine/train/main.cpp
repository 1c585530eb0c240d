// taco-train [CONFIG.yaml] [--set key.path=value ...] [--resume]
//
// With no CONFIG the embedded default (configs/tiny-cpu.yaml) runs. Every rank loads and
// validates the same config; bad input ends every rank with exit code 2 and one line from the
// lowest rank that saw it. A failure during training aborts the whole job (no rank waits on a
// peer that died).
#include <mpi.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/default_config.h"
#include "engine/runtime/log.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "kernels/check.h"

namespace {

constexpr const char* kUsage =
    "usage: taco-train [CONFIG.yaml] [--set key.path=value ...] [--resume]\n"
    "  CONFIG.yaml   experiment file (default: the embedded configs/tiny-cpu.yaml)\n"
    "  --set K=V     override one config key, e.g. --set train.lr=3e-4 --set parallel.tp=2\n"
    "  --resume      continue from the newest complete checkpoint\n";

struct Args {
  std::string config_path;  // "" = embedded default
  std::vector<std::string> overrides;
  bool resume = false;
  bool help = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--resume") {
      a.resume = true;
    } else if (s == "--set") {
      if (i + 1 >= argc) throw taco::UserError("--set: missing key.path=value after --set");
      a.overrides.push_back(argv[++i]);
    } else if (s.rfind("--set=", 0) == 0) {
      a.overrides.push_back(s.substr(6));
    } else if (!s.empty() && s[0] == '-') {
      throw taco::UserError(s + ": unknown option; see taco-train --help");
    } else if (a.config_path.empty()) {
      a.config_path = s;
    } else {
      throw taco::UserError(s + ": only one CONFIG.yaml may be given (the first was " +
                            a.config_path + ")");
    }
  }
  return a;
}

// Runs `fn` on every rank; if any rank throws, the lowest such rank prints its one line and
// every rank returns the largest exit code. Returns 0 when all ranks succeeded.
int collectively(int rank, const std::function<void()>& fn) {
  int code = 0;
  std::string message;
  try {
    fn();
  } catch (const taco::Error& e) {
    code = e.exit_code();
    message = e.what();
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  int worst = 0, first_failed = 0;
  int mine = code ? rank : 1 << 30;
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (code && rank == first_failed)
    std::fprintf(stderr, "taco-train: error: %s\n", message.c_str());
  return worst;
}

int local_rank_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  taco::set_error_rank(rank);
  taco::init_logging(rank, false);

  Args args;
  taco::Config config;
  std::unique_ptr<taco::Trainer> trainer;
  taco::RunContext ctx;
  ctx.world = MPI_COMM_WORLD;
  ctx.local_rank = local_rank_from_env();
  taco::install_stop_signal_handlers();

  int rc = collectively(rank, [&] {
    args = parse_args(argc, argv);
    if (args.help) return;
    if (args.resume) args.overrides.push_back("checkpoint.resume=true");
    config = args.config_path.empty()
                 ? taco::load_config_text(taco::kDefaultConfigYaml, taco::kDefaultConfigName,
                                          args.overrides)
                 : taco::load_config_file(args.config_path, args.overrides);
  });
  if (rc == 0 && args.help) {
    if (rank == 0) std::fputs(kUsage, stdout);
    MPI_Finalize();
    return 0;
  }
  if (rc == 0) {
    rc = collectively(rank, [&] {
      namespace fs = std::filesystem;
      ctx.run_dir = (fs::path(config.run.dir) / config.run.name).string();
      if (rank == 0) {
        std::error_code ec;
        fs::create_directories(ctx.run_dir, ec);
        if (ec)
          throw taco::UserError(ctx.run_dir + ": cannot create run directory: " + ec.message() +
                                " (set run.dir)");
        std::ofstream(ctx.run_dir + "/config.yaml") << taco::config_to_yaml(config);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      taco::init_logging(rank, config.log.all_ranks, rank == 0 ? ctx.run_dir + "/log.txt" : "");
      spdlog::info("taco-train: {} ({} rank{})", config.source, world, world == 1 ? "" : "s");
      spdlog::info("effective config (saved to {}/config.yaml):\n{}", ctx.run_dir,
                   taco::config_to_yaml(config));
      trainer = std::make_unique<taco::Trainer>(config, ctx);
      spdlog::info("{}", trainer->describe());
    });
  }
  if (rc != 0) {
    MPI_Finalize();
    return rc;
  }

  taco::TrainHistory history;
  try {
    history = trainer->run();
  } catch (const taco::Error& e) {
    std::fprintf(stderr, "taco-train: error: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, e.exit_code());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "taco-train: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (history.stopped_by_signal != 0) {
    const int sig = history.stopped_by_signal;
    spdlog::warn("stopped by {} after step {}; checkpoint {}; continue with --resume",
                 sig == SIGINT    ? "SIGINT"
                 : sig == SIGTERM ? "SIGTERM"
                                  : "a signal",
                 history.steps_done, history.checkpoint);
    MPI_Finalize();
    return 128 + sig;
  }
  if (history.start_step >= config.train.steps)
    spdlog::info("the checkpoint is at step {} of train.steps {}: nothing left to train",
                 history.start_step, config.train.steps);
  spdlog::info("done: outputs in {}/", ctx.run_dir);
  MPI_Finalize();
  return 0;
}
