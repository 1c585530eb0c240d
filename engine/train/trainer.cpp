#include "engine/train/trainer.h"

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

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
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

}  // namespace

struct Trainer::State {
  Config cfg;
  RunContext ctx;
  DeviceInfo device;
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
  void open_checkpoints();
  void resume(const std::string& dir);
  void reset_metrics_file();

  // run()'s parts.
  double evaluate();
  PipelineStage train_stage(const int& step);
  StepOutcome train_step(int step, const PipelineStage& stage, TrainHistory& history);
  void apply_update(int step, const StepOutcome& out, TrainHistory& history);
  void record_step(int step, StepOutcome& out, RunProgress& progress, TrainHistory& history);
  void log_and_evaluate(int step, const StepOutcome& out, RunProgress& progress,
                        TrainHistory& history);
  bool finish_step(int step, RunProgress& progress, TrainHistory& history);
  void save(int done, TrainHistory& history);
  void print_run_traffic(const RunProgress& progress, const TrainHistory& history);
};

namespace {

DType choose_dtype(const std::string& precision, DeviceKind device, const std::string& source) {
  if (precision == "fp32") {
    if (device == DeviceKind::cuda)
      throw UserError(source +
                      ": train.precision: fp32 training runs on the CPU only; use bf16 "
                      "or auto on a GPU (or train.device: cpu)");
    return DType::f32;
  }
  if (precision == "bf16") {
    if (device == DeviceKind::cpu)
      throw UserError(source +
                      ": train.precision: bf16 needs a GPU; the CPU reference trains in "
                      "fp32 (use auto or fp32)");
    return DType::bf16;
  }
  return device == DeviceKind::cuda ? DType::bf16 : DType::f32;
}

// Which path each group's messages take, so no run falls back to a slower one unseen: the
// backend that moves them, and how compressed and uncompressed sites use it.
std::string communication_paths(const std::vector<std::pair<std::string, int>>& groups, bool on_gpu,
                                bool nccl, const ParallelSection& par) {
  std::string out = "communication:";
  bool any = false;
  for (const auto& [name, size] : groups) {
    if (size <= 1) continue;
    any = true;
    out += " " + name + " (" + std::to_string(size) + " ranks)";
  }
  if (!any) return out + " none (one rank)";
  if (!on_gpu)
    return out +
           " over MPI in host memory; compressed sites: CPU codecs, two-shot; uncompressed: "
           "MPI's native collectives";
  if (nccl)
    return out +
           " over NCCL; compressed sites: device codecs, two-shot, pipelined on a communication "
           "stream; uncompressed: NCCL's native collectives";
  return out + " over MPI staged through pinned host memory, pipelined in pieces of " +
         std::to_string(par.stage_piece_bytes) +
         " bytes (ranks share a GPU, or backend: mpi); compressed sites: device codecs, "
         "two-shot (compression.chunks: auto = the whole message per call, whose transfer the "
         "staging pipelines); uncompressed "
         "sums: MPI's native collective or the two-shot shape with GPU sums "
         "(parallel.staged_reduce: " +
         par.staged_reduce + "; auto prints each measured choice)";
}

// The one line a run stops with at a non-finite step: what was seen, that nothing was applied or
// saved, which checkpoint is the newest, and what to do.
std::string nonfinite_message(int rank, int step, double loss, double norm,
                              const TrainHistory& history) {
  const std::string newest = history.checkpoint.empty()
                                 ? std::string("no checkpoint was written by this run")
                                 : "the newest checkpoint is still " + history.checkpoint;
  return "rank " + std::to_string(rank) + ": step " + std::to_string(step) + ": loss " +
         fmt::format("{}", loss) + ", grad norm " + fmt::format("{}", norm) +
         ": non-finite; the update was not applied and nothing was saved (" + newest +
         "); lower train.lr or check the data, or set train.nonfinite: skip to skip such steps";
}

// The per-token losses the model summed since the last read, added over the world with each
// micro-batch counted once: by the rank that `counts` (the last stage's tp rank 0; its tp peers
// hold copies, other stages nothing). Every rank reads its model, so all start the next sum at 0.
double world_loss_sum(Gpt& model, bool counts, Communicator& world) {
  const double mine = model.take_loss_sum();
  return sum_over(world, counts ? mine : 0.0, Site::loss_sum);
}

// Keeps the records of metrics.jsonl up to step `last` (those after it belong to training that
// the resumed checkpoint does not hold).
void trim_metrics(const std::string& path, int last) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"step\": ");
    if (at != std::string::npos && std::atoll(line.c_str() + at + 8) > last) continue;
    kept += line + "\n";
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  out << kept;
}

