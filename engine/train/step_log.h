// What one log line and one metrics.jsonl record report (docs/design.md §7), the way Megatron logs:
// throughput, loss and communication over EVERY step since the last logged one, not the logged
// step alone. A step's time runs from the end of the previous step's work to the end of its
// own; what only happens around logging, evaluation and checkpoints is excluded, so nothing
// that only a logged step does (printing, writing metrics, evaluating) enters the throughput.
// The error measurement of a logged step does (it is inside the step's collectives); it costs a
// few percent of one step on the device path, so at most that over the interval's steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/metrics.h"
#include "parallel/site_comm.h"

namespace taco {

// One optimizer step as the trainer saw it.
struct StepSample {
  double seconds = 0;          // wall time of the step (see above)
  double loss = 0;             // mean over the global batch
  double comm_seconds = 0;     // host time inside the step's collectives, summed over groups
  double staging_seconds = 0;  // of which device<->host staging copies (host-staged backend)
  // Codec time (compressed calls): host time on CPU ranks, device kernel time on GPUs, where it
  // is taken on logged steps only; codec_timed says whether this step took it.
  double codec_seconds = 0;
  bool codec_timed = false;
  int64_t comm_bytes = 0;   // logical bytes of the step's collectives
  int64_t wire_bytes = 0;   // what this rank put on the wire
  int64_t saved_bytes = 0;  // what compression saved against the native collectives
};

// The mean of an interval's steps, and their rates.
struct IntervalSummary {
  int steps = 0;
  double seconds = 0;       // wall time of the interval: the sum of its steps' times
  double ms_per_step = 0;   // seconds / steps
  double loss = 0;          // mean of the steps' losses
  double tokens_per_s = 0;  // tokens of every step / seconds
  double mfu = 0;           // model flops / (seconds * peak of every GPU used); 0 if unknown
  double comm_share = 0;    // comm seconds / seconds
  double comm_ms = 0, staging_ms = 0;  // per step
  double codec_ms = -1;                // per step, over the steps that timed it; -1 if none did
  double comm_bytes = 0, wire_bytes = 0, saved_bytes = 0;  // per step
  std::vector<double> step_ms;                             // each step's own time, in order
};

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  StepClock() : mark_(Clock::now()) {}
  // Time since the last end_step (or construction), less what was excluded meanwhile.
  double end_step();
  // Seconds spent on work that is not training (evaluation, checkpoints, logging) since the
  // last end_step: taken out of the next step's time.
  void exclude(double seconds) { excluded_ += seconds; }

 private:
  Clock::time_point mark_;
  double excluded_ = 0;
};

class LogInterval {
 public:
  void add(const StepSample& s) { samples_.push_back(s); }
  bool empty() const { return samples_.empty(); }
  // `flops_per_token`: model flops of one trained token (6N + 6LTd); `peak_flops`: the bf16 peak
  // of all GPUs the run uses together (0: no MFU, e.g. on CPU ranks).
  IntervalSummary summarize(int64_t tokens_per_step, double flops_per_token,
                            double peak_flops) const;
  void clear() { samples_.clear(); }

 private:
  std::vector<StepSample> samples_;
};

// A list of doubles as a JSON array, "%.4g".
std::string json_array(const std::vector<double>& v);

// 1234567 -> "1.23M" (k, M, B), for counts in log lines.
std::string human_count(double x);

// The log line and the metrics.jsonl record of an interval ending at `step` (docs/design.md §7,
// docs/logs-and-metrics.md): its mean loss, ms/step, tokens/s, MFU (`has_mfu`: GPUs only),
// communication share and bytes per step, the bytes compression saved per step against sending
// the same messages uncompressed in `native` (the run's dtype, "fp32" or "bf16", named on the
// line), and the logged step's traffic and measured error per site (the worst site on the line).
// Every rank prints (spdlog shows rank 0 unless log.all_ranks); only rank 0's writer writes.
// `elapsed_s`: wall time since training started (the ETA is the steps left at the interval's
// pace).
void log_interval(int step, int steps, double lr, double norm, const IntervalSummary& sum,
                  const SiteStatsTable& sites, bool has_mfu, double elapsed_s,
                  const std::string& native, MetricsWriter& metrics);

// The log line itself (log_interval prints it): "step    10/240 | loss 4.1234 | ...".
std::string interval_line(int step, int steps, double lr, double norm, const IntervalSummary& sum,
                          const SiteStatsTable& sites, bool has_mfu, double elapsed_s,
                          const std::string& native);

// 75 -> "1m15s", 3725 -> "1h02m", 9 -> "9s".
std::string human_duration(double seconds);

}  // namespace taco
