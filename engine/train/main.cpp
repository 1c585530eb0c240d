// taco-train [CONFIG.yaml] [--set key.path=value ...] [--resume]
// taco-train --help | --print-config-reference   (no MPI needed)
//
// With no CONFIG the embedded default (configs/tiny-cpu.yaml) runs. Every rank loads and
// validates the same config; bad input ends every rank with exit code 2 and one line from the
// lowest rank that saw it. A failure during training aborts the whole job (no rank waits on a
// peer that died; the watchdog, parallel.timeout_s, ends a rank stuck in a call with one).
//
// Nothing in the run folder changes until every check has passed: the Trainer's constructor
// (layout, data, checkpoint to resume, overwrite refusal) and the writable-folder probe run
// first; only then are config.yaml written and the log lines so far put into log.txt. The saved
// config.yaml keeps the file's own checkpoint.resume: --resume is an action, not config.
#include <mpi.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/config_reference.h"
#include "engine/config/default_config.h"
#include "engine/data/shards.h"
#include "engine/runtime/log.h"
#include "engine/train/checkpoint.h"
#include "engine/train/schedule.h"
#include "engine/train/trainer.h"
#include "kernels/check.h"
#include "parallel/fault_point.h"
#include "parallel/host_values.h"
#include "parallel/mpi_communicator.h"
#include "parallel/watchdog.h"

namespace {

constexpr const char* kUsage =
    "usage: taco-train [CONFIG.yaml] [--set key.path=value ...] [--resume]\n"
    "       mpirun -np N taco-train ...   (N = parallel.tp x parallel.pp x parallel.dp)\n"
    "\n"
    "Trains a GPT-2-style model as the experiment file says: tensor, pipeline and data\n"
    "parallelism, each communication site optionally compressed (FP8, TACO). Outputs go to\n"
    "<run.dir>/<run.name>/: config.yaml, log.txt, metrics.jsonl, ckpt/.\n"
    "\n"
    "  CONFIG.yaml    experiment file (default: the embedded configs/tiny-cpu.yaml)\n"
    "  --set K=V      override one config key, e.g. --set train.lr=3e-4 --set parallel.tp=2\n"
    "                 or --set 'compression.default={codec: taco}'\n"
    "  --resume       continue from the newest complete checkpoint\n"
    "  --print-config-reference\n"
    "                 write the config reference (docs/config-reference.md) to stdout\n"
    "  --help         this text\n"
    "\n"
    "Every key's type, default and meaning: docs/config-reference.md. Logs and metrics.jsonl:\n"
    "docs/logs-and-metrics.md. Config sections and their keys:\n";

struct Args {
  std::string config_path;  // "" = embedded default
  std::vector<std::string> overrides;
  bool resume = false;
  bool help = false;
  bool print_reference = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--print-config-reference") {
      a.print_reference = true;
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
int collectively(taco::Communicator& world, const std::function<void()>& fn) {
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
  const int worst = taco::max_over(world, code, taco::Site::startup);
  // The lowest failing rank, as the largest -rank (a rank that succeeded offers less).
  const int first_failed =
      -taco::max_over(world, code ? -world.rank() : -(1 << 30), taco::Site::startup);
  if (code && world.rank() == first_failed)
    std::fprintf(stderr, "taco-train: error: %s\n", message.c_str());
  return worst;
}

// MPI_Finalize waits for every peer: watched, as a call with a peer that may have died.
void finalize() {
  taco::WatchScope watch("finalize", taco::Site::exit, -1, MPI_COMM_WORLD, "world");
  MPI_Finalize();
}

int local_rank_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v);
  }
  return 0;
}

taco::Config load(const Args& args, const std::vector<std::string>& overrides) {
  return args.config_path.empty()
             ? taco::load_config_text(taco::kDefaultConfigYaml, taco::kDefaultConfigName, overrides)
             : taco::load_config_file(args.config_path, overrides);
}

// Warnings for a resumed run whose schedule differs from the one that produced the checkpoint
// (recorded in its header; for a checkpoint of an older build, the run folder's config.yaml):
// the cosine is recomputed over the new train.steps, so the learning rate jumps at the first
// resumed step.
void warn_schedule_change(const taco::Config& now, const taco::Trainer& trainer,
                          const std::string& saved_path) {
  const int start = trainer.start_step();
  if (start <= 0) return;
  taco::TrainSection a;
  std::string source = "the checkpoint's record";
  if (!trainer.resumed_schedule(&a)) {
    std::error_code ec;
    if (!std::filesystem::exists(saved_path, ec)) return;
    try {
      a = taco::load_config_file(saved_path, {}).train;
    } catch (const std::exception&) {
      return;  // a config.yaml of an older build: nothing to compare with
    }
    source = saved_path;
  }
  const auto& b = now.train;
  std::string changes;
  auto differ = [&](const char* key, const std::string& was, const std::string& is) {
    if (was != is)
      changes += std::string(changes.empty() ? "" : ", ") + key + " " + was + " -> " + is;
  };
  differ("train.steps", std::to_string(a.steps), std::to_string(b.steps));
  differ("train.lr", fmt::format("{}", a.lr), fmt::format("{}", b.lr));
  differ("train.warmup_steps", std::to_string(a.warmup_steps), std::to_string(b.warmup_steps));
  differ("train.min_lr_frac", fmt::format("{}", a.min_lr_frac), fmt::format("{}", b.min_lr_frac));
  if (changes.empty()) return;
  const double was = taco::learning_rate(start - 1, a.steps, a.lr, a.warmup_steps, a.min_lr_frac);
  const double is = taco::learning_rate(start, b.steps, b.lr, b.warmup_steps, b.min_lr_frac);
  spdlog::warn(
      "resuming at step {} with a changed schedule ({}; the old values from {}): the "
      "learning rate goes from {:.2e} at step {} to {:.2e} at step {}; keep the old values to "
      "continue the same schedule",
      start, changes, source, was, start, is, start + 1);
}