// Every rank's share of the squared gradient norm over the elements [begin, end) it holds
// reduced gradients for, counting each logical parameter once: tp-replicated tensors only on tp
// rank 0, the tied embedding's last-stage copy not at all.
double local_grad_sumsq(const Gpt& model, const GridCoord& coord, bool last_stage_copy_of_wte,
                        size_t begin, size_t end) {
  // Contiguous runs of counted parameters, summed with one host synchronization.
  std::vector<Tensor> runs;
  size_t run_lo = 0, run_hi = 0;
  auto flush = [&] {
    if (run_lo < run_hi) runs.push_back(model.grads().slice(run_lo, run_hi - run_lo));
    run_lo = run_hi = 0;
  };
  for (const ParamInfo& p : model.layout().params()) {
    if (p.shard == Shard::replicated && coord.tp != 0) continue;
    if (p.name == "wte" && last_stage_copy_of_wte) continue;
    const size_t lo = std::max(p.offset, begin), hi = std::min(p.offset + p.numel(), end);
    if (lo >= hi) continue;
    if (lo != run_hi) flush();
    if (run_lo == run_hi) run_lo = lo;
    run_hi = hi;
  }
  flush();
  return ops::sum_of_squares(runs);
}

// group: auto: one step of calibration ends; on the last one, world rank 0 prints the agreed
// choices and saves them to <run dir>/calibration.json.
void end_calibration_step(SiteCalibration& calibration, ProcessGrid& grid,
                          const std::string& run_dir) {
  const std::vector<CalibrationChoice> choices = calibration.end_step(grid.world());
  if (choices.empty() || grid.world_rank() != 0) return;
  std::string json = "[";
  for (const CalibrationChoice& c : choices) {
    spdlog::info("{}", c.line());
    if (json.size() > 1) json += ",\n";
    json += c.to_json();
  }
  if (run_dir.empty()) return;
  const std::string path = run_dir + "/calibration.json";
  std::ofstream out(path);
  out << json << "]\n";
  if (!out) throw UserError(path + ": cannot write the calibration record");
}

}  // namespace

Trainer::Trainer(const Config& config, const RunContext& ctx) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = config;
  s.ctx = ctx;
  s.make_grid();
  s.make_policy();
  s.choose_device();
  s.plan_batches();
  s.make_comms();
  s.build_model();
  s.build_buffers();
  s.open_checkpoints();
}

void Trainer::State::make_grid() {
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  try {
    GridModelSizes sizes{m.n_head,     m.d_model, m.n_layer,
                         m.vocab_size, m.seq_len, par.sequence_parallel};
    grid = std::make_unique<ProcessGrid>(ctx.world, GridShape{par.tp, par.pp, par.dp}, sizes);
  } catch (const UserError& e) {
    throw UserError(cfg.source + ": parallel: " + e.what());
  }
}

// Compression: which codec each (layer, site) gets; every group's door asks it.
void Trainer::State::make_policy() {
  policy = std::make_unique<CompressionPolicy>(cfg.compression, cfg.model.n_layer,
                                               cfg.model.d_model, cfg.source);
  if (grid->world_rank() == 0) {
    std::string table = policy->table();
    if (!table.empty() && table.back() == '\n') table.pop_back();
    spdlog::info("{}", table);
  }
  if (!policy->sites_to_calibrate().empty())
    calibration = std::make_unique<SiteCalibration>(*policy);
}

