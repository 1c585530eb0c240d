#include "engine/train/step_log.h"

#include <cstdio>

namespace taco {

double StepClock::end_step() {
  const Clock::time_point now = Clock::now();
  const double s = std::chrono::duration<double>(now - mark_).count() - excluded_;
  mark_ = now;
  excluded_ = 0;
  return s > 0 ? s : 0.0;
}

IntervalSummary LogInterval::summarize(int64_t tokens_per_step, double flops_per_token,
                                       double peak_flops) const {
  IntervalSummary r;
  r.steps = int(samples_.size());
  if (r.steps == 0) return r;
  double comm = 0, staging = 0, loss = 0, bytes = 0, wire = 0, saved = 0;
  for (const StepSample& s : samples_) {
    r.seconds += s.seconds;
    r.step_ms.push_back(s.seconds * 1e3);
    loss += s.loss;
    comm += s.comm_seconds;
    staging += s.staging_seconds;
    bytes += double(s.comm_bytes);
    wire += double(s.wire_bytes);
    saved += double(s.saved_bytes);
  }
  const double n = r.steps;
  r.ms_per_step = r.seconds * 1e3 / n;
  r.loss = loss / n;
  if (r.seconds > 0) {
    const double tokens = double(tokens_per_step) * n;
    r.tokens_per_s = tokens / r.seconds;
    r.comm_share = comm / r.seconds;
    if (peak_flops > 0) r.mfu = tokens * flops_per_token / r.seconds / peak_flops;
  }
  r.comm_ms = comm * 1e3 / n;
  r.staging_ms = staging * 1e3 / n;
  r.comm_bytes = bytes / n;
  r.wire_bytes = wire / n;
  r.saved_bytes = saved / n;
  return r;
}

std::string json_array(const std::vector<double>& v) {
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4g", i ? "," : "", v[i]);
    out += buf;
  }
  return out + "]";
}

}  // namespace taco
