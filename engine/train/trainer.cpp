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
#include "parallel/nccl_communicator.h"
#include "parallel/pipeline.h"
#include "parallel/process_grid.h"
#include "parallel/site_comm.h"
#include "parallel/staged_communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/watchdog.h"

namespace taco {

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
  std::unique_ptr<TokenShards> train_data, val_data;
  std::unique_ptr<MetricsWriter> metrics;
  std::unique_ptr<Checkpointer> checkpointer;  // none without a run directory
  int start_step = 0;
  std::map<std::string, std::string> resumed_header;  // of this rank's file resumed from
  // ZeRO-1: this dp rank's range of the (padded) flat buffer and its reduced gradients.
  size_t shard_begin = 0, shard_end = 0, shard_size = 0;
  Tensor grad_shard;
  int micro_steps = 1;
  int64_t tokens_per_step = 0;
  double peak_flops = 0;  // bf16 peak of every GPU the run uses together (0: CPU, unknown)
  std::vector<int32_t> inputs, targets;

  bool first_stage() const { return grid->is_first_stage(); }
  bool last_stage() const { return grid->is_last_stage(); }
  std::vector<CompressedSiteComm*> comms() const {
    return {tp_comm.get(), pp_comm.get(), dp_comm.get(), embed_comm.get()};
  }
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

// A host double summed over a group (loss sums, squared norms), in double.
double sum_over(MPI_Comm comm, double x) {
  double out = 0;
  WatchScope watch("all_reduce", "step sums", -1, comm, "world/model");
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, comm);
  return out;
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

// GPUs the run uses: on each node, the distinct devices its ranks chose (ranks may share one).
int gpus_in_use(MPI_Comm world, int device_index) {
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, local_rank = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_rank(node, &local_rank);
  std::vector<int> devices(size_t(local), -1);
  MPI_Allgather(&device_index, 1, MPI_INT, devices.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  std::sort(devices.begin(), devices.end());
  const int distinct = int(std::unique(devices.begin(), devices.end()) - devices.begin());
  int total = 0;
  const int mine = local_rank == 0 ? distinct : 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, world);
  return total;
}

// The per-token losses the model summed since the last read, added over the world with each
// micro-batch counted once: by the rank that `counts` (the last stage's tp rank 0; its tp peers
// hold copies, other stages nothing). Every rank reads its model, so all start the next sum at 0.
double world_loss_sum(Gpt& model, bool counts, MPI_Comm world) {
  const double mine = model.take_loss_sum();
  return sum_over(world, counts ? mine : 0.0);
}

CheckpointPart host_copy(const std::string& name, const Tensor& t) {
  CheckpointPart s{name, std::vector<uint8_t>(t.bytes())};
  if (!t.empty()) device_copy(s.bytes.data(), t.data, t.bytes(), DeviceKind::cpu, t.device);
  return s;
}

// Values of a host copy of `t` that are NaN or Inf (f32 or bf16; other dtypes hold none).
size_t count_nonfinite(const CheckpointPart& part, DType dtype) {
  size_t bad = 0;
  const size_t n = part.bytes.size() / std::max<size_t>(1, dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    float v = 0;
    if (dtype == DType::f32) {
      std::memcpy(&v, part.bytes.data() + 4 * i, 4);
    } else if (dtype == DType::bf16) {
      bf16 h;
      std::memcpy(&h, part.bytes.data() + 2 * i, 2);
      v = bf16_to_float(h);
    }
    bad += std::isfinite(v) ? 0 : 1;
  }
  return bad;
}

void load_section(const RankCheckpoint& ck, const std::string& name, const Tensor& t,
                  const std::string& where) {
  const CheckpointPart* s = ck.find(name);
  if (!s || s->bytes.size() != t.bytes())
    throw UserError(where + ": section '" + name + "' is missing or has another size (" +
                    std::to_string(s ? s->bytes.size() : 0) + " bytes, expected " +
                    std::to_string(t.bytes()) + ")");
  if (!t.empty()) device_copy(t.data, s->bytes.data(), t.bytes(), t.device, DeviceKind::cpu);
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

}  // namespace

Trainer::Trainer(const Config& config, const RunContext& ctx) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = config;
  s.ctx = ctx;
  const auto& m = config.model;
  const auto& par = config.parallel;

