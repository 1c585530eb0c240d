#include "engine/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/train/trainer_state.h"

namespace taco {

namespace {

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

// Every rank's share of the squared gradient norm, summed with one host synchronization.
double local_grad_sumsq(const Gpt& model, const GridCoord& coord, bool last_stage_copy_of_wte,
                        size_t begin, size_t end) {
  return ops::sum_of_squares(counted_grad_runs(model, coord, last_stage_copy_of_wte, begin, end));
}

}  // namespace

// The elements [begin, end) this rank holds reduced gradients for, in contiguous runs, counting
// each logical parameter once: tp-replicated tensors only on tp rank 0, the tied embedding's
// last-stage copy not at all.
std::vector<Tensor> counted_grad_runs(const Gpt& model, const GridCoord& coord,
                                      bool last_stage_copy_of_wte, size_t begin, size_t end) {
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
  return runs;
}

namespace {

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
  if (graph_step) return graph_train_step(step, out, history);
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

// The same step as one CUDA graph on a single GPU rank (engine/train/graph_step.h): the update
// is queued with the step and the device skips it when the loss or the norm is not finite, so
// here only the outcome is told, as apply_update tells it.
StepOutcome Trainer::State::graph_train_step(int step, StepOutcome out, TrainHistory& history) {
  const auto& tc = cfg.train;
  const int B = tc.micro_batch_size, T = dims.seq_len;
  out.lr = learning_rate(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_frac);
  const GraphStep::Result r =
      graph_step->run(step, out.lr, [&](int s, int micro, int32_t* in, int32_t* tg) {
        train_data->sample_batch(tc.seed, s, 0, micro * B, B, T, in, tg);
      });
  if (!graph_failure_reported && !graph_step->failure().empty()) {
    spdlog::warn("step {}: the step could not be captured as a CUDA graph ({}); it runs eagerly",
                 step + 1, graph_step->failure());
    graph_failure_reported = true;
  }
  out.loss = r.loss_sum / double(tokens_per_step);
  out.norm = std::sqrt(r.sumsq);
  if (std::isfinite(out.loss) && std::isfinite(out.norm)) return out;
  if (tc.nonfinite == "stop")
    throw CollectiveError(
        nonfinite_message(grid->world_rank(), step + 1, out.loss, out.norm, history), 1);
  history.skipped_steps += 1;
  spdlog::warn("step {}: loss {}, grad norm {}: the update is skipped (train.nonfinite: skip)",
               step + 1, out.loss, out.norm);
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

}  // namespace taco
