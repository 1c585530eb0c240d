// A YAML experiment file as typed structs (docs/design.md §9). Field names are the YAML keys.
// load_config_*() validate everything before any work starts; a bad file throws taco::UserError
// with one line "FILE:LINE: KEY: what is wrong; expected WHAT" (exit code 2), where a value that
// came from an override is located as "FILE: --set KEY" instead of a line.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compression/spec.h"  // the compression section, site names, layer ranges

namespace taco {

struct RunSection {
  std::string name = "tiny-cpu";
  std::string dir = "runs";  // outputs go to <dir>/<name>/
};

struct ModelSection {
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  int seq_len = 128;
  int vocab_size = 256;
};

struct ParallelSection {
  int tp = 1;
  int pp = 1;
  int dp = 1;
  bool sequence_parallel = false;
  int microbatches = 1;
  int zero = 0;                  // 0 or 1 (ZeRO-1: sharded optimizer state)
  std::string backend = "auto";  // auto | nccl | mpi
  // Host-staged MPI (backend mpi on device buffers): the path of bf16/fp32 sums. auto: the
  // faster of native and two_shot, measured per size class at its first call; native: MPI's
  // collective on the staged copies (summed on the host CPU); two_shot: all-to-all, the sum on
  // the GPU, all-gather (parallel/staged_communicator.h). NCCL ignores it.
  std::string staged_reduce = "auto";  // auto | native | two_shot
  // Host-staged MPI: bytes per staging pipeline piece (summed over a call's chunks). Piece j + 1
  // goes down to the host while MPI moves piece j; smaller pieces overlap more and pay more per-
  // piece latency (parallel/staged_plan.h).
  int64_t stage_piece_bytes = int64_t(4) << 20;
  // Seconds one blocking communication call may take before the watchdog ends the rank (a peer
  // died or hangs; parallel/watchdog.h); 0 turns the watchdog off. 600 as NCCL's default.
  double timeout_s = 600;
};

struct TrainSection {
  int steps = 240;
  int micro_batch_size = 8;
  int64_t global_batch_tokens = 4096;
  double lr = 3e-3;
  double min_lr_frac = 0.1;
  int warmup_steps = 10;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  std::string precision = "auto";  // auto | fp32 | bf16
  std::string device = "auto";     // auto | cpu | cuda
  uint64_t seed = 42;
  // A step whose loss or gradient norm is NaN/Inf is never applied. stop: the run ends there
  // with one line (the last checkpoint stays the newest); skip: the step is skipped with a
  // warning and training goes on, as Megatron and llm.c do.
  std::string nonfinite = "stop";  // stop | skip
  // auto: the step as a CUDA graph where the run allows it (engine/train/graph_step.h); off:
  // kernels launched one by one (for debugging; the same bits).
  std::string cuda_graph = "auto";  // auto | off
};

struct DataSection {
  std::string train = "data/fortunes/train_*.bin";
  std::string val = "data/fortunes/val_*.bin";
};

struct CheckpointSection {
  std::string dir;  // "" = <run dir>/ckpt
  int every = 0;    // 0 = only on SIGINT/SIGTERM and at the end
  int keep = 3;     // newest complete checkpoints kept; 0 = write none (benchmark runs)
  std::string resume = "false";  // false | true | auto
};

struct LogSection {
  int every = 10;
  int eval_every = 50;
  int eval_batches = 8;
  bool all_ranks = false;
};

struct Config {
  RunSection run;
  ModelSection model;
  ParallelSection parallel;
  TrainSection train;
  DataSection data;
  CompressionSection compression;
  CheckpointSection checkpoint;
  LogSection log;

  std::string source;  // file the config came from, for messages
};

// Loads, overrides (each "key.path=value", applied in order as if written in the file) and
// validates. `source_name` names the file in messages.
Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});
Config load_config_file(const std::string& path, const std::vector<std::string>& overrides = {});

// Values that are valid but probably not what was meant (train.warmup_steps beyond train.steps),
// one line each naming the key; taco-train prints them as warnings.
std::vector<std::string> config_warnings(const Config& config);

// The effective config as YAML (every key, defaults included): printed at start, saved in the
// run directory, and loadable again by load_config_text.
std::string config_to_yaml(const Config& config);

}  // namespace taco