void Trainer::State::choose_device() {
  const bool want_gpu = cfg.train.device != "cpu";
  device = select_device(want_gpu, ctx.local_rank);
  if (cfg.train.device == "cuda" && device.kind != DeviceKind::cuda) {
    throw UserError(cfg.source + ": train.device: cuda requested but no CUDA device is " +
                    "available (use auto or cpu)");
  }
  dtype = choose_dtype(cfg.train.precision, device.kind, cfg.source);
  if (cfg.parallel.backend == "nccl" && device.kind != DeviceKind::cuda) {
    throw UserError(cfg.source +
                    ": parallel.backend: nccl moves device memory, but this run trains on the "
                    "CPU (" +
                    (cfg.train.device == "cpu" ? std::string("train.device: cpu")
                                               : std::string("no CUDA device here")) +
                    "); use backend: mpi or auto");
  }
  if (device.kind == DeviceKind::cuda && device.bf16_peak_tflops > 0)
    peak_flops = device.bf16_peak_tflops * 1e12 * gpus_in_use(grid->world(), device.index);
}

// Micro-batches per step, and the data they are drawn from.
void Trainer::State::plan_batches() {
  const auto& par = cfg.parallel;
  const int B = cfg.train.micro_batch_size, T = cfg.model.seq_len;
  const int64_t tokens_per_micro = int64_t(B) * T * par.dp;
  micro_steps = int(cfg.train.global_batch_tokens / tokens_per_micro);
  tokens_per_step = cfg.train.global_batch_tokens;
  if (par.microbatches > 1 && par.microbatches != micro_steps) {
    throw UserError(cfg.source + ": parallel.microbatches: " + std::to_string(par.microbatches) +
                    " != global_batch_tokens / " +
                    "(micro_batch_size*seq_len*dp) = " + std::to_string(micro_steps) +
                    "; expected them equal (or microbatches: 1 to derive it)");
  }
  train_data = std::make_unique<TokenShards>(cfg.data.train, cfg.model.vocab_size, T + 1);
  if (!cfg.data.val.empty())
    val_data = std::make_unique<TokenShards>(cfg.data.val, cfg.model.vocab_size, T + 1);
}

// Communication: one site-accounted door per group. On a GPU the groups move device buffers:
// through NCCL where every rank has its own GPU, else through MPI with host staging
// (parallel.backend: auto | nccl | mpi).
void Trainer::State::make_comms() {
  const auto& par = cfg.parallel;
  const bool on_gpu = device.kind == DeviceKind::cuda;
  const bool use_nccl = on_gpu && use_nccl_backend(ctx.world, par.backend, cfg.source);
  const StagedReduce staged_reduce = staged_reduce_from_name(par.staged_reduce, cfg.source);
  auto data_comm = [&](MpiCommunicator& group) -> Communicator& {
    if (!on_gpu) return group;
    device_comms.push_back(
        make_device_communicator(group, use_nccl, staged_reduce, size_t(par.stage_piece_bytes)));
    return *device_comms.back();
  };
  auto door = [&](MpiCommunicator& group) {
    return std::make_unique<LayeredSiteComm>(data_comm(group), *policy, calibration.get());
  };
  tp_comm = door(grid->tp());
  pp_comm = door(grid->pp());
  dp_comm = door(grid->dp());
  mp_comm = std::make_unique<SiteComm>(data_comm(grid->mp()));
  if (par.pp > 1 && grid->in_embedding_group()) embed_comm = door(grid->embedding());
  if (grid->world_rank() == 0) {
    spdlog::info("{}", communication_paths({{"tp", par.tp}, {"pp", par.pp}, {"dp", par.dp}}, on_gpu,
                                           use_nccl, par));
  }
  tp = par.tp > 1 || par.sequence_parallel
           ? std::make_unique<TensorParallel>(tp_comm.get(), par.sequence_parallel)
           : std::make_unique<TensorParallel>();
}

