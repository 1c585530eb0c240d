#include "engine/train/step_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
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
  double comm = 0, staging = 0, loss = 0, bytes = 0, wire = 0, saved = 0, codec = 0;
  int codec_steps = 0;
  for (const StepSample& s : samples_) {
    r.seconds += s.seconds;
    r.step_ms.push_back(s.seconds * 1e3);
    loss += s.loss;
    comm += s.comm_seconds;
    staging += s.staging_seconds;
    bytes += double(s.comm_bytes);
    wire += double(s.wire_bytes);
    saved += double(s.saved_bytes);
    if (s.codec_timed) {
      codec += s.codec_seconds;
      ++codec_steps;
    }
  }
  if (codec_steps > 0) r.codec_ms = codec * 1e3 / codec_steps;
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

namespace {

// {"attn.out.fwd": {"bytes": .., "wire_bytes": .., "rel_err": .., ...}, ...}: rank 0's traffic
// per site this step; rel_err is null where no compressed message was measured.
std::string sites_json(const SiteStatsTable& sites) {
  std::string out = "{";
  for (Site site : sites_by_name()) {
    const SiteCommStats& st = sites[site];
    if (st.calls == 0) continue;
    const std::string name = site_name(site);
    if (out.size() > 1) out += ", ";
    out.append("\"").append(json_escape(name)).append("\": ");
    out += JsonRecord()
               .add("calls", (long long)st.calls)
               .add("bytes", (long long)st.logical_bytes)
               .add("wire_bytes", (long long)st.wire_bytes)
               .add("saved_bytes", (long long)st.saved_bytes)
               .add("compressed_calls", (long long)st.compressed_calls)
               .add("rel_err", st.relative_l2())
               .add("nonfinite_groups", (long long)st.nonfinite_groups)
               .str();
  }
  return out + "}";
}

}  // namespace

std::string human_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, int(s / 60 % 60));
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, int(s % 60));
  return fmt::format("{}s", s);
}

std::string interval_line(int step, int steps, double lr, double norm, const IntervalSummary& sum,
                          const SiteStatsTable& sites, bool has_mfu, double elapsed_s,
                          const std::string& native) {
  std::string extra;
  if (sum.saved_bytes > 0)
    extra += fmt::format(" | saved {:.1f} MB vs {}", sum.saved_bytes / 1e6, native);
  double worst = 0;
  std::string worst_site;
  for (Site site : sites_by_name()) {
    const SiteCommStats& st = sites[site];
    const double e = st.error_samples > 0 ? st.relative_l2() : 0.0;
    if (st.error_samples > 0 && (std::isnan(e) || e > worst || worst_site.empty())) {
      worst = e;
      worst_site = site_name(site);
    }
  }
  if (!worst_site.empty()) extra += fmt::format(" | err {:.2e} {}", worst, worst_site);
  const std::string mfu = has_mfu ? fmt::format(" | MFU {:.1f}%", 100 * sum.mfu) : "";
  // ETA: the steps left at this interval's pace.
  const double eta_s = double(steps - step) * sum.ms_per_step / 1e3;
  return fmt::format(
      "step {:5d}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.1f} ms/step | {} tok/s{} | comm "
      "{:.0f}% ({:.1f} ms, {:.1f} MB){} | {} elapsed, ETA {}",
      step, steps, sum.loss, lr, norm, sum.ms_per_step, human_count(sum.tokens_per_s), mfu,
      100 * sum.comm_share, sum.comm_ms, sum.comm_bytes / 1e6, extra, human_duration(elapsed_s),
      human_duration(eta_s));
}

void log_interval(int step, int steps, double lr, double norm, const IntervalSummary& sum,
                  const SiteStatsTable& sites, bool has_mfu, double elapsed_s,
                  const std::string& native, MetricsWriter& metrics) {
  spdlog::info("{}", interval_line(step, steps, lr, norm, sum, sites, has_mfu, elapsed_s, native));
  JsonRecord r;
  r.add("step", (long long)step)
      .add("loss", sum.loss)
      .add("lr", lr)
      .add("grad_norm", norm)
      .add("steps", (long long)sum.steps)
      .add("ms", sum.ms_per_step)
      .add_raw("step_ms", json_array(sum.step_ms))
      .add("tok_per_s", sum.tokens_per_s)
      .add("elapsed_s", elapsed_s);
  if (has_mfu) r.add("mfu", sum.mfu);
  metrics.write(r.add("comm_ms", sum.comm_ms)
                    .add("comm_share", sum.comm_share)
                    .add("staging_ms", sum.staging_ms)
                    .add("codec_ms", sum.codec_ms >= 0 ? sum.codec_ms : std::nan(""))
                    .add("comm_bytes", (long long)sum.comm_bytes)
                    .add("wire_bytes", (long long)sum.wire_bytes)
                    .add("saved_bytes", (long long)sum.saved_bytes)
                    .add("dtype", native)
                    .add_raw("sites", sites_json(sites)));
}

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

}  // namespace taco
