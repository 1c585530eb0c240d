// Per-site statistics add up exactly, merge like one long run, and render as JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compression/stats.h"
#include "tests/support/test_util.h"

using namespace taco;

TEST(SiteStats, CountsBytesAndMeasuresRelativeError) {
  SiteStats s;
  s.add_message(4096, 2176);
  s.add_message(4096, 2176, 3);
  EXPECT_EQ(s.messages, 2);
  EXPECT_EQ(s.logical_bytes, 8192);
  EXPECT_EQ(s.wire_bytes, 4352);
  EXPECT_EQ(s.nonfinite_groups, 3);
  EXPECT_DOUBLE_EQ(s.ratio(), 8192.0 / 4352.0);

  // ||(0, 0.5)|| / ||(3, 4)|| = 0.1, then a second sample with error 0: pooled over both,
  // sqrt(0.25 / (25 + 25)), and the worst single message stays 0.1.
  const float x[2] = {3.f, 4.f}, xhat[2] = {3.f, 4.5f};
  s.add_error_sample(x, xhat, 2);
  EXPECT_DOUBLE_EQ(s.relative_l2(), 0.1);
  s.add_error_sample(x, x, 2);
  EXPECT_DOUBLE_EQ(s.relative_l2(), std::sqrt(0.25 / 50.0));
  EXPECT_DOUBLE_EQ(s.max_relative_l2, 0.1);
  EXPECT_EQ(s.error_samples, 2);
}

TEST(SiteStats, MergingEqualsRecordingEverythingInOne) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  SiteStats all, a, b;
  for (int i = 0; i < 6; ++i) {
    const std::vector<float> x = test::random_normal(64, seed + uint64_t(i));
    const std::vector<float> y = test::random_normal(64, seed + 100 + uint64_t(i), 0.f, 0.01f);
    std::vector<float> xhat(64);
    for (size_t k = 0; k < 64; ++k) xhat[k] = x[k] + y[k];
    SiteStats& part = i < 4 ? a : b;
    for (SiteStats* s : {&all, &part}) {
      s->add_message(256, 130 + i);
      s->add_error_sample(x.data(), xhat.data(), 64);
    }
  }
  SiteStats merged = a;
  merged.merge(b);
  EXPECT_EQ(merged.messages, all.messages);
  EXPECT_EQ(merged.wire_bytes, all.wire_bytes);
  EXPECT_EQ(merged.error_samples, all.error_samples);
  EXPECT_NEAR(merged.relative_l2(), all.relative_l2(), 1e-12);
  EXPECT_DOUBLE_EQ(merged.max_relative_l2, all.max_relative_l2);
  // The packed form (for an MPI reduction) carries everything.
  const SiteStats back = SiteStats::unpack(merged.pack());
  EXPECT_EQ(back.pack(), merged.pack());
}

TEST(SiteStats, NonFiniteErrorStaysVisible) {
  SiteStats s;
  const float x[2] = {1.f, 1.f}, xhat[2] = {std::numeric_limits<float>::quiet_NaN(), 1.f};
  s.add_error_sample(x, xhat, 2);
  EXPECT_TRUE(std::isnan(s.max_relative_l2));
  SiteStats clean;
  clean.add_error_sample(x, x, 2);
  clean.merge(s);
  EXPECT_TRUE(std::isnan(clean.max_relative_l2));
}

TEST(SiteStats, Bf16SamplesAreMeasuredInTheirValues) {
  SiteStats s;
  const bf16 x[2] = {float_to_bf16(3.f), float_to_bf16(4.f)};
  const bf16 xhat[2] = {float_to_bf16(3.f), float_to_bf16(4.5f)};
  s.add_error_sample(x, xhat, 2);
  EXPECT_DOUBLE_EQ(s.relative_l2(), 0.1);
}

TEST(ChannelErrors, MeanOverChannelsSeesWhatTheGlobalErrorHides) {
  // Channel 0: large and exact; channel 1: small and 100% wrong.
  const float x[4] = {1.f, 0.01f, 1.f, 0.01f}, xhat[4] = {1.f, 0.02f, 1.f, 0.02f};
  ChannelErrors e;
  e.add(x, xhat, 2, 2);
  EXPECT_NEAR(e.global(), std::sqrt(2e-4 / (2 + 2e-4)), 1e-9);
  EXPECT_NEAR(e.mean_channel(), 0.5, 1e-6);
  EXPECT_NEAR(e.pooled({false, true}), 1.0, 1e-6);
}

TEST(CompressionStats, SamplesEveryNthMessage) {
  CompressionStats st;
  int sampled = 0;
  for (int i = 0; i < 10; ++i) {
    sampled += st.sample_due(Site::mlp_out_fwd, 4);
    st[Site::mlp_out_fwd].add_message(100, 60);
  }
  EXPECT_EQ(sampled, 3);  // messages 0, 4, 8
  EXPECT_FALSE(st.sample_due(Site::mlp_out_fwd, 0));
}

TEST(CompressionStats, JsonListsSitesWithTrafficAndATotal) {
  CompressionStats st;
  st[Site::attn_out_fwd].add_message(1000, 500);
  st[Site::dp_grad].add_message(3000, 3000);
  const float x[2] = {3.f, 4.f}, xhat[2] = {3.f, 4.5f};
  st[Site::attn_out_fwd].add_error_sample(x, xhat, 2);
  const std::string json = st.to_json();
  EXPECT_EQ(json,
            "{\"attn.out.fwd\":{\"messages\":1,\"logical_bytes\":1000,\"wire_bytes\":500,"
            "\"ratio\":2,\"rel_l2\":0.1,\"max_rel_l2\":0.1,\"error_samples\":1,"
            "\"nonfinite_groups\":0},"
            "\"dp.grad\":{\"messages\":1,\"logical_bytes\":3000,\"wire_bytes\":3000,"
            "\"ratio\":1,\"rel_l2\":null,\"max_rel_l2\":null,\"error_samples\":0,"
            "\"nonfinite_groups\":0},"
            "\"total\":{\"messages\":2,\"logical_bytes\":4000,\"wire_bytes\":3500,"
            "\"ratio\":1.14286,\"rel_l2\":0.1,\"max_rel_l2\":0.1,\"error_samples\":1,"
            "\"nonfinite_groups\":0}}");
  CompressionStats other;
  other[Site::attn_out_fwd].add_message(1000, 500);
  st.merge(other);
  EXPECT_EQ(st[Site::attn_out_fwd].messages, 2);
  st.reset();
  EXPECT_EQ(st.to_json().find("attn.out.fwd"), std::string::npos);
}