// This stage's model, its gradient sync and optimizer (ZeRO-1: over this dp rank's shard).
void Trainer::State::build_model() {
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  const GridCoord coord = grid->coord();
  dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp);
  LayoutSpec spec;
  spec.tp = par.tp;
  spec.tp_rank = coord.tp;
  const int per_stage = m.n_layer / par.pp;
  spec.layer_begin = coord.pp * per_stage;
  spec.layer_end = spec.layer_begin + per_stage;
  spec.has_embedding = first_stage();
  spec.has_head = last_stage();
  layout = std::make_unique<ParamLayout>(dims, spec);
  arena = std::make_unique<Arena>(device.kind);
  const int slots = std::min(par.pp, micro_steps);
  model = std::make_unique<Gpt>(*layout, cfg.train.micro_batch_size, slots, device.kind, dtype,
                                tp.get());
  const bool zero = par.zero == 1;
  const ZeroShard shard =
      zero ? ZeroShard(layout->total(), par.dp, coord.dp) : ZeroShard(layout->total());
  if (zero) model->set_buffer_padding(size_t(shard.ranks()));
  grad_sync = std::make_unique<GradSync>(
      GradSyncGroups{tp_comm.get(), dp_comm.get(), embed_comm.get(), &grid->world(), &grid->mp()},
      shard, zero);
  grad_sync->plan(*arena, dtype);
  AdamWConfig acfg{cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay};
  optimizer = std::make_unique<AdamW>(*layout, dtype, device.kind, acfg, shard);
}

// One allocation for everything planned, the initial weights, the step's host batches.
void Trainer::State::build_buffers() {
  model->plan(*arena);
  optimizer->plan(*arena);
  arena->allocate();
  model->bind(*arena);
  grad_sync->bind(*arena);
  optimizer->bind(*arena, model->params());
  {
    // Host fp32 init; the optimizer places it (CUDA: fp32 master + bf16 parameters).
    std::vector<float> init(layout->total());
    init_params_gpt2(*layout, cfg.train.seed, init.data());
    optimizer->load_initial(init.data());
  }
  for (const ParamInfo* p : model->sequence_parallel_grads())
    sp_grads.push_back({model->grad(*p), p->rows, p->layer});
  if (embed_comm) tied_grad = model->grad("wte");
  const size_t window = size_t(cfg.train.micro_batch_size) * cfg.model.seq_len;
  inputs.resize(window);
  targets.resize(window);
}

// Checkpoints: resume from the newest usable one, or start fresh where none may be lost.
void Trainer::State::open_checkpoints() {
  if (!ctx.run_dir.empty() && cfg.checkpoint.keep > 0) {
    const auto& ck = cfg.checkpoint;
    const std::string dir = ck.dir.empty() ? ctx.run_dir + "/ckpt" : ck.dir;
    checkpointer = std::make_unique<Checkpointer>(dir, ck.keep, ctx.world);
    if (ck.resume != "false") {
      resume(dir);
    } else {
      const int64_t newest = checkpointer->newest_step();
      if (newest >= 0) {
        throw UserError(dir + " holds checkpoints (newest: step " + std::to_string(newest) +
                        "); pass --resume to continue that run, or choose another run.name or " +
                        "checkpoint.dir to start afresh");
      }
    }
    reset_metrics_file();
  }
  const std::string metrics_path = ctx.run_dir.empty() ? "" : ctx.run_dir + "/metrics.jsonl";
  if (!metrics_path.empty() && grid->world_rank() == 0)
    metrics = std::make_unique<MetricsWriter>(metrics_path);
  else
    metrics = std::make_unique<MetricsWriter>();
}