// One warning per data set that holds less than it is asked for once: every step (or every
// evaluation) then repeats the same tokens.
void warn_small_data(const taco::Config& c) {
  const uint64_t train = taco::count_shard_tokens(c.data.train);
  if (train > 0 && train < uint64_t(c.train.global_batch_tokens))
    spdlog::warn(
        "data.train '{}': {} tokens, fewer than one batch (train.global_batch_tokens = {}): "
        "every step sees the same tokens again; use more data or a smaller batch",
        c.data.train, train, c.train.global_batch_tokens);
  if (c.data.val.empty()) return;
  const uint64_t val = taco::count_shard_tokens(c.data.val);
  const uint64_t eval = uint64_t(c.log.eval_batches) * c.train.micro_batch_size * c.model.seq_len;
  if (val > 0 && val < eval)
    spdlog::warn(
        "data.val '{}': {} tokens, fewer than one evaluation (log.eval_batches x "
        "micro_batch_size x seq_len = {}): the validation loss counts windows twice",
        c.data.val, val, eval);
}

// parallel.timeout_s as the command line and config give it, read before MPI_Init (which waits
// for every rank and hangs when one dies meanwhile); the default where they cannot be read yet
// (the error is reported collectively later).
double startup_timeout(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    if (!args.help) return load(args, args.overrides).parallel.timeout_s;
  } catch (const std::exception&) {
  }
  return taco::ParallelSection{}.timeout_s;
}

// --help and --print-config-reference need no MPI (and no mpirun): true when the command line
// asked for one of them, answered. A bad command line is left to the collective path, which
// reports it once.
bool answered_without_mpi(int argc, char** argv) {
  try {
    const Args early = parse_args(argc, argv);
    if (early.help) {
      std::fputs(kUsage, stdout);
      std::fputs(taco::config_keys_brief().c_str(), stdout);
      return true;
    }
    if (early.print_reference) {
      std::fputs(taco::config_reference_markdown().c_str(), stdout);
      return true;
    }
  } catch (const std::exception&) {
  }
  return false;
}

// MPI_Init, watched: a peer that dies inside it leaves the others waiting there, so the
// watchdog runs from here on, with at least 10 s, since a loaded machine can take seconds to
// start many ranks.
void start_mpi(int* argc, char*** argv) {
  const auto [launch_rank, launch_size] = taco::launcher_rank_and_size();
  const double timeout = startup_timeout(*argc, *argv);
  taco::start_watchdog(timeout > 0 ? std::max(timeout, 10.0) : 0.0, launch_rank);
  taco::init_fault_point(launch_rank);
  taco::fault_point("startup");
  taco::WatchScope watch("MPI_Init", taco::Site::startup, launch_rank, launch_size);
  MPI_Init(argc, argv);
}

// The run as every rank has loaded it, before anything is written.
struct Run {
  Args args;
  taco::Config config;
  std::string file_resume;  // checkpoint.resume as the file and its --set give it
  taco::RunContext ctx;
  std::unique_ptr<taco::Trainer> trainer;
};

// Parses and loads the config (collectively: bad input ends every rank with one line).
int load_run(taco::MpiCommunicator& world, int argc, char** argv, int rank, Run& run) {
  return collectively(world, [&] {
    run.args = parse_args(argc, argv);
    std::vector<std::string> overrides = run.args.overrides;
    if (run.args.resume) overrides.push_back("checkpoint.resume=true");
    run.config = load(run.args, overrides);
    run.file_resume = run.args.resume ? load(run.args, run.args.overrides).checkpoint.resume
                                      : run.config.checkpoint.resume;
    taco::start_watchdog(run.config.parallel.timeout_s, rank);
  });
}

