// The trainer's accounting and logging (trainer.cpp runs the steps, trainer_setup.cpp builds the
// state): each step's time, loss and communication into the interval and the history, the log line
// and the validation loss when due, and the end-of-run traffic table.
#include <spdlog/spdlog.h>

#include "engine/train/trainer.h"
#include "engine/train/trainer_state.h"

namespace taco {

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
