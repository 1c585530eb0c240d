// Trainer's construction: the process grid, compression policy, device, batches,
// communicators, model, buffers and checkpoints, in the order the constructor runs them, and a
// resume (engine/train/trainer_state.h holds the state; trainer.cpp runs the steps).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>

#include "engine/train/trainer.h"
#include "engine/train/trainer_state.h"

namespace taco {

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
  s.make_grid();
  s.make_policy();
  s.choose_device();
  s.plan_batches();
  s.make_comms();
  s.build_model();
  s.build_buffers();
  s.prepare_pipeline_codecs();
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
  // Before the model exists: every op it queues goes to the stream the graph is captured from.
  eager_reason = GraphStep::eager_reason(cfg, grid->world().size(), device.kind);
  if (eager_reason.empty()) compute_stream.open();
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
  if (compute_stream.get()) {
    const ZeroShard& shard = grad_sync->shard();
    graph_step = std::make_unique<GraphStep>(
        compute_stream.get(), *model, *optimizer,
        counted_grad_runs(*model, grid->coord(), last_stage() && !first_stage(), shard.begin(),
                          shard.end()),
        micro_steps, int(window), float(1.0 / double(tokens_per_step)), cfg.train.grad_clip);
  }
}

// codec: auto on the pipeline's messages is decided here, before the first step, with every
// rank of each pp group in the call: inside a send it could not be agreed
// (parallel/codec_autotune.h). Activations and their gradients have one shape on every stage.
void Trainer::State::prepare_pipeline_codecs() {
  if (cfg.parallel.pp == 1 || !policy->any_automatic()) return;
  const Tensor like = model->stage_output(0);
  for (Site site : {Site::pp_act, Site::pp_grad}) pp_comm->prepare_point_to_point(site, like);
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
  std::snprintf(
      buf, sizeof buf,
      "model %s params (L=%d H=%d C=%d T=%d V=%d->%d) | layout %s%s | device %s %s | "
      "micro-batch %d x %d, %d micro-batches x dp %d = %lld tokens/step | train %s "
      "tokens in %zu shard(s) | %s | attention %s | step %s",
      human_count(double(s.dims.num_params())).c_str(), s.dims.n_layer, s.dims.n_head,
      s.dims.d_model, s.dims.seq_len, s.dims.vocab_size, s.dims.padded_vocab,
      s.grid->layout_string().c_str(), s.cfg.parallel.sequence_parallel ? " +SP" : "",
      s.device.name.c_str(), dtype_name(s.dtype), s.cfg.train.micro_batch_size, s.dims.seq_len,
      s.micro_steps, s.cfg.parallel.dp, (long long)s.tokens_per_step,
      human_count(double(s.train_data->num_tokens())).c_str(), s.train_data->num_shards(),
      s.arena->summary(4).c_str(), s.model->attention_engine().c_str(),
      s.graph_step ? s.graph_step->describe().c_str() : ("eager (" + s.eager_reason + ")").c_str());
  return buf;
}

}  // namespace taco