void Trainer::State::resume(const std::string& dir) {
  const auto& ck = cfg.checkpoint;
  RankCheckpoint loaded;
  const int64_t step = checkpointer->restore(
      checkpoint_layout(cfg, dims, dtype, device.kind, grid->world_size()), &loaded);
  // Complete checkpoints that all failed their checks (warned about above): continuing
  // is impossible and starting over would bury that training (auto) or contradict the
  // refusal to run afresh into a folder that holds checkpoints (true). Nothing is moved.
  const int64_t unreadable = step < 0 ? checkpointer->newest_step() : -1;
  if (unreadable >= 0) {
    throw UserError(cfg.source + ": checkpoint.resume: " + ck.resume +
                    ": every complete checkpoint in " + dir + " (the newest: step " +
                    std::to_string(unreadable) +
                    ") failed its checks (see the lines above); nothing was changed; "
                    "restore them, or move them aside (mv " +
                    dir + " " + dir + ".damaged) to start from step 0");
  }
  if (step < 0 && ck.resume == "true") {
    throw UserError(cfg.source + ": checkpoint.resume: no complete checkpoint in " + dir +
                    "; run without --resume (or resume: auto) to start from step 0");
  }
  if (step >= 0 && calibration) {
    throw UserError(cfg.source +
                    ": checkpoint.resume: resuming a run whose compression has group: auto "
                    "is not supported yet; write the groups chosen in calibration.json into "
                    "the rules, or start afresh in another run.name");
  }
  if (step < 0) return;
  const std::string where = dir + "/" + checkpoint_step_name(step);
  load_section(loaded, "params", model->params(), where);
  load_section(loaded, "adam_m", optimizer->m(), where);
  load_section(loaded, "adam_v", optimizer->v(), where);
  load_section(loaded, "master", optimizer->master(), where);
  start_step = int(step);
  resumed_header = loaded.header;
  spdlog::info("resumed from {} (step {})", where, step);
}

// metrics.jsonl keeps the records of the steps the resumed checkpoint holds (none when fresh).
void Trainer::State::reset_metrics_file() {
  if (grid->world_rank() != 0) return;
  const std::string metrics_path = ctx.run_dir + "/metrics.jsonl";
  std::error_code ec;
  std::filesystem::create_directories(ctx.run_dir, ec);  // taco-train made it; tests may not
  if (start_step > 0)
    trim_metrics(metrics_path, start_step);
  else
    std::remove(metrics_path.c_str());
}

int Trainer::start_step() const { return s_->start_step; }

bool Trainer::resumed_schedule(TrainSection* out) const {
  const auto& h = s_->resumed_header;
  for (const char* key : {"train.steps", "train.lr", "train.warmup_steps", "train.min_lr_frac"})
    if (h.count(key) == 0) return false;
  out->steps = std::stoi(h.at("train.steps"));
  out->lr = std::stod(h.at("train.lr"));
  out->warmup_steps = std::stoi(h.at("train.warmup_steps"));
  out->min_lr_frac = std::stod(h.at("train.min_lr_frac"));
  return true;
}

Trainer::~Trainer() = default;

std::string Trainer::describe() const {
  const State& s = *s_;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "model %s params (L=%d H=%d C=%d T=%d V=%d->%d) | layout %s%s | device %s %s | "
                "micro-batch %d x %d, %d micro-batches x dp %d = %lld tokens/step | train %s "
                "tokens in %zu shard(s) | %s | attention %s",
                human_count(double(s.dims.num_params())).c_str(), s.dims.n_layer, s.dims.n_head,
                s.dims.d_model, s.dims.seq_len, s.dims.vocab_size, s.dims.padded_vocab,
                s.grid->layout_string().c_str(), s.cfg.parallel.sequence_parallel ? " +SP" : "",
                s.device.name.c_str(), dtype_name(s.dtype), s.cfg.train.micro_batch_size,
                s.dims.seq_len, s.micro_steps, s.cfg.parallel.dp, (long long)s.tokens_per_step,
                human_count(double(s.train_data->num_tokens())).c_str(), s.train_data->num_shards(),
                s.arena->summary(4).c_str(), s.model->attention_engine().c_str());
  return buf;
}

// Validation loss over log.eval_batches batches of micro_batch_size windows; batch b runs on the
// dp replica b % dp, so every layout evaluates exactly the same windows.
double Trainer::evaluate() { return s_->evaluate(); }

