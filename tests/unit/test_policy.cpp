// The compression policy: first matching rule wins per (layer, site), the default otherwise,
// small messages uncompressed, bad rules rejected with one line naming file, line and key.
#include <gtest/gtest.h>

#include <string>

#include "compression/policy.h"
#include "engine/config/config.h"
#include "kernels/check.h"

using namespace taco;

namespace {

// A width that every group size divides.
constexpr int kDModel = 512;

// A spec by the names a config file uses.
CodecSpec spec(const std::string& codec, int group = 128, const std::string& scales = "dual",
               const std::string& format = "e4m3") {
  CodecSpec s;
  EXPECT_TRUE(parse_codec_kind(codec, &s.codec)) << codec;
  s.group = group;
  EXPECT_TRUE(parse_fp8_scales(scales, &s.scales)) << scales;
  EXPECT_TRUE(parse_fp8_format(format, &s.format)) << format;
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
std::string policy_error(const CompressionSection& section, int n_layer = 4,
                         int d_model = kDModel) {
  try {
    CompressionPolicy p(section, n_layer, d_model, "exp.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Policy, DefaultAppliesWhereNoRuleMatches) {
  CompressionSection c;
  c.default_spec = spec("taco");
  CompressionPolicy p(c, 3, kDModel);
  for (Site site : compressible_sites()) {
    for (int layer = 0; layer < 3; ++layer) EXPECT_EQ(p.configured(layer, site), taco_g(128));
  }
}

TEST(Policy, FirstMatchingRuleWins) {
  CompressionSection c;
  c.rules = {rule("1-2", {"attn.out.fwd"}, spec("fp8_block", 64)),
             rule("all", {"attn.out.fwd", "mlp.out.fwd"}, spec("taco", 256, "single")),
             rule("2", {"attn.out.fwd"}, spec("fp8_tensor"))};  // shadowed by the first rule
  CompressionPolicy p(c, 4, kDModel);
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
  CompressionPolicy p(c, 4, kDModel);
  for (Site site : compressible_sites()) {
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
  CompressionPolicy p(c, 2, kDModel);
  EXPECT_EQ(p.configured(-1, Site::dp_grad).kind, CodecKind::fp8_block);
  EXPECT_EQ(p.configured(-1, Site::pp_act).group, 512);
  EXPECT_EQ(p.configured(-1, Site::pp_grad), CodecOptions{});
}

TEST(Policy, MessagesBelowMinBytesGoUncompressed) {
  CompressionSection c;
  c.default_spec = spec("taco");
  c.min_bytes = 65536;
  CompressionPolicy p(c, 2, kDModel);
  EXPECT_EQ(p.resolve(0, Site::mlp_out_fwd, 65535), CodecOptions{});
  EXPECT_EQ(p.resolve(0, Site::mlp_out_fwd, 65536), taco_g(128));
  EXPECT_EQ(p.min_bytes(), 65536);
}

TEST(Policy, KeepsTheConfiguredPipelineChunks) {
  CompressionSection c;
  EXPECT_EQ(CompressionPolicy(c, 1, kDModel).chunks(), 0);  // auto
  c.chunks = 3;
  EXPECT_EQ(CompressionPolicy(c, 1, kDModel).chunks(), 3);
}

TEST(Policy, Fp8BlockIgnoresTheDualScaleDefault) {
  // CodecSpec defaults to scales: dual, which only TACO has; fp8_block keeps its one scale.
  CompressionSection c;
  c.default_spec = spec("fp8_block", 32);
  CompressionPolicy p(c, 1, kDModel);
  EXPECT_EQ(p.configured(0, Site::attn_in_fwd).scales, Fp8Scales::single);
}

// The same checks run at config load, where the config names the key's own line
// (tests/unit/test_config_rejects.cpp); built directly, the policy names the rule's line. Codec,
// format and scale names cannot be wrong here: CodecSpec holds enums, and the config reader rejects
// an unknown name (test_config_rejects.cpp, BadCodec, BadFormat, BadScales).
TEST(Policy, RejectsBadRulesWithOneLineNamingFileLineAndKey) {
  struct Case {
    CompressionSection section;
    std::string expect;
    int d_model = kDModel;
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
  CompressionSection negative_steps;
  negative_steps.calibrate_steps = -2;
  CompressionSection auto_without_steps = with_rule(rule("all", {}, spec("taco", 0), 9));
  CodecSpec auto_none;
  auto_none.codec_auto = true;
  auto_none.candidate = CodecKind::none;
  CompressionSection auto_candidate_none = with_rule(rule("all", {}, auto_none, 6));
  CompressionSection auto_margin_one;
  auto_margin_one.auto_margin = 1;
  CompressionSection auto_recheck_negative;
  auto_recheck_negative.auto_recheck_steps = -1;
  CompressionSection wide_default;
  wide_default.default_spec = spec("fp8_block", 256, "single");
  const Case cases[] = {
      {with_rule(rule("all", {"attn.outt.fwd"}, spec("taco"), 12)),
       "exp.yaml:12: compression.rules[0].sites[0]: unknown site 'attn.outt.fwd'; expected one of "
       "embed.fwd, embed.bwd"},
      {with_rule(rule("2-7", {}, spec("taco"), 5)),
       "exp.yaml:5: compression.rules[0].layers: \"2-7\" names layer 7 but model.n_layer = 4"},
      {with_rule(rule("0-1", {"mlp.out.fwd", "dp.grad"}, spec("taco"), 3)),
       "exp.yaml:3: compression.rules[0].sites[1]: dp.grad belongs to no layer, so a rule naming "
       "it needs layers: all; expected layers: all"},
      {with_rule(rule("all", {}, spec("taco", 100), 4)),
       "exp.yaml:4: compression.rules[0].group: 100 is not a supported group size; expected 32, "
       "64, 128, 256, 512 or auto"},
      {wide_default,
       "exp.yaml: compression.default.group: 256 does not divide model.d_model = 384; expected a "
       "group size that divides d_model, or auto",
       384},
      {negative, "exp.yaml: compression.min_bytes: -1 is negative"},
      {negative_chunks, "exp.yaml: compression.chunks: -1 is negative"},
      {negative_steps, "exp.yaml: compression.calibrate_steps: -2 is negative"},
      {auto_without_steps,
       "exp.yaml: compression.calibrate_steps: 0, but compression.rules[0] says group: auto"},
      {auto_candidate_none,
       "exp.yaml:6: compression.rules[0].candidate: none is no candidate for codec: auto"},
      {auto_margin_one,
       "exp.yaml: compression.auto_margin: 1 is out of range; expected a "
       "number in [0, 1)"},
      {auto_recheck_negative, "exp.yaml: compression.auto_recheck_steps: -1 is negative"},
  };
  for (const Case& c : cases) {
    const std::string msg = policy_error(c.section, 4, c.d_model);
    EXPECT_EQ(msg.rfind(c.expect, 0), 0u) << "got:  " << msg << "\nwant: " << c.expect;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The error keeps its key and problem apart, for config validation to place at the key's line.
TEST(Policy, ErrorsCarryTheirKeyAndProblem) {
  CompressionSection c;
  c.rules = {rule("all", {"mlp.out.fwd", "attn.outt.fwd"}, spec("taco"), 7)};
  try {
    CompressionPolicy p(c, 2, kDModel, "exp.yaml");
    FAIL() << "unknown site accepted";
  } catch (const CompressionError& e) {
    EXPECT_EQ(e.key(), "compression.rules[0].sites[1]");
    EXPECT_EQ(e.problem().rfind("unknown site 'attn.outt.fwd'; expected one of embed.fwd", 0), 0u)
        << e.problem();
    EXPECT_EQ(e.exit_code(), 2);
  }
}

// A group auto that an earlier rule shadows everywhere is never used: nothing to calibrate.
TEST(Policy, ShadowedAutoGroupNeedsNoCalibration) {
  CompressionSection c;
  c.rules = {rule("all", {}, spec("taco")), rule("all", {}, spec("taco", 0))};
  EXPECT_EQ(policy_error(c), "");
  EXPECT_TRUE(CompressionPolicy(c, 2, kDModel).sites_to_calibrate().empty());
}

TEST(Policy, TableShowsEveryLayerAndSiteWithALegend) {
  CompressionSection c;
  c.min_bytes = 1024;
  c.rules = {rule("1-3", {"attn.out.fwd", "mlp.out.fwd"}, spec("taco")),
             rule("3", {"mlp.in.bwd"}, spec("fp8_block", 64)),
             rule("all", {"dp.grad"}, spec("fp8_tensor", 128, "dual", "e5m2"))};
  CompressionPolicy p(c, 5, kDModel);
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
  const std::string table = CompressionPolicy(c, 2, kDModel).table();
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
  CompressionPolicy p(c, 2, kDModel);
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

// codec: auto keeps its candidate as the configured options and marks the (layer, site)
// automatic; the table's legend says the choice is left to measurement.
TEST(Policy, CodecAutoMarksItsSitesAndKeepsTheCandidate) {
  CompressionSection c;
  c.min_bytes = 4096;
  c.auto_margin = 0.2;
  c.auto_recheck_steps = 50;
  CodecSpec automatic = spec("fp8_block", 64, "single");
  automatic.codec = CodecKind::none;  // ignored under codec: auto
  automatic.codec_auto = true;
  automatic.candidate = CodecKind::fp8_block;
  c.rules = {rule("1-2", {"mlp.in.bwd"}, automatic), rule("all", {"attn.out.fwd"}, spec("taco"))};
  c.default_spec.codec_auto = true;  // candidate taco, g128 dual
  CompressionPolicy p(c, 4, kDModel);
  EXPECT_DOUBLE_EQ(p.auto_margin(), 0.2);
  EXPECT_EQ(p.auto_recheck_steps(), 50);
  EXPECT_TRUE(p.any_automatic());
  const CodecOptions block{CodecKind::fp8_block, Fp8Format::e4m3, 64, Fp8Scales::single,
                           GroupAxis::hidden};
  for (int layer : {1, 2}) {
    EXPECT_TRUE(p.automatic(layer, Site::mlp_in_bwd));
    EXPECT_EQ(p.configured(layer, Site::mlp_in_bwd), block);
    EXPECT_EQ(p.resolve(layer, Site::mlp_in_bwd, 1 << 20), block);
  }
  // The default (auto, candidate taco) reaches layer 0's mlp.in.bwd and the model-wide sites;
  // the explicit taco rule is not automatic.
  EXPECT_TRUE(p.automatic(0, Site::mlp_in_bwd));
  EXPECT_EQ(p.configured(0, Site::mlp_in_bwd), taco_g(128));
  EXPECT_TRUE(p.automatic(-1, Site::dp_grad));
  EXPECT_FALSE(p.automatic(3, Site::attn_out_fwd));
  EXPECT_EQ(p.configured(3, Site::attn_out_fwd), taco_g(128));
  EXPECT_EQ(p.resolve(1, Site::mlp_in_bwd, 4095), CodecOptions{});  // min_bytes still first

  const std::string table = p.table();
  EXPECT_NE(table.find("  A auto: none or taco e4m3 g128 dual hidden, whichever measures faster"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  B taco e4m3 g128 dual hidden\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  C auto: none or fp8_block e4m3 g64 hidden"), std::string::npos) << table;
  EXPECT_NE(table.find("  1-2     A   A     B   A     A   C     A   A\n"), std::string::npos)
      << table;
}

// Without codec: auto nothing is automatic.
TEST(Policy, NoSiteIsAutomaticUnlessASpecSaysAuto) {
  CompressionSection c;
  c.default_spec = spec("taco");
  const CompressionPolicy p(c, 2, kDModel);
  EXPECT_FALSE(p.any_automatic());
  for (Site site : compressible_sites())
    EXPECT_FALSE(p.automatic(site_is_per_layer(site) ? 1 : -1, site));
}

TEST(Sites, NamesMatchTheConfigsOrder) {
  for (Site s : compressible_sites()) {
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
