// The log's arithmetic (engine/train/step_log.h): an interval's means and rates over every step
// in it, the codec time over the steps that took it, the step clock's exclusions, and the
// log line. Made-up samples with known answers.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "engine/train/step_log.h"

namespace taco {
namespace {

StepSample sample(double seconds, double loss, double comm) {
  StepSample s;
  s.seconds = seconds;
  s.loss = loss;
  s.comm_seconds = comm;
  s.comm_bytes = 1000;
  s.wire_bytes = 500;
  s.saved_bytes = 400;
  return s;
}

TEST(LogInterval, ReportsMeansAndRatesOverEveryStepOfTheInterval) {
  LogInterval interval;
  interval.add(sample(0.1, 4.0, 0.05));
  StepSample timed = sample(0.3, 2.0, 0.15);
  timed.codec_seconds = 0.02;
  timed.codec_timed = true;
  timed.staging_seconds = 0.01;
  interval.add(timed);
  // 1000 tokens a step, 6e9 flops a token, a peak of 1e15 flop/s.
  const IntervalSummary r = interval.summarize(1000, 6e9, 1e15);
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.seconds, 0.4);
  EXPECT_DOUBLE_EQ(r.ms_per_step, 200.0);
  EXPECT_DOUBLE_EQ(r.loss, 3.0);  // the mean, not the last step's 2.0
  EXPECT_DOUBLE_EQ(r.tokens_per_s, 5000.0);
  EXPECT_DOUBLE_EQ(r.mfu, 5000.0 * 6e9 / 1e15);
  EXPECT_DOUBLE_EQ(r.comm_share, 0.5);
  EXPECT_DOUBLE_EQ(r.comm_ms, 100.0);
  EXPECT_DOUBLE_EQ(r.staging_ms, 5.0);
  EXPECT_DOUBLE_EQ(r.codec_ms, 20.0);  // over the one step that timed it
  EXPECT_DOUBLE_EQ(r.wire_bytes, 500.0);
  ASSERT_EQ(r.step_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(r.step_ms[0], 100.0);
  EXPECT_DOUBLE_EQ(r.step_ms[1], 300.0);
  // No peak (CPU ranks): no MFU; no timed step: no codec time.
  LogInterval untimed;
  untimed.add(sample(0.1, 1.0, 0.0));
  const IntervalSummary u = untimed.summarize(1000, 6e9, 0);
  EXPECT_EQ(u.mfu, 0.0);
  EXPECT_LT(u.codec_ms, 0.0);
}

TEST(StepClock, ExcludedWorkIsTakenOutOfTheNextStep) {
  const auto before = std::chrono::steady_clock::now();
  StepClock clock;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  clock.exclude(0.025);
  const double first = clock.end_step();
  const double outside =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  // At least the 30 ms slept, at most what passed around it; 25 ms of either excluded.
  EXPECT_GE(first, 0.030 - 0.025);
  EXPECT_LE(first, outside - 0.025);
  clock.exclude(1.0);  // more than elapsed: never a negative step
  EXPECT_EQ(clock.end_step(), 0.0);
}

TEST(HumanDuration, SecondsMinutesAndHours) {
  EXPECT_EQ(human_duration(9.4), "9s");
  EXPECT_EQ(human_duration(75), "1m15s");
  EXPECT_EQ(human_duration(3725), "1h02m");
  EXPECT_EQ(human_duration(-3), "0s");
}

// The log line names every quantity of docs/logs-and-metrics.md, and says what "saved" is
// counted against: the run's own dtype (fp32 on CPU ranks, where a GPU run would send bf16).
TEST(IntervalLine, CarriesEveryQuantityAndNamesWhatSavedIsCountedAgainst) {
  LogInterval interval;
  interval.add(sample(0.5, 3.0, 0.25));
  interval.add(sample(0.5, 2.0, 0.25));
  const IntervalSummary sum = interval.summarize(1000, 6e9, 1e14);
  SiteStatsTable sites;
  SiteCommStats a;
  a.calls = 4;
  a.error_samples = 2;
  a.error_sq = 1.0;
  a.signal_sq = 100.0;
  sites[Site::attn_out_fwd] = a;
  SiteCommStats b = a;
  b.error_sq = 4.0;
  sites[Site::mlp_out_fwd] = b;
  sites[Site::sp_grad].calls = 2;  // never measured: never the worst
  const std::string line = interval_line(20, 100, 1e-3, 0.75, sum, sites, true, 30, "fp32");
  for (const char* part :
       {"step    20/100", "loss 2.5000", "lr 1.00e-03", "norm 0.750", "500.0 ms/step", "2.0k tok/s",
        "MFU 12.0%", "comm 50% (250.0 ms", "saved 0.0 MB vs fp32", "err 2.00e-01 mlp.out.fwd",
        "30s elapsed", "ETA 40s"})
    EXPECT_NE(line.find(part), std::string::npos) << part << "\n" << line;
  // Without MFU (CPU ranks) and without compression: neither part.
  const std::string plain =
      interval_line(20, 100, 1e-3, 0.75, IntervalSummary{}, {}, false, 30, "bf16");
  EXPECT_EQ(plain.find("MFU"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("saved"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("err "), std::string::npos) << plain;
}

}  // namespace
}  // namespace taco