  int world_size = 1;
  MPI_Comm_size(ctx.world, &world_size);
  try {
    GridModelSizes sizes{m.n_head,     m.d_model, m.n_layer,
                         m.vocab_size, m.seq_len, par.sequence_parallel};
    s.grid = std::make_unique<ProcessGrid>(ctx.world, GridShape{par.tp, par.pp, par.dp}, sizes);
  } catch (const UserError& e) {
    throw UserError(config.source + ": parallel: " + e.what());
  }
  const GridCoord coord = s.grid->coord();

  // Compression: which codec each (layer, site) gets; every group's door below asks it.
  s.policy =
      std::make_unique<CompressionPolicy>(config.compression, m.n_layer, m.d_model, config.source);
  if (s.grid->world_rank() == 0) {
    std::string table = s.policy->table();
    if (!table.empty() && table.back() == '\n') table.pop_back();
    spdlog::info("{}", table);
  }
  if (!s.policy->sites_to_calibrate().empty())
    s.calibration = std::make_unique<SiteCalibration>(*s.policy);

  const bool want_gpu = config.train.device != "cpu";
  s.device = select_device(want_gpu, ctx.local_rank);
  if (config.train.device == "cuda" && s.device.kind != DeviceKind::cuda) {
    throw UserError(config.source + ": train.device: cuda requested but no CUDA device is " +
                    "available (use auto or cpu)");
  }
  s.dtype = choose_dtype(config.train.precision, s.device.kind, config.source);
  if (par.backend == "nccl" && s.device.kind != DeviceKind::cuda) {
    throw UserError(config.source +
                    ": parallel.backend: nccl moves device memory, but this run trains on the "
                    "CPU (" +
                    (config.train.device == "cpu" ? std::string("train.device: cpu")
                                                  : std::string("no CUDA device here")) +
                    "); use backend: mpi or auto");
  }
  if (s.device.kind == DeviceKind::cuda && s.device.bf16_peak_tflops > 0)
    s.peak_flops = s.device.bf16_peak_tflops * 1e12 * gpus_in_use(ctx.world, s.device.index);

  const int B = config.train.micro_batch_size, T = m.seq_len;
  const int64_t tokens_per_micro = int64_t(B) * T * par.dp;
  s.micro_steps = int(config.train.global_batch_tokens / tokens_per_micro);
  s.tokens_per_step = config.train.global_batch_tokens;
  if (par.microbatches > 1 && par.microbatches != s.micro_steps) {
    throw UserError(config.source + ": parallel.microbatches: " + std::to_string(par.microbatches) +
                    " != global_batch_tokens / " +
                    "(micro_batch_size*seq_len*dp) = " + std::to_string(s.micro_steps) +
                    "; expected them equal (or microbatches: 1 to derive it)");
  }

  s.train_data = std::make_unique<TokenShards>(config.data.train, m.vocab_size, T + 1);
  if (!config.data.val.empty())
    s.val_data = std::make_unique<TokenShards>(config.data.val, m.vocab_size, T + 1);

