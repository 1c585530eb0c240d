// The trainer's state, shared by its parts: trainer_setup.cpp builds it (the constructor's steps,
// resume), trainer.cpp runs the steps (graph_step.cpp is the step as a CUDA graph) and
// trainer_log.cpp accounts for them and logs. Private to engine/train.
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "compression/policy.h"
#include "engine/data/shards.h"
#include "engine/runtime/arena.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_model.h"
#include "engine/train/codec_auto_log.h"
#include "engine/train/graph_step.h"
#include "engine/train/metrics.h"
#include "engine/train/optimizer.h"
#include "engine/train/schedule.h"
#include "engine/train/site_traffic.h"
#include "engine/train/step_log.h"
#include "kernels/check.h"
#include "kernels/gradnorm.h"
#include "model/gpt.h"
#include "model/ops.h"
#include "model/param_layout.h"
#include "parallel/compressed_site_comm.h"
#include "parallel/grad_sync.h"
#include "parallel/host_values.h"
#include "parallel/nccl_communicator.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"
#include "parallel/site_comm.h"
#include "parallel/staged_communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero_shard.h"

namespace taco {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What one optimizer step produced: loss, norm and rate as every rank holds them, and this
// rank's per-site communication.
struct StepOutcome {
  double loss = 0, norm = 0, lr = 0;
  bool logged = false;  // this step prints a log line
  SiteStatsTable sites;
};

// Throughput, loss and communication, reported over each logging interval.
struct RunProgress {
  Clock::time_point start = Clock::now();
  double flops_per_token = 0;
  StepClock step_clock;
  LogInterval interval;
  TrafficByLayer traffic;  // this rank's traffic over the whole run, per site and layer
};

// The gradient ranges of this rank that the global norm counts, each logical parameter once
// (trainer.cpp).
std::vector<Tensor> counted_grad_runs(const Gpt& model, const GridCoord& coord,
                                      bool last_stage_copy_of_wte, size_t begin, size_t end);

struct Trainer::State {
  Config cfg;
  RunContext ctx;
  DeviceInfo device;
  // The stream the ops queue on where the step is a CUDA graph (the legacy default stream cannot
  // be captured); unopened otherwise. Before the model: it goes after everything queued on it.
  ops::ComputeStream compute_stream;
  DType dtype = DType::f32;
  GptDims dims;
  std::unique_ptr<ProcessGrid> grid;
  // On a GPU: the device-buffer communicators of the groups (NCCL or MPI with host staging).
  std::vector<std::unique_ptr<Communicator>> device_comms;
  std::unique_ptr<CompressionPolicy> policy;
  std::unique_ptr<SiteCalibration> calibration;  // while some site has group: auto
  std::unique_ptr<CompressedSiteComm> tp_comm, pp_comm, dp_comm, embed_comm;
  std::unique_ptr<SiteComm> mp_comm, world_comm;
  std::unique_ptr<TensorParallel> tp;
  std::unique_ptr<ParamLayout> layout;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Gpt> model;
  std::unique_ptr<AdamW> optimizer;
  // The step's gradient reductions (DP, ZeRO-1, SP, tied embedding) and the norm's.
  std::unique_ptr<GradSync> grad_sync;
  std::vector<PartialGrad> sp_grads;  // the tp partial sums under sequence parallelism
  Tensor tied_grad;                   // wte's gradient where the embedding group sums it
  std::unique_ptr<TokenShards> train_data, val_data;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<Checkpointer> checkpointer;  // none without a run directory
  int start_step = 0;
  std::map<std::string, std::string> resumed_header;  // of this rank's file resumed from
  int micro_steps = 1;
  int64_t tokens_per_step = 0;
  double peak_flops = 0;  // bf16 peak of every GPU the run uses together (0: CPU, unknown)
  std::vector<int32_t> inputs, targets;
  // The step as a CUDA graph (train.cuda_graph: auto on one GPU rank), else null and the reason.
  std::unique_ptr<GraphStep> graph_step;
  std::string eager_reason;
  bool graph_failure_reported = false;

  bool first_stage() const { return grid->is_first_stage(); }
  bool last_stage() const { return grid->is_last_stage(); }
  std::vector<CompressedSiteComm*> comms() const {
    return {tp_comm.get(), pp_comm.get(), dp_comm.get(), embed_comm.get()};
  }

  // The constructor's parts, in the order it runs them.
  void make_grid();
  void make_policy();
  void choose_device();
  void plan_batches();
  void make_comms();
  void build_model();
  void build_buffers();
  void prepare_pipeline_codecs();
  void open_checkpoints();
  void resume(const std::string& dir);
  void reset_metrics_file();

  // run()'s parts.
  double evaluate();
  PipelineStage train_stage(const int& step);
  StepOutcome train_step(int step, const PipelineStage& stage, TrainHistory& history);
  StepOutcome graph_train_step(int step, StepOutcome out, TrainHistory& history);
  void apply_update(int step, const StepOutcome& out, TrainHistory& history);
  void record_step(int step, StepOutcome& out, RunProgress& progress, TrainHistory& history);
  void log_and_evaluate(int step, const StepOutcome& out, RunProgress& progress,
                        TrainHistory& history);
  bool finish_step(int step, RunProgress& progress, TrainHistory& history);
  void save(int done, TrainHistory& history);
  void print_run_traffic(const RunProgress& progress, const TrainHistory& history);
};

}  // namespace taco