// The run folder, the Trainer (every check it makes) and the writable-folder probe, with the log
// lines held in memory; only once all of them pass does rank 0 write config.yaml and put those
// lines into log.txt. Collective, as load_run.
int open_run(taco::MpiCommunicator& world, int rank, int ranks, Run& run) {
  namespace fs = std::filesystem;
  const taco::Config& config = run.config;
  taco::RunContext& ctx = run.ctx;
  return collectively(world, [&] {
    ctx.run_dir = (fs::path(config.run.dir) / config.run.name).string();
    if (rank == 0) {  // an empty folder changes nothing; its files wait for the checks below
      std::error_code ec;
      fs::create_directories(ctx.run_dir, ec);
      if (ec)
        throw taco::UserError(ctx.run_dir + ": cannot create run directory: " + ec.message() +
                              " (set run.dir)");
    }
    {
      taco::WatchScope watch("barrier", taco::Site::startup, -1, world);
      world.barrier(nullptr);
    }
    // Until the checks have passed, the log lines wait in memory (rank 0 writes them below).
    taco::init_logging(rank, config.log.all_ranks);
    auto pending = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000);
    pending->set_pattern(config.log.all_ranks ? "[rank " + std::to_string(rank) + "] %v" : "%v");
    spdlog::default_logger()->sinks().push_back(pending);
    for (const std::string& w : taco::config_warnings(config)) spdlog::warn("{}", w);
    spdlog::info("taco-train: {} ({} rank{})", config.source, ranks, ranks == 1 ? "" : "s");
    taco::Config saved = config;
    saved.checkpoint.resume = run.file_resume;
    const std::string saved_yaml = taco::config_to_yaml(saved);
    spdlog::info("effective config (saved to {}/config.yaml):\n{}", ctx.run_dir, saved_yaml);
    if (config.checkpoint.keep > 0) {
      const std::string dir =
          config.checkpoint.dir.empty() ? ctx.run_dir + "/ckpt" : config.checkpoint.dir;
      taco::check_checkpoint_dir_writable(dir, MPI_COMM_WORLD);
    }
    run.trainer = std::make_unique<taco::Trainer>(config, ctx);
    spdlog::info("{}", run.trainer->describe());
    const std::string config_path = ctx.run_dir + "/config.yaml";
    if (rank == 0) {
      warn_small_data(config);
      warn_schedule_change(config, *run.trainer, config_path);
      std::ofstream out(config_path + ".part");
      out << saved_yaml;
      out.close();
      std::error_code ec;
      if (!out || (fs::rename(config_path + ".part", config_path, ec), ec))
        throw taco::UserError(config_path + ": cannot write the run's config (" +
                              (ec ? ec.message() : std::string("write failed")) +
                              "); check run.dir's free space and permissions");
      std::ofstream log(ctx.run_dir + "/log.txt", std::ios::app);
      for (const std::string& line : pending->last_formatted()) log << line;
    }
    taco::init_logging(rank, config.log.all_ranks, rank == 0 ? ctx.run_dir + "/log.txt" : "");
  });
}

// Trains, and returns the process's exit code: 0, 128 + the signal that stopped it (after its
// checkpoint), or the error's code. A collective error leaves in order on every rank (one line);
// any other aborts the job.
int train(Run& run, int rank) {
  taco::TrainHistory history;
  try {
    history = run.trainer->run();
  } catch (const taco::CollectiveError& e) {
    // Every rank stopped at the same point: one line (on the terminal and in log.txt), and every
    // rank leaves in order, with no MPI_Abort banner.
    if (rank == 0) {
      std::fprintf(stderr, "taco-train: error: %s\n", e.what());
      std::fflush(stderr);
      std::ofstream(run.ctx.run_dir + "/log.txt", std::ios::app) << "error: " << e.what() << "\n";
    }
    finalize();
    return e.exit_code();
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
    finalize();
    return 128 + sig;
  }
  if (history.start_step >= run.config.train.steps)
    spdlog::info("the checkpoint is at step {} of train.steps {}: nothing left to train",
                 history.start_step, run.config.train.steps);
  spdlog::info("done: outputs in {}/", run.ctx.run_dir);
  finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (answered_without_mpi(argc, argv)) return 0;
  start_mpi(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  taco::set_error_rank(rank);
  taco::init_logging(rank, false);
  // Start-up's agreements go through the communicator door (parallel/host_values.h); making it
  // is collective, so it is watched as MPI_Init is.
  std::unique_ptr<taco::MpiCommunicator> world;
  {
    taco::WatchScope watch("comm_dup", taco::Site::startup, -1, MPI_COMM_WORLD, "world");
    world = std::make_unique<taco::MpiCommunicator>(MPI_COMM_WORLD, "world");
  }
  Run run;
  run.ctx.world = MPI_COMM_WORLD;
  run.ctx.local_rank = local_rank_from_env();
  taco::install_stop_signal_handlers();
  // mpirun stops reading the ranks' output once it is told to stop (SIGINT/SIGTERM): a log line
  // written then must fail (EPIPE), not kill the rank before it has saved its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  taco::init_fault_point(rank);

  int rc = load_run(*world, argc, argv, rank, run);
  if (rc == 0) rc = open_run(*world, rank, ranks, run);
  if (rc != 0) {
    finalize();
    return rc;
  }
  return train(run, rank);
}