  // Communication: one site-accounted door per group. On a GPU the groups move device buffers:
  // through NCCL where every rank has its own GPU, else through MPI with host staging
  // (parallel.backend: auto | nccl | mpi).
  const bool on_gpu = s.device.kind == DeviceKind::cuda;
  const bool use_nccl = on_gpu && use_nccl_backend(ctx.world, par.backend, config.source);
  const StagedReduce staged_reduce = staged_reduce_from_name(par.staged_reduce, config.source);
  auto data_comm = [&](MpiCommunicator& group) -> Communicator& {
    if (!on_gpu) return group;
    s.device_comms.push_back(
        make_device_communicator(group, use_nccl, staged_reduce, size_t(par.stage_piece_bytes)));
    return *s.device_comms.back();
  };
  auto door = [&](MpiCommunicator& group) {
    return std::make_unique<LayeredSiteComm>(data_comm(group), *s.policy, s.calibration.get());
  };
  s.tp_comm = door(s.grid->tp());
  s.pp_comm = door(s.grid->pp());
  s.dp_comm = door(s.grid->dp());
  s.mp_comm = std::make_unique<SiteComm>(data_comm(s.grid->mp()));
  if (par.pp > 1 && s.grid->in_embedding_group()) s.embed_comm = door(s.grid->embedding());
  if (s.grid->world_rank() == 0) {
    spdlog::info("{}", communication_paths({{"tp", par.tp}, {"pp", par.pp}, {"dp", par.dp}}, on_gpu,
                                           use_nccl, par));
  }
  s.tp = par.tp > 1 || par.sequence_parallel
             ? std::make_unique<TensorParallel>(s.tp_comm.get(), par.sequence_parallel)
             : std::make_unique<TensorParallel>();