double Trainer::State::evaluate() {
  if (!val_data) return NAN;
  const int B = cfg.train.micro_batch_size, T = dims.seq_len, dp = cfg.parallel.dp;
  const int batches = cfg.log.eval_batches;
  const GridCoord coord = grid->coord();
  const int mine = batches / dp + (coord.dp < batches % dp ? 1 : 0);
  // Evaluation measures nothing: it runs at forward speed whatever the last step logged.
  for (CompressedSiteComm* c : comms())
    if (c) c->measure_errors(false);
  PipelineStage stage;
  stage.forward = [&](int k, int slot) {
    val_data->eval_batch(k * dp + coord.dp, B, 0, B, T, inputs.data(), targets.data());
    model->set_batch(slot, inputs.data(), targets.data());
    model->forward_stage(slot);
  };
  stage.input = [&](int slot) { return model->stage_input(slot); };
  stage.output = [&](int slot) { return model->stage_output(slot); };
  run_forward_only(pp_comm.get(), mine, stage);
  return world_loss_sum(*model, last_stage() && coord.tp == 0, grid->world()) /
         (double(batches) * B * T);
}

TrainHistory Trainer::run() {
  State& s = *s_;
  TrainHistory history;
  history.start_step = s.start_step;
  history.steps_done = s.start_step;
  RunProgress progress;
  progress.flops_per_token = 6.0 * double(s.dims.num_params()) +
                             6.0 * s.dims.n_layer * double(s.dims.seq_len) * s.dims.d_model;
  int step = 0;
  const PipelineStage stage = s.train_stage(step);  // reads `step` as the loop moves it
  for (step = s.start_step; step < s.cfg.train.steps; ++step) {
    StepOutcome out = s.train_step(step, stage, history);
    s.record_step(step, out, progress, history);
    s.log_and_evaluate(step, out, progress, history);
    if (s.finish_step(step, progress, history)) break;
  }
  s.print_run_traffic(progress, history);
  return history;
}

// Micro-batch m of a step takes global samples [m*B*dp, (m+1)*B*dp); this dp rank takes its B
// of them. The sample index (not the layout) picks the window, so every layout trains on the
// same global batch.
PipelineStage Trainer::State::train_stage(const int& step) {
  const int B = cfg.train.micro_batch_size, T = dims.seq_len, dp = cfg.parallel.dp;
  const int dp_rank = grid->coord().dp;
  const float dloss = float(1.0 / double(tokens_per_step));
  PipelineStage stage;
  stage.forward = [this, &step, B, T, dp, dp_rank, dloss](int micro, int slot) {
    if (first_stage() || last_stage()) {
      train_data->sample_batch(cfg.train.seed, step, 0, (micro * dp + dp_rank) * B, B, T,
                               inputs.data(), targets.data());
      model->set_batch(slot, inputs.data(), targets.data());
    }
    model->forward_stage(slot, dloss);  // the loss is read once, after the update
  };
  stage.backward = [this, dloss](int, int slot) { model->backward_stage(slot, dloss); };
  stage.input = [this](int slot) { return model->stage_input(slot); };
  stage.output = [this](int slot) { return model->stage_output(slot); };
  stage.grad = [this]() { return model->stage_grad(); };
  return stage;
}

// Forward and backward of every micro-batch, the gradient sync, the norm, the loss and the
// update (or its refusal).
StepOutcome Trainer::State::train_step(int step, const PipelineStage& stage,
                                       TrainHistory& history) {
  const auto& tc = cfg.train;
  StepOutcome out;
  out.logged = (step + 1) % cfg.log.every == 0 || step == 0 || step + 1 == tc.steps;
  for (CompressedSiteComm* c : comms()) {
    if (!c) continue;
    c->reset_stats();
    c->measure_errors(out.logged);
  }
  for (auto& c : device_comms) c->reset_stats();
  ops::zero(model->grads());
  run_1f1b(pp_comm.get(), micro_steps, model->slots(), stage);

  grad_sync->reduce(sp_grads, tied_grad, model->grads(), model->grads_padded());
  if (calibration && calibration->active()) end_calibration_step(*calibration, *grid, ctx.run_dir);
  if (policy->any_automatic()) log_codec_auto(comms(), *policy, step, grid->world_rank() == 0);

  const GridCoord coord = grid->coord();
  const ZeroShard& shard = grad_sync->shard();
  out.norm = grad_sync->norm(
      local_grad_sumsq(*model, coord, last_stage() && !first_stage(), shard.begin(), shard.end()));
  out.lr = learning_rate(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_frac);
  out.loss = world_loss_sum(*model, last_stage() && coord.tp == 0, grid->world()) /
             double(tokens_per_step);
  apply_update(step, out, history);
  return out;
}

