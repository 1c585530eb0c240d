// codec: auto's pure parts: the alpha-beta collective model (parallel/collective_model.h), its fit
// to timed calls, and the decision (parallel/codec_autotune.h): fast links keep the native
// collective, slow ones compress, and the margin is respected.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "parallel/codec_autotune.h"
#include "parallel/collective_model.h"

using namespace taco;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// One encoded chunk of taco e4m3 g128 dual scales: 1 byte per value + 8 bytes per 128 values
// (against 2 in bf16). The second shot's fp32 sums encode to the same FP8 size.
double taco_slot(double native_bytes, int ranks) {
  const double values = native_bytes / 2 / ranks;
  return values * (1 + 8.0 / 128);
}

}  // namespace

TEST(CollectiveModel, FollowsTheAlphaBetaFormulas) {
  const LinkModel link{5e-6, 10e9};
  const double n = 1 * kMiB;
  // 2 (p - 1) (alpha + n / (p B)) at p = 4.
  EXPECT_DOUBLE_EQ(collective_seconds(CommOp::all_reduce, 4, n, link), 6 * (5e-6 + n / 4 / 10e9));
  EXPECT_DOUBLE_EQ(collective_seconds(CommOp::reduce_scatter, 4, n, link),
                   3 * (5e-6 + n / 4 / 10e9));
  EXPECT_DOUBLE_EQ(collective_seconds(CommOp::all_gather, 4, n, link),
                   collective_seconds(CommOp::reduce_scatter, 4, n, link));
  EXPECT_DOUBLE_EQ(collective_seconds(CommOp::send, 2, n, link), 5e-6 + n / 10e9);
  EXPECT_EQ(collective_seconds(CommOp::all_reduce, 1, n, link), 0);  // a group of one
}

// The compressed two-shot all-reduce: all-to-all then all-gather of encoded chunks; encode the
// message and one's summed chunk, decode twice the message.
TEST(CollectiveModel, CompressedAllReduceCountsBothShotsAndTheCodecWork) {
  const LinkModel link{2e-6, 20e9};
  const CodecThroughput codec{100e9, 200e9};
  const double n = 8 * kMiB, slot = 0.5 * kMiB, sum_slot = 0.75 * kMiB;
  const CompressedSeconds c =
      compressed_collective_seconds(CommOp::all_reduce, 4, n, slot, sum_slot, codec, link);
  EXPECT_DOUBLE_EQ(c.wire_s, 3 * (2e-6 + slot / 20e9) + 3 * (2e-6 + sum_slot / 20e9));
  EXPECT_DOUBLE_EQ(c.encode_s, (n + n / 4) / 100e9);
  EXPECT_DOUBLE_EQ(c.decode_s, 2 * n / 200e9);
  const CompressedSeconds rs =
      compressed_collective_seconds(CommOp::reduce_scatter, 4, n, slot, 0, codec, link);
  EXPECT_DOUBLE_EQ(rs.encode_s, n / 100e9);
  EXPECT_DOUBLE_EQ(rs.decode_s, n / 200e9);
  const CompressedSeconds ag =
      compressed_collective_seconds(CommOp::all_gather, 4, n, slot, 0, codec, link);
  EXPECT_DOUBLE_EQ(ag.encode_s, n / 4 / 100e9);
  EXPECT_DOUBLE_EQ(ag.wire_s, 3 * (2e-6 + slot / 20e9));
}

// Times made by a known link (a little noise, as real timings have) fit back to it.
TEST(CollectiveModel, FitRecoversTheLinkThatMadeTheTimes) {
  const LinkModel truth{4e-6, 12.5e9};
  for (int ranks : {2, 8}) {
    std::vector<TimedCall> calls;
    const double noise[] = {1.01, 0.99, 1.0};
    int i = 0;
    for (double bytes : {16e3, 128e3, 1e6})
      calls.push_back(
          {bytes, collective_seconds(CommOp::all_reduce, ranks, bytes, truth) * noise[i++]});
    const LinkModel fit = fit_link(CommOp::all_reduce, ranks, calls);
    // 1% noise on three points moves each parameter by a few percent at most.
    EXPECT_NEAR(fit.latency_s, truth.latency_s, 0.05 * truth.latency_s) << ranks;
    EXPECT_NEAR(fit.bandwidth_Bps, truth.bandwidth_Bps, 0.05 * truth.bandwidth_Bps) << ranks;
  }
}