  s.dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp);
  LayoutSpec spec;
  spec.tp = par.tp;
  spec.tp_rank = coord.tp;
  const int per_stage = m.n_layer / par.pp;
  spec.layer_begin = coord.pp * per_stage;
  spec.layer_end = spec.layer_begin + per_stage;
  spec.has_embedding = s.first_stage();
  spec.has_head = s.last_stage();
  s.layout = std::make_unique<ParamLayout>(s.dims, spec);
  s.arena = std::make_unique<Arena>(s.device.kind);
  const int slots = std::min(par.pp, s.micro_steps);
  s.model = std::make_unique<Gpt>(*s.layout, B, slots, s.device.kind, s.dtype, s.tp.get());
  AdamWConfig acfg{config.train.beta1, config.train.beta2, config.train.eps,
                   config.train.weight_decay};
  s.shard_end = s.layout->total();
  size_t grad_shard_handle = 0;
  if (par.zero == 1) {
    s.model->set_buffer_padding(par.dp);
    s.shard_size = (s.layout->total() + par.dp - 1) / par.dp;
    s.shard_begin = std::min(s.layout->total(), coord.dp * s.shard_size);
    s.shard_end = std::min(s.layout->total(), s.shard_begin + s.shard_size);
    grad_shard_handle = s.arena->reserve("grad_shard", s.dtype, s.shard_size);
  }
  s.optimizer =
      std::make_unique<AdamW>(*s.layout, s.dtype, s.device.kind, acfg, s.shard_begin, s.shard_end);
  s.model->plan(*s.arena);
  s.optimizer->plan(*s.arena);
  s.arena->allocate();
  s.model->bind(*s.arena);
  if (par.zero == 1) s.grad_shard = s.arena->get(grad_shard_handle);
  s.optimizer->bind(*s.arena, s.model->params());
  {
    // Host fp32 init; the optimizer places it (CUDA: fp32 master + bf16 parameters).
    std::vector<float> init(s.layout->total());
    init_params_gpt2(*s.layout, config.train.seed, init.data());
    s.optimizer->load_initial(init.data());
  }

  s.inputs.resize(size_t(B) * T);
  s.targets.resize(size_t(B) * T);

  // Checkpoints: resume from the newest usable one, or start fresh where none may be lost.
  const std::string metrics_path = ctx.run_dir.empty() ? "" : ctx.run_dir + "/metrics.jsonl";
  if (!ctx.run_dir.empty() && config.checkpoint.keep > 0) {
    const auto& ck = config.checkpoint;
    const std::string dir = ck.dir.empty() ? ctx.run_dir + "/ckpt" : ck.dir;
    s.checkpointer = std::make_unique<Checkpointer>(dir, ck.keep, ctx.world);
    const std::string layout =
        checkpoint_layout(config, s.dims, s.dtype, s.device.kind, s.grid->world_size());
    if (ck.resume != "false") {
      RankCheckpoint loaded;
      const int64_t step = s.checkpointer->restore(layout, &loaded);
      // Complete checkpoints that all failed their checks (warned about above): continuing
      // is impossible and starting over would bury that training (auto) or contradict the
      // refusal to run afresh into a folder that holds checkpoints (true). Nothing is moved.
      const int64_t unreadable = step < 0 ? s.checkpointer->newest_step() : -1;
      if (unreadable >= 0) {
        throw UserError(config.source + ": checkpoint.resume: " + ck.resume +
                        ": every complete checkpoint in " + dir + " (the newest: step " +
                        std::to_string(unreadable) +
                        ") failed its checks (see the lines above); nothing was changed; "
                        "restore them, or move them aside (mv " +
                        dir + " " + dir + ".damaged) to start from step 0");
      }
      if (step < 0 && ck.resume == "true") {
        throw UserError(config.source + ": checkpoint.resume: no complete checkpoint in " + dir +
                        "; run without --resume (or resume: auto) to start from step 0");
      }
      if (step >= 0 && s.calibration) {
        throw UserError(config.source +
                        ": checkpoint.resume: resuming a run whose compression has group: auto "
                        "is not supported yet; write the groups chosen in calibration.json into "
                        "the rules, or start afresh in another run.name");
      }
      if (step >= 0) {
        const std::string where = dir + "/" + checkpoint_step_name(step);
        load_section(loaded, "params", s.model->params(), where);
        load_section(loaded, "adam_m", s.optimizer->m(), where);
        load_section(loaded, "adam_v", s.optimizer->v(), where);
        load_section(loaded, "master", s.optimizer->master(), where);
        s.start_step = int(step);
        s.resumed_header = loaded.header;
        spdlog::info("resumed from {} (step {})", where, step);
      }
    } else {
      const int64_t newest = s.checkpointer->newest_step();
      if (newest >= 0) {
        throw UserError(dir + " holds checkpoints (newest: step " + std::to_string(newest) +
                        "); pass --resume to continue that run, or choose another run.name or " +
                        "checkpoint.dir to start afresh");
      }
    }
    if (s.grid->world_rank() == 0) {
      std::error_code ec;
      std::filesystem::create_directories(ctx.run_dir, ec);  // taco-train made it; tests may not
      if (s.start_step > 0)
        trim_metrics(metrics_path, s.start_step);
      else
        std::remove(metrics_path.c_str());
    }
  }
  if (!metrics_path.empty() && s.grid->world_rank() == 0)
    s.metrics = std::make_unique<MetricsWriter>(metrics_path);
  else
    s.metrics = std::make_unique<MetricsWriter>();
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