// Every rank holds the same loss and norm (both summed over the world or the model group), so
// every rank takes the same branch: a non-finite step is never applied.
void Trainer::State::apply_update(int step, const StepOutcome& out, TrainHistory& history) {
  const auto& tc = cfg.train;
  const bool finite = std::isfinite(out.loss) && std::isfinite(out.norm);
  if (!finite && tc.nonfinite == "stop") {
    throw CollectiveError(
        nonfinite_message(grid->world_rank(), step + 1, out.loss, out.norm, history), 1);
  }
  if (finite) {
    optimizer->update(model->params(), model->grads(), out.lr, clip_scale(out.norm, tc.grad_clip),
                      step + 1);
    grad_sync->gather_params(model->params_padded());
  } else {
    history.skipped_steps += 1;
    spdlog::warn("step {}: loss {}, grad norm {}: the update is skipped (train.nonfinite: skip)",
                 step + 1, out.loss, out.norm);
  }
}

// The step's time, loss and communication into the interval and the history.
void Trainer::State::record_step(int step, StepOutcome& out, RunProgress& progress,
                                 TrainHistory& history) {
  StepSample sample;
  sample.seconds = progress.step_clock.end_step();
  sample.loss = out.loss;
  history.train_loss.push_back(out.loss);
  history.grad_norm.push_back(out.norm);
  SiteCommStats comm;
  for (CompressedSiteComm* c : comms()) {
    if (!c) continue;
    comm += c->total();
    out.sites += c->stats();
    if (const auto* layered = dynamic_cast<const LayeredSiteComm*>(c))
      add_traffic(progress.traffic, layered->layer_traffic());
  }
  for (const auto& c : device_comms) sample.staging_seconds += c->stats().total().staging_seconds;
  sample.comm_seconds = comm.seconds;
  sample.codec_seconds = comm.codec_seconds;
  sample.codec_timed = comm.codec_timed_calls > 0;
  sample.comm_bytes = comm.logical_bytes;
  sample.wire_bytes = comm.wire_bytes;
  sample.saved_bytes = comm.saved_bytes;
  progress.interval.add(sample);
  for (Site site : sites_by_name()) {
    const SiteCommStats& st = out.sites[site];
    if (st.nonfinite_groups > 0)
      spdlog::warn(
          "rank {}: step {}: site {}: {} compressed group(s) held NaN/Inf and decoded as NaN",
          grid->world_rank(), step + 1, site_name(site), st.nonfinite_groups);
  }
}

// The interval's log line on logged steps; the validation loss when it is due.
void Trainer::State::log_and_evaluate(int step, const StepOutcome& out, RunProgress& progress,
                                      TrainHistory& history) {
  const auto& tc = cfg.train;
  if (out.logged) {
    const auto t_log = Clock::now();
    const IntervalSummary sum =
        progress.interval.summarize(tokens_per_step, progress.flops_per_token, peak_flops);
    progress.interval.clear();
    log_interval(step + 1, tc.steps, out.lr, out.norm, sum, out.sites, peak_flops > 0,
                 seconds_since(progress.start), dtype_name(dtype), *metrics);
    progress.step_clock.exclude(seconds_since(t_log));
  }
  const bool last = step + 1 == tc.steps;
  if (val_data && ((cfg.log.eval_every > 0 && (step + 1) % cfg.log.eval_every == 0) || last)) {
    const auto t_eval = Clock::now();
    const double val = evaluate();
    history.val_loss.emplace_back(step + 1, val);
    spdlog::info("step {:5d}/{} | val loss {:.4f}", step + 1, tc.steps, val);
    metrics->write(JsonRecord().add("step", (long long)(step + 1)).add("val_loss", val));
    progress.step_clock.exclude(seconds_since(t_eval));
  }
}