// Times that do not grow with size (noise) are latency only: never a negative bandwidth.
TEST(CollectiveModel, FitOfFlatTimesIsLatencyOnly) {
  const LinkModel fit =
      fit_link(CommOp::all_reduce, 2, {{1e3, 10e-6}, {1e4, 10e-6}, {1e5, 9.5e-6}});
  EXPECT_EQ(fit.bandwidth_Bps, 0);  // infinitely fast
  EXPECT_GT(fit.latency_s, 4e-6);   // 2 (p - 1) alpha ~ 10 us
  EXPECT_LT(fit.latency_s, 5.1e-6);
}

// NVLink-class: 150 GB/s per direction, 2 us. A bf16 8 MiB all-reduce over 2 ranks takes 2 x
// (2 us + 4 MiB / 150 GB/s) = 60 us natively; taco at 300 GB/s each way spends 42 + 56 us in the
// codec alone: native wins.
TEST(AutoCodec, FastLinkKeepsTheNativeCollective) {
  const double n = 8 * kMiB;
  const AutoPrediction p = predict_auto_codec(CommOp::all_reduce, 2, n, taco_slot(n, 2),
                                              taco_slot(n, 2), {300e9, 300e9}, {2e-6, 150e9}, 0.1);
  EXPECT_FALSE(p.compress);
  EXPECT_NEAR(p.native_s, 2 * (2e-6 + n / 2 / 150e9), 1e-12);
  EXPECT_NEAR(p.compressed.encode_s, 1.5 * n / 300e9, 1e-12);
  EXPECT_NEAR(p.compressed.decode_s, 2 * n / 300e9, 1e-12);
  EXPECT_GT(p.compressed.total(), p.native_s);
}

// Host-staged PCIe-class: 5 GB/s, 20 us. The same message takes 1.7 ms natively and about 1 ms
// compressed: compress.
TEST(AutoCodec, SlowLinkCompresses) {
  const double n = 8 * kMiB;
  const AutoPrediction p = predict_auto_codec(CommOp::all_reduce, 2, n, taco_slot(n, 2),
                                              taco_slot(n, 2), {300e9, 300e9}, {20e-6, 5e9}, 0.1);
  EXPECT_TRUE(p.compress);
  EXPECT_NEAR(p.native_s, 2 * (20e-6 + n / 2 / 5e9), 1e-12);
  EXPECT_LT(p.compressed.total(), 0.9 * p.native_s);
}

// The same slow link, but a message so small that latency dominates: compressing saves bytes
// that cost nothing, and the codec's time is lost.
TEST(AutoCodec, SmallMessagesOnASlowLinkStayNative) {
  const double n = 4096;
  const AutoPrediction p = predict_auto_codec(CommOp::all_reduce, 2, n, 64 + taco_slot(n, 2),
                                              64 + taco_slot(n, 2), {2e9, 2e9}, {20e-6, 5e9}, 0.1);
  EXPECT_FALSE(p.compress);
}

// A free codec and a link of pure bandwidth: compressed / native = slot / native slot = 0.95.
// It compresses under a margin below 5% and not at or above it.
TEST(AutoCodec, MarginIsRespected) {
  const double n = 100, native_slot = n / 2, slot = 0.95 * native_slot;
  const LinkModel link{0, 1};
  auto choose = [&](double margin) {
    return predict_auto_codec(CommOp::reduce_scatter, 2, n, slot, 0, {}, link, margin).compress;
  };
  EXPECT_TRUE(choose(0));
  EXPECT_TRUE(choose(0.04));
  EXPECT_FALSE(choose(0.05));  // equal is not a gain
  EXPECT_FALSE(choose(0.1));
  const CompressedSeconds c{0, 0.95, 0};
  EXPECT_TRUE(auto_compresses(c, 1.0, 0.049));
  EXPECT_FALSE(auto_compresses(c, 1.0, 0.051));
}