namespace {

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

// Validation loss over log.eval_batches batches of micro_batch_size windows; batch b runs on the
// dp replica b % dp, so every layout evaluates exactly the same windows.
double Trainer::evaluate() {
  State& s = *s_;
  if (!s.val_data) return NAN;
  const int B = s.cfg.train.micro_batch_size, T = s.dims.seq_len, dp = s.cfg.parallel.dp;
  const int batches = s.cfg.log.eval_batches;
  const GridCoord coord = s.grid->coord();
  const int mine = batches / dp + (coord.dp < batches % dp ? 1 : 0);
  // Evaluation measures nothing: it runs at forward speed whatever the last step logged.
  for (CompressedSiteComm* c : s.comms())
    if (c) c->measure_errors(false);
  PipelineStage stage;
  stage.forward = [&](int k, int slot) {
    s.val_data->eval_batch(k * dp + coord.dp, B, 0, B, T, s.inputs.data(), s.targets.data());
    s.model->set_batch(slot, s.inputs.data(), s.targets.data());
    s.model->forward_stage(slot);
  };
  stage.input = [&](int slot) { return s.model->stage_input(slot); };
  stage.output = [&](int slot) { return s.model->stage_output(slot); };
  run_forward_only(s.pp_comm.get(), mine, stage);
  return world_loss_sum(*s.model, s.last_stage() && coord.tp == 0, s.grid->world().comm()) /
         (double(batches) * B * T);
}

TrainHistory Trainer::run() {
  State& s = *s_;
  const auto& tc = s.cfg.train;
  const int B = tc.micro_batch_size, T = s.dims.seq_len, dp = s.cfg.parallel.dp;
  const GridCoord coord = s.grid->coord();
  const float dloss = float(1.0 / double(s.tokens_per_step));
  TrainHistory history;
  using clock = std::chrono::steady_clock;

  // Micro-batch m of a step takes global samples [m*B*dp, (m+1)*B*dp); this dp rank takes its B
  // of them. The sample index (not the layout) picks the window, so every layout trains on the
  // same global batch.
  PipelineStage stage;
  int step = 0;
  stage.forward = [&](int micro, int slot) {
    if (s.first_stage() || s.last_stage()) {
      s.train_data->sample_batch(tc.seed, step, 0, (micro * dp + coord.dp) * B, B, T,
                                 s.inputs.data(), s.targets.data());
      s.model->set_batch(slot, s.inputs.data(), s.targets.data());
    }
    s.model->forward_stage(slot, dloss);  // the loss is read once, after the update
  };
  stage.backward = [&](int, int slot) { s.model->backward_stage(slot, dloss); };
  stage.input = [&](int slot) { return s.model->stage_input(slot); };
  stage.output = [&](int slot) { return s.model->stage_output(slot); };
  stage.grad = [&]() { return s.model->stage_grad(); };

  history.start_step = s.start_step;
  history.steps_done = s.start_step;
  auto save = [&](int done) {
    const auto t0 = clock::now();
    std::vector<CheckpointPart> sections = {
        host_copy("params", s.model->params()), host_copy("adam_m", s.optimizer->m()),
        host_copy("adam_v", s.optimizer->v()), host_copy("master", s.optimizer->master())};
    size_t bytes = 0;
    for (const auto& sec : sections) bytes += sec.bytes.size();
    // A checkpoint never holds non-finite parameters or moments (a finite step can still
    // overflow them): refuse, on every rank alike, before anything is written.
    size_t bad = 0;
    for (size_t i = 0; i < sections.size(); ++i)
      bad += count_nonfinite(sections[i], i == 0 ? s.dtype : DType::f32);
    const double bad_anywhere = sum_over(s.grid->world().comm(), double(bad));
    if (bad_anywhere > 0) {
      throw CollectiveError(
          "rank " + std::to_string(s.grid->world_rank()) + ": step " + std::to_string(done) + ": " +
              fmt::format("{:.0f}", bad_anywhere) +
              " parameter or optimizer values are NaN/Inf; no checkpoint was written (" +
              (history.checkpoint.empty() ? std::string("none by this run")
                                          : "the newest is still " + history.checkpoint) +
              "); lower train.lr or check the data",
          1);
    }
    const std::map<std::string, std::string> header = {
        {"seed", std::to_string(tc.seed)},
        {"config", s.cfg.source},
        {"tokens_per_step", std::to_string(s.tokens_per_step)},
        // The schedule that produced this state: a resumed run compares its own with it.
        {"train.steps", std::to_string(tc.steps)},
        {"train.lr", fmt::format("{}", tc.lr)},
        {"train.warmup_steps", std::to_string(tc.warmup_steps)},
        {"train.min_lr_frac", fmt::format("{}", tc.min_lr_frac)}};
    history.checkpoint = s.checkpointer->save(
        done, checkpoint_layout(s.cfg, s.dims, s.dtype, s.device.kind, s.grid->world_size()),
        header, sections);
    spdlog::info("step {:5d}/{} | checkpoint {} ({:.1f} MB on rank 0, {:.2f} s)", done, tc.steps,
                 history.checkpoint, bytes / 1e6,
                 std::chrono::duration<double>(clock::now() - t0).count());
  };

  // Throughput, loss and communication are reported over each logging interval.
  const double flops_per_token = 6.0 * double(s.dims.num_params()) +
                                 6.0 * s.dims.n_layer * double(s.dims.seq_len) * s.dims.d_model;
  const auto run_start = clock::now();
  StepClock step_clock;
  LogInterval interval;
  TrafficByLayer run_traffic;  // this rank's traffic over the whole run, per site and layer
  auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  for (step = s.start_step; step < tc.steps; ++step) {
    const bool logged = (step + 1) % s.cfg.log.every == 0 || step == 0 || step + 1 == tc.steps;
    for (CompressedSiteComm* c : s.comms()) {
      if (!c) continue;
      c->reset_stats();
      c->measure_errors(logged);
    }
    for (auto& c : s.device_comms) c->reset_stats();
    ops::zero(s.model->grads());
    run_1f1b(s.pp_comm.get(), s.micro_steps, s.model->slots(), stage);

    // Gradients that are partial sums: LayerNorms and positions under SP (over tp), the tied
    // embedding's two copies (first and last stage), and everything over dp.
    for (const ParamInfo* p : s.model->sequence_parallel_grads())
      s.tp_comm->all_reduce(s.model->grad(*p), p->rows, "sp.grad", p->layer);
    if (s.embed_comm) s.embed_comm->all_reduce(s.model->grad("wte"), 0, "tied.grad", -1);
    const bool zero = s.cfg.parallel.zero == 1;
    if (zero) {
      // ZeRO-1: each dp rank receives the sum of its shard only, and updates only that shard.
      s.dp_comm->reduce_scatter(s.model->grads_padded(), s.grad_shard, dp, "dp.grad", -1);
      ops::copy(s.model->grads().slice(s.shard_begin, s.shard_end - s.shard_begin),
                s.grad_shard.slice(0, s.shard_end - s.shard_begin));
    } else {
      s.dp_comm->all_reduce(s.model->grads(), 0, "dp.grad", -1);
    }
    if (s.calibration && s.calibration->active())
      end_calibration_step(*s.calibration, *s.grid, s.ctx.run_dir);

    const double local = local_grad_sumsq(*s.model, coord, s.last_stage() && !s.first_stage(),
                                          s.shard_begin, s.shard_end);
    // Shards are disjoint over dp under ZeRO-1; otherwise every dp replica holds the same sum.
    const double norm =
        std::sqrt(sum_over(zero ? s.grid->world().comm() : s.grid->mp().comm(), local));
    const double lr = learning_rate(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_frac);
    // Every rank holds the same loss and norm (both summed over the world or the model group),
    // so every rank takes the same branch: a non-finite step is never applied.
    const double loss =
        world_loss_sum(*s.model, s.last_stage() && coord.tp == 0, s.grid->world().comm()) /
        double(s.tokens_per_step);
    const bool finite = std::isfinite(loss) && std::isfinite(norm);
    if (!finite && tc.nonfinite == "stop") {
      throw CollectiveError(nonfinite_message(s.grid->world_rank(), step + 1, loss, norm, history),
                            1);
    }
    if (finite) {
      s.optimizer->update(s.model->params(), s.model->grads(), lr, clip_scale(norm, tc.grad_clip),
                          step + 1);
      if (zero) {
        const Tensor all = s.model->params_padded();
        s.dp_comm->all_gather(all.slice(coord.dp * s.shard_size, s.shard_size), all, dp, "dp.param",
                              -1);
      }
    } else {
      history.skipped_steps += 1;
      spdlog::warn("step {}: loss {}, grad norm {}: the update is skipped (train.nonfinite: skip)",
                   step + 1, loss, norm);
    }
    StepSample sample;
    sample.seconds = step_clock.end_step();
    sample.loss = loss;
    history.train_loss.push_back(loss);
    history.grad_norm.push_back(norm);
    SiteCommStats comm;
    std::map<std::string, SiteCommStats> sites;
    for (CompressedSiteComm* c : s.comms()) {
      if (!c) continue;
      comm += c->total();
      for (const auto& [name, st] : c->stats()) sites[name] += st;
      if (const auto* layered = dynamic_cast<const LayeredSiteComm*>(c))
        add_traffic(run_traffic, layered->layer_traffic());
    }
    for (const auto& c : s.device_comms)
      sample.staging_seconds += c->stats().total().staging_seconds;
    sample.comm_seconds = comm.seconds;
    sample.codec_seconds = comm.codec_seconds;
    sample.codec_timed = comm.codec_timed_calls > 0;
    sample.comm_bytes = comm.logical_bytes;
    sample.wire_bytes = comm.wire_bytes;
    sample.saved_bytes = comm.saved_bytes;
    interval.add(sample);
    for (const auto& [name, st] : sites) {
      if (st.nonfinite_groups > 0)
        spdlog::warn(
            "rank {}: step {}: site {}: {} compressed group(s) held NaN/Inf and decoded as NaN",
            s.grid->world_rank(), step + 1, name, st.nonfinite_groups);
    }
    const bool last = step + 1 == tc.steps;
    if (logged) {
      const auto t_log = clock::now();
      const IntervalSummary sum =
          interval.summarize(s.tokens_per_step, flops_per_token, s.peak_flops);
      interval.clear();
      log_interval(step + 1, tc.steps, lr, norm, sum, sites, s.peak_flops > 0,
                   seconds_since(run_start), dtype_name(s.dtype), *s.metrics);
      step_clock.exclude(seconds_since(t_log));
    }
    if (s.val_data &&
        ((s.cfg.log.eval_every > 0 && (step + 1) % s.cfg.log.eval_every == 0) || last)) {
      const auto t_eval = clock::now();
      const double val = evaluate();
      history.val_loss.emplace_back(step + 1, val);
      spdlog::info("step {:5d}/{} | val loss {:.4f}", step + 1, tc.steps, val);
      s.metrics->write(JsonRecord().add("step", (long long)(step + 1)).add("val_loss", val));
      step_clock.exclude(seconds_since(t_eval));
    }

    const int done = step + 1;
    history.steps_done = done;
    if (s.ctx.after_step) s.ctx.after_step(done);
    // A signal on any rank stops every rank after the same step.
    int signal = stop_signal(), agreed = 0;
    {
      WatchScope watch("all_reduce", "stop signal", -1, s.grid->world().comm(), "world");
      MPI_Allreduce(&signal, &agreed, 1, MPI_INT, MPI_MAX, s.grid->world().comm());
    }
    if (s.checkpointer) {
      const int every = s.cfg.checkpoint.every;
      if ((every > 0 && done % every == 0) || agreed != 0 || done == tc.steps) {
        const auto t_save = clock::now();
        save(done);
        step_clock.exclude(seconds_since(t_save));
      }
    }
    if (agreed != 0) {
      history.stopped_by_signal = agreed;
      break;
    }
  }
  if (!run_traffic.empty() && history.steps_done > history.start_step) {
    const int done = history.steps_done - history.start_step;
    spdlog::info("{}", traffic_table(run_traffic, done, dtype_name(s.dtype)));
    s.metrics->write(JsonRecord()
                         .add("step", (long long)history.steps_done)
                         .add_raw("summary", traffic_json(run_traffic, done, dtype_name(s.dtype))));
  }
  return history;
}

}  // namespace taco