// After the step: the caller's hook, the stop signal agreed over every rank, the checkpoint
// when one is due. True when training stops here.
bool Trainer::State::finish_step(int step, RunProgress& progress, TrainHistory& history) {
  const int done = step + 1;
  history.steps_done = done;
  if (ctx.after_step) ctx.after_step(done);
  // A signal on any rank stops every rank after the same step.
  const int agreed = max_over(grid->world(), stop_signal(), Site::stop_signal);
  if (checkpointer) {
    const int every = cfg.checkpoint.every;
    if ((every > 0 && done % every == 0) || agreed != 0 || done == cfg.train.steps) {
      const auto t_save = Clock::now();
      save(done, history);
      progress.step_clock.exclude(seconds_since(t_save));
    }
  }
  if (agreed == 0) return false;
  history.stopped_by_signal = agreed;
  return true;
}

void Trainer::State::save(int done, TrainHistory& history) {
  const auto& tc = cfg.train;
  const auto t0 = Clock::now();
  std::vector<CheckpointPart> sections = {
      host_copy("params", model->params()), host_copy("adam_m", optimizer->m()),
      host_copy("adam_v", optimizer->v()), host_copy("master", optimizer->master())};
  size_t bytes = 0;
  for (const auto& sec : sections) bytes += sec.bytes.size();
  // A checkpoint never holds non-finite parameters or moments (a finite step can still
  // overflow them): refuse, on every rank alike, before anything is written.
  size_t bad = 0;
  for (size_t i = 0; i < sections.size(); ++i)
    bad += count_nonfinite(sections[i], i == 0 ? dtype : DType::f32);
  const double bad_anywhere = sum_over(grid->world(), double(bad), Site::checkpoint);
  if (bad_anywhere > 0) {
    throw CollectiveError(
        "rank " + std::to_string(grid->world_rank()) + ": step " + std::to_string(done) + ": " +
            fmt::format("{:.0f}", bad_anywhere) +
            " parameter or optimizer values are NaN/Inf; no checkpoint was written (" +
            (history.checkpoint.empty() ? std::string("none by this run")
                                        : "the newest is still " + history.checkpoint) +
            "); lower train.lr or check the data",
        1);
  }
  const std::map<std::string, std::string> header = {
      {"seed", std::to_string(tc.seed)},
      {"config", cfg.source},
      {"tokens_per_step", std::to_string(tokens_per_step)},
      // The schedule that produced this state: a resumed run compares its own with it.
      {"train.steps", std::to_string(tc.steps)},
      {"train.lr", fmt::format("{}", tc.lr)},
      {"train.warmup_steps", std::to_string(tc.warmup_steps)},
      {"train.min_lr_frac", fmt::format("{}", tc.min_lr_frac)}};
  history.checkpoint = checkpointer->save(
      done, checkpoint_layout(cfg, dims, dtype, device.kind, grid->world_size()), header, sections);
  spdlog::info("step {:5d}/{} | checkpoint {} ({:.1f} MB on rank 0, {:.2f} s)", done, tc.steps,
               history.checkpoint, bytes / 1e6, seconds_since(t0));
}

// The run's traffic per site and layer range, as a table and one metrics record.
void Trainer::State::print_run_traffic(const RunProgress& progress, const TrainHistory& history) {
  if (progress.traffic.empty() || history.steps_done <= history.start_step) return;
  const int done = history.steps_done - history.start_step;
  spdlog::info("{}", traffic_table(progress.traffic, done, dtype_name(dtype)));
  metrics->write(JsonRecord()
                     .add("step", (long long)history.steps_done)
                     .add_raw("summary", traffic_json(progress.traffic, done, dtype_name(dtype))));
}

}  // namespace taco
