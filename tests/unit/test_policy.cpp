// The compression policy: first matching rule wins per (layer, site), the default otherwise,
// small messages uncompressed, bad rules rejected with one line naming file, line and key.
#include <gtest/gtest.h>

#include <string>

#include "compression/policy.h"
#include "engine/config/config.h"
#include "kernels/check.h"

using namespace taco;

namespace {

CodecSpec spec(const std::string& codec, int group = 128, const std::string& scales = "dual",
               const std::string& format = "e4m3") {
  CodecSpec s;
  s.codec = codec;
  s.group = group;
  s.scales = scales;
  s.format = format;
  return s;
}

CompressionRule rule(const std::string& layers, std::vector<std::string> sites, CodecSpec s,
                     int line = 0) {
  CompressionRule r;
  r.layers = layers;
  r.sites = std::move(sites);
  r.spec = s;
  r.line = line;
  return r;
}

CodecOptions taco_g(int group, Fp8Scales scales = Fp8Scales::dual) {
  return CodecOptions{CodecKind::taco, Fp8Format::e4m3, group, scales, GroupAxis::hidden};
}

// The UserError message of building a policy from `section`, or "".
std::string policy_error(const CompressionSection& section, int n_layer = 4) {
  try {
    CompressionPolicy p(section, n_layer, "exp.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Policy, DefaultAppliesWhereNoRuleMatches) {
  CompressionSection c;
  c.default_spec = spec("taco");
  CompressionPolicy p(c, 3);
  for (Site site : all_sites()) {
    for (int layer = 0; layer < 3; ++layer) EXPECT_EQ(p.configured(layer, site), taco_g(128));
  }
}

TEST(Policy, FirstMatchingRuleWins) {
  CompressionSection c;
  c.rules = {rule("1-2", {"attn.out.fwd"}, spec("fp8_block", 64)),
             rule("all", {"attn.out.fwd", "mlp.out.fwd"}, spec("taco", 256, "single")),
             rule("2", {"attn.out.fwd"}, spec("fp8_tensor"))};  // shadowed by the first rule
  CompressionPolicy p(c, 4);
  const CodecOptions block{CodecKind::fp8_block, Fp8Format::e4m3, 64, Fp8Scales::single,
                           GroupAxis::hidden};
  EXPECT_EQ(p.configured(0, Site::attn_out_fwd), taco_g(256, Fp8Scales::single));
  EXPECT_EQ(p.configured(1, Site::attn_out_fwd), block);
  EXPECT_EQ(p.configured(2, Site::attn_out_fwd), block);
  EXPECT_EQ(p.configured(3, Site::attn_out_fwd), taco_g(256, Fp8Scales::single));
  for (int layer = 0; layer < 4; ++layer) {
    EXPECT_EQ(p.configured(layer, Site::mlp_out_fwd), taco_g(256, Fp8Scales::single));
    EXPECT_EQ(p.configured(layer, Site::attn_out_bwd), CodecOptions{});
  }
}

TEST(Policy, RuleWithoutSitesCoversEveryPerLayerSiteOfItsLayers) {
  CompressionSection c;
  c.rules = {rule("0,3", {}, spec("taco"))};
  CompressionPolicy p(c, 4);
  for (Site site : all_sites()) {
    if (!site_is_per_layer(site)) {
      // A rule limited to some layers cannot reach a site that belongs to no layer.
      EXPECT_EQ(p.configured(0, site), CodecOptions{}) << site_name(site);
      continue;
    }
    EXPECT_EQ(p.configured(0, site), taco_g(128)) << site_name(site);
    EXPECT_EQ(p.configured(1, site), CodecOptions{}) << site_name(site);
    EXPECT_EQ(p.configured(3, site), taco_g(128)) << site_name(site);
  }
}

TEST(Policy, ModelWideSitesFollowRulesForAllLayers) {
  CompressionSection c;
  c.rules = {rule("all", {"dp.grad", "pp.act"}, spec("fp8_block", 512))};
  CompressionPolicy p(c, 2);
  EXPECT_EQ(p.configured(-1, Site::dp_grad).kind, CodecKind::fp8_block);
  EXPECT_EQ(p.configured(-1, Site::pp_act).group, 512);
  EXPECT_EQ(p.configured(-1, Site::pp_grad), CodecOptions{});
}

TEST(Policy, MessagesBelowMinBytesGoUncompressed) {
  CompressionSection c;
  c.default_spec = spec("taco");
  c.min_bytes = 65536;
  CompressionPolicy p(c, 2);
  EXPECT_EQ(p.resolve(0, Site::mlp_out_fwd, 65535), CodecOptions{});
  EXPECT_EQ(p.resolve(0, Site::mlp_out_fwd, 65536), taco_g(128));
  EXPECT_EQ(p.min_bytes(), 65536);
}

TEST(Policy, KeepsTheConfiguredPipelineChunks) {
  CompressionSection c;
  EXPECT_EQ(CompressionPolicy(c, 1).chunks(), 0);  // auto
  c.chunks = 3;
  EXPECT_EQ(CompressionPolicy(c, 1).chunks(), 3);
}

TEST(Policy, Fp8BlockIgnoresTheDualScaleDefault) {
  // CodecSpec defaults to scales: dual, which only TACO has; fp8_block keeps its one scale.
  CompressionSection c;
  c.default_spec = spec("fp8_block", 32);
  CompressionPolicy p(c, 1);
  EXPECT_EQ(p.configured(0, Site::attn_in_fwd).scales, Fp8Scales::single);
}

TEST(Policy, RejectsBadRulesWithOneLineNamingFileLineAndKey) {
  struct Case {
    CompressionSection section;
    std::string expect;
  };
  auto with_rule = [](CompressionRule r) {
    CompressionSection c;
    c.rules = {r};
    return c;
  };
  CompressionSection negative;
  negative.min_bytes = -1;
  CompressionSection negative_chunks;
  negative_chunks.chunks = -1;
  CompressionSection auto_without_steps = with_rule(rule("all", {}, spec("taco", 0), 9));
  CompressionSection bad_default;
  bad_default.default_spec = spec("taco", 128, "triple");
  const Case cases[] = {
      {with_rule(rule("all", {"attn.outt.fwd"}, spec("taco"), 12)),
       "exp.yaml:12: compression.rules[0]: sites: unknown site 'attn.outt.fwd'; sites are "
       "embed.fwd, embed.bwd"},
      {with_rule(rule("2-7", {}, spec("taco"), 5)),
       "exp.yaml:5: compression.rules[0]: layers: \"2-7\" names layer 7 but model.n_layer = 4"},
      {with_rule(rule("0-1", {"dp.grad"}, spec("taco"), 3)),
       "exp.yaml:3: compression.rules[0]: sites: dp.grad belongs to no layer, so a rule naming it "
       "needs layers: all"},
      {with_rule(rule("all", {}, spec("zstd"), 4)),
       "exp.yaml:4: compression.rules[0]: codec: unknown codec 'zstd'; use none, fp8_tensor, "
       "fp8_block or taco"},
      {with_rule(rule("all", {}, spec("taco", 100), 4)),
       "exp.yaml:4: compression.rules[0]: group: group 100 is not one of 32, 64, 128, 256, 512 or "
       "auto"},
      {with_rule(rule("all", {}, spec("taco", 128, "dual", "e3m4"), 4)),
       "exp.yaml:4: compression.rules[0]: format: unknown FP8 format 'e3m4'; use e4m3 or e5m2"},
      {bad_default,
       "exp.yaml: compression.default: scales: unknown scale mode 'triple'; use dual, single or "
       "e8m0"},
      {negative, "exp.yaml: compression.min_bytes: -1 is negative"},
      {negative_chunks, "exp.yaml: compression.chunks: -1 is negative"},
      {auto_without_steps, "exp.yaml: compression.calibrate_steps: a rule uses group: auto"},
  };
  for (const Case& c : cases) {
    const std::string msg = policy_error(c.section);
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << "got:  " << msg << "\nwant: " << c.expect;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(Policy, TableShowsEveryLayerAndSiteWithALegend) {
  CompressionSection c;
  c.min_bytes = 1024;
  c.rules = {rule("1-3", {"attn.out.fwd", "mlp.out.fwd"}, spec("taco")),
             rule("3", {"mlp.in.bwd"}, spec("fp8_block", 64)),
             rule("all", {"dp.grad"}, spec("fp8_tensor", 128, "dual", "e5m2"))};
  CompressionPolicy p(c, 5);
  EXPECT_EQ(p.table(),
            "compression: first matching rule wins; messages under 1024 bytes go uncompressed\n"
            "  . none\n"
            "  A taco e4m3 g128 dual hidden\n"
            "  B fp8_block e4m3 g64 hidden\n"
            "  C fp8_tensor e5m2\n"
            "  layer   attn.in   attn.out  mlp.in    mlp.out\n"
            "          fwd bwd   fwd bwd   fwd bwd   fwd bwd\n"
            "  0       .   .     .   .     .   .     .   .\n"
            "  1-2     .   .     A   .     .   .     A   .\n"
            "  3       .   .     A   .     .   B     A   .\n"
            "  4       .   .     .   .     .   .     .   .\n"
            "  model-wide: embed.fwd . embed.bwd . head.in.fwd . head.in.bwd . pp.act . "
            "pp.grad . dp.grad C\n");
}

// min_bytes 0 exempts no message; the heading must not speak of "messages under 0 bytes".
TEST(Policy, TableWithoutAMinimumSaysEveryMessageIsCompressed) {
  CompressionSection c;
  c.default_spec = spec("taco");
  const std::string table = CompressionPolicy(c, 2).table();
  EXPECT_EQ(table.rfind("compression: first matching rule wins; every message takes its codec "
                        "whatever its size (compression.min_bytes 0)\n",
                        0),
            0u)
      << table;
  EXPECT_EQ(table.find("under 0 bytes"), std::string::npos) << table;
}

TEST(Policy, AutoGroupsWaitForCalibration) {
  CompressionSection c;
  c.calibrate_steps = 10;
  c.rules = {rule("all", {"mlp.out.fwd", "dp.grad"}, spec("taco", 0))};
  CompressionPolicy p(c, 2);
  const std::vector<Site> pending{Site::mlp_out_fwd, Site::dp_grad};
  EXPECT_EQ(p.sites_to_calibrate(), pending);
  EXPECT_EQ(p.configured(0, Site::mlp_out_fwd).group, kAutoGroup);
  EXPECT_EQ(p.resolve(0, Site::mlp_out_fwd, 1 << 20), taco_g(kUncalibratedGroup));
  EXPECT_NE(p.table().find("taco e4m3 auto dual"), std::string::npos) << p.table();

  p.apply_calibration(Site::dp_grad, 512, GroupAxis::token);
  EXPECT_EQ(p.sites_to_calibrate(), std::vector<Site>{Site::mlp_out_fwd});
  CodecOptions want = taco_g(512);
  want.axis = GroupAxis::token;
  EXPECT_EQ(p.resolve(0, Site::dp_grad, 1 << 20), want);
}

TEST(Sites, NamesMatchTheConfigsOrder) {
  for (Site s : all_sites()) {
    Site back;
    ASSERT_TRUE(parse_site(site_name(s), &back));
    EXPECT_EQ(back, s);
    EXPECT_EQ(site_name(s), kSiteNames[size_t(s)]);
  }
  Site dummy;
  EXPECT_FALSE(parse_site("attn.out", &dummy));
  EXPECT_TRUE(site_is_per_layer(Site::mlp_in_bwd));
  EXPECT_FALSE(site_is_per_layer(Site::head_in_fwd));
}
