// The experiment file contract (docs/design.md §9), what loads: the shipped files, the struct
// defaults, the YAML round trip, --set overrides, layer ranges. What is refused, and how it is
// told, is test_config_rejects.cpp.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/default_config.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_config_common.h"

namespace {

using taco::CodecKind;
using taco::Config;
using taco::Fp8Format;
using taco::Fp8Scales;
using taco::load_config_text;
using taco::test::kModel;
using taco::test::with_model;

void expect_same_codec(const taco::CodecSpec& a, const taco::CodecSpec& b) {
  EXPECT_EQ(a.codec, b.codec);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.codec_auto, b.codec_auto);
  EXPECT_EQ(a.candidate, b.candidate);
}

// Every field except `source` and the rules' `line` (where a rule was written, not what it says).
void expect_same_config(const Config& a, const Config& b) {
  EXPECT_EQ(a.run.name, b.run.name);
  EXPECT_EQ(a.run.dir, b.run.dir);
  EXPECT_EQ(a.model.n_layer, b.model.n_layer);
  EXPECT_EQ(a.model.n_head, b.model.n_head);
  EXPECT_EQ(a.model.d_model, b.model.d_model);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.parallel.tp, b.parallel.tp);
  EXPECT_EQ(a.parallel.pp, b.parallel.pp);
  EXPECT_EQ(a.parallel.dp, b.parallel.dp);
  EXPECT_EQ(a.parallel.sequence_parallel, b.parallel.sequence_parallel);
  EXPECT_EQ(a.parallel.microbatches, b.parallel.microbatches);
  EXPECT_EQ(a.parallel.zero, b.parallel.zero);
  EXPECT_EQ(a.parallel.backend, b.parallel.backend);
  EXPECT_EQ(a.parallel.staged_reduce, b.parallel.staged_reduce);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.micro_batch_size, b.train.micro_batch_size);
  EXPECT_EQ(a.train.global_batch_tokens, b.train.global_batch_tokens);
  // Doubles exactly: the emitter writes the shortest text that reads back as the same double.
  EXPECT_EQ(a.train.lr, b.train.lr);
  EXPECT_EQ(a.train.min_lr_frac, b.train.min_lr_frac);
  EXPECT_EQ(a.train.warmup_steps, b.train.warmup_steps);
  EXPECT_EQ(a.train.weight_decay, b.train.weight_decay);
  EXPECT_EQ(a.train.grad_clip, b.train.grad_clip);
  EXPECT_EQ(a.train.beta1, b.train.beta1);
  EXPECT_EQ(a.train.beta2, b.train.beta2);
  EXPECT_EQ(a.train.eps, b.train.eps);
  EXPECT_EQ(a.train.precision, b.train.precision);
  EXPECT_EQ(a.train.device, b.train.device);
  EXPECT_EQ(a.train.nonfinite, b.train.nonfinite);
  EXPECT_EQ(a.train.cuda_graph, b.train.cuda_graph);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.data.train, b.data.train);
  EXPECT_EQ(a.data.val, b.data.val);
  expect_same_codec(a.compression.default_spec, b.compression.default_spec);
  EXPECT_EQ(a.compression.min_bytes, b.compression.min_bytes);
  EXPECT_EQ(a.compression.calibrate_steps, b.compression.calibrate_steps);
  EXPECT_EQ(a.compression.chunks, b.compression.chunks);
  EXPECT_EQ(a.compression.auto_margin, b.compression.auto_margin);
  EXPECT_EQ(a.compression.auto_recheck_steps, b.compression.auto_recheck_steps);
  ASSERT_EQ(a.compression.rules.size(), b.compression.rules.size());
  for (size_t i = 0; i < a.compression.rules.size(); ++i) {
    EXPECT_EQ(a.compression.rules[i].layers, b.compression.rules[i].layers);
    EXPECT_EQ(a.compression.rules[i].sites, b.compression.rules[i].sites);
    expect_same_codec(a.compression.rules[i].spec, b.compression.rules[i].spec);
  }
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every, b.checkpoint.every);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
  EXPECT_EQ(a.log.every, b.log.every);
  EXPECT_EQ(a.log.eval_every, b.log.eval_every);
  EXPECT_EQ(a.log.eval_batches, b.log.eval_batches);
  EXPECT_EQ(a.log.all_ranks, b.log.all_ranks);
}

TEST(Config, TinyCpuFileLoadsAsTheStructDefaults) {
  const std::string path = taco::test::source_dir() + "/configs/tiny-cpu.yaml";
  const Config c = taco::load_config_file(path);
  EXPECT_EQ(c.source, path);
  expect_same_config(c, Config{});
}

TEST(Config, EveryShippedGpuConfigLoadsWithItsShape) {
  struct Shape {
    const char* file;
    int n_layer, n_head, d_model, seq_len;
  };
  for (const Shape& s :
       {Shape{"gpt2-124m.yaml", 12, 12, 768, 1024}, Shape{"gpt2-350m.yaml", 24, 16, 1024, 1024},
        Shape{"gpt-1.3b.yaml", 24, 16, 2048, 2048}, Shape{"gpt-2.7b.yaml", 32, 40, 2560, 2048}}) {
    const Config c = taco::load_config_file(taco::test::source_dir() + "/configs/" + s.file);
    EXPECT_EQ(c.model.n_layer, s.n_layer) << s.file;
    EXPECT_EQ(c.model.n_head, s.n_head) << s.file;
    EXPECT_EQ(c.model.d_model, s.d_model) << s.file;
    EXPECT_EQ(c.model.seq_len, s.seq_len) << s.file;
    const int head = c.model.d_model / c.model.n_head;
    EXPECT_TRUE(head == 64 || head == 128) << s.file << ": the fused attention's head sizes";
    EXPECT_EQ(c.train.device, "cuda") << s.file;
  }
}

TEST(Config, EmbeddedDefaultLoads) {
  const Config c = load_config_text(taco::kDefaultConfigYaml, taco::kDefaultConfigName);
  EXPECT_EQ(c.source, taco::kDefaultConfigName);
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.train.global_batch_tokens, 4096);
  EXPECT_EQ(c.compression.default_spec.codec, CodecKind::none);
}

TEST(Config, OnlyModelIsRequiredAndEverythingElseTakesTheStructDefault) {
  expect_same_config(load_config_text(kModel, "m.yaml"), Config{});
}

TEST(Config, RulesKeepTheirKeysAndLine) {
  const Config c =
      load_config_text(with_model("compression:\n"
                                  "  default: { codec: fp8_tensor, format: e5m2 }\n"
                                  "  rules:\n"
                                  "    - { layers: \"1-3\", sites: [attn.out.fwd, mlp.out.fwd],"
                                  " codec: taco, format: e4m3, group: auto, scales: e8m0 }\n"
                                  "    - { layers: 0, sites: mlp.in.bwd, codec: fp8_block }\n"
                                  "  calibrate_steps: 5\n"),  // group: auto needs it
                       "r.yaml");
  EXPECT_EQ(c.compression.default_spec.codec, CodecKind::fp8_tensor);
  EXPECT_EQ(c.compression.default_spec.format, Fp8Format::e5m2);
  ASSERT_EQ(c.compression.rules.size(), 2u);
  const auto& r0 = c.compression.rules[0];
  EXPECT_EQ(r0.layers, "1-3");
  EXPECT_EQ(r0.sites, (std::vector<std::string>{"attn.out.fwd", "mlp.out.fwd"}));
  EXPECT_EQ(r0.spec.codec, CodecKind::taco);
  EXPECT_EQ(r0.spec.group, 0);  // auto
  EXPECT_EQ(r0.spec.scales, Fp8Scales::e8m0);
  EXPECT_EQ(r0.line, 5);
  const auto& r1 = c.compression.rules[1];
  EXPECT_EQ(r1.layers, "0");
  EXPECT_EQ(r1.sites, std::vector<std::string>{"mlp.in.bwd"});
  EXPECT_EQ(r1.spec.group, 128);  // unspecified keys take the CodecSpec defaults
  EXPECT_EQ(r1.line, 6);
}

// codec: auto is a flag beside the candidate it may choose (taco unless the spec says), so the
// codec keys keep their meaning; it survives --set and the effective config.yaml.
TEST(Config, CodecAutoReadsAsAFlagWithItsCandidate) {
  const Config c = load_config_text(
      with_model("compression:\n  default: { codec: auto }\n  auto_margin: 0.25\n  rules:\n"
                 "    - { sites: [mlp.in.bwd], codec: auto, candidate: fp8_block, group: 64 }\n"),
      "auto.yaml");
  EXPECT_TRUE(c.compression.default_spec.codec_auto);
  EXPECT_EQ(c.compression.default_spec.candidate, CodecKind::taco);
  EXPECT_EQ(c.compression.auto_margin, 0.25);
  EXPECT_EQ(c.compression.auto_recheck_steps, 0);
  ASSERT_EQ(c.compression.rules.size(), 1u);
  EXPECT_TRUE(c.compression.rules[0].spec.codec_auto);
  EXPECT_EQ(c.compression.rules[0].spec.candidate, CodecKind::fp8_block);
  const std::string yaml = taco::config_to_yaml(c);
  EXPECT_NE(yaml.find("default:  { codec: auto, candidate: taco,"), std::string::npos) << yaml;
  expect_same_config(load_config_text(yaml, "again.yaml"), c);

  // --set turns it on and off again; a spec without auto writes no candidate.
  const Config on = load_config_text(kModel, "m.yaml", {"compression.default.codec=auto"});
  EXPECT_TRUE(on.compression.default_spec.codec_auto);
  const Config off = load_config_text(with_model("compression: { default: { codec: auto } }\n"),
                                      "m.yaml", {"compression.default.codec=taco"});
  EXPECT_FALSE(off.compression.default_spec.codec_auto);
  EXPECT_EQ(off.compression.default_spec.codec, CodecKind::taco);
  EXPECT_EQ(taco::config_to_yaml(off).find("candidate"), std::string::npos);
}

TEST(Config, CompressionChunksAreAutoOrAPieceCount) {
  EXPECT_EQ(load_config_text(kModel, "m.yaml").compression.chunks, 0);  // auto by default
  EXPECT_EQ(
      load_config_text(with_model("compression: { chunks: auto }\n"), "a.yaml").compression.chunks,
      0);
  EXPECT_EQ(
      load_config_text(with_model("compression: { chunks: 4 }\n"), "c.yaml").compression.chunks, 4);
  EXPECT_EQ(load_config_text(kModel, "m.yaml", {"compression.chunks=3"}).compression.chunks, 3);
  Config c;
  c.compression.chunks = 4;
  EXPECT_NE(taco::config_to_yaml(c).find("  chunks: 4\n"), std::string::npos);
  EXPECT_NE(taco::config_to_yaml(Config{}).find("  chunks: auto\n"), std::string::npos);
}

// A valid config with every field away from its default, drawn fresh each run.
Config random_config(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  Config c;
  c.run = {"exp \"quoted\" #1", "out dir/runs"};
  c.model = {6, 8, 256, 64, 50257};
  c.parallel = {2, 3, 2, true, 4, 1, "mpi"};
  c.train.steps = 1 + static_cast<int>(rng() % 100000);
  c.train.micro_batch_size = 4;
  c.train.global_batch_tokens = int64_t{4} * 64 * 2 * (1 + rng() % 64);
  c.train.lr = uniform(1e-6, 1e-2);
  c.train.min_lr_frac = uniform(0, 1);
  c.train.warmup_steps = static_cast<int>(rng() % 1000);
  c.train.weight_decay = uniform(0, 0.3);
  c.train.grad_clip = uniform(0.1, 10);
  c.train.beta1 = uniform(0.8, 0.99);
  c.train.beta2 = uniform(0.9, 0.9999);
  c.train.eps = uniform(1e-12, 1e-6);
  c.train.precision = "bf16";
  c.train.device = "cpu";
  c.train.seed = rng();  // often above 2^63: the full uint64 range must survive
  c.train.nonfinite = "skip";
  c.train.cuda_graph = "off";  // not the default
  c.data = {"data/a b/train_*.bin", ""};
  c.compression.default_spec = {CodecKind::fp8_block, Fp8Format::e5m2, 64, Fp8Scales::single};
  c.compression.min_bytes = 1 << 20;
  c.compression.calibrate_steps = 7;
  c.compression.chunks = static_cast<int>(rng() % 9);  // 0 = auto
  c.compression.auto_margin = uniform(0, 0.5);
  c.compression.auto_recheck_steps = static_cast<int>(rng() % 1000);
  // Model-wide sites need a rule over every layer (6 here): "0-5" names them all.
  taco::CompressionRule rule;
  rule.layers = "0-5";
  rule.sites = {"attn.out.fwd", "mlp.out.fwd", "attn.in.bwd", "mlp.in.bwd",
                "head.in.fwd",  "embed.fwd",   "pp.act",      "dp.grad"};
  rule.spec = {CodecKind::taco, Fp8Format::e4m3, 0, Fp8Scales::dual};
  taco::CompressionRule some_layers;
  some_layers.layers = "0,2-3";
  some_layers.sites = {"attn.out.fwd", "mlp.in.bwd"};
  some_layers.spec = {CodecKind::fp8_tensor, Fp8Format::e5m2, 256, Fp8Scales::e8m0};
  taco::CompressionRule automatic;  // codec: auto with fp8_block as its candidate
  automatic.layers = "1";
  automatic.sites = {"mlp.in.bwd"};
  automatic.spec = {CodecKind::none,     Fp8Format::e4m3, 64, Fp8Scales::single, true,
                    CodecKind::fp8_block};
  c.compression.rules = {rule, some_layers, automatic, taco::CompressionRule{}};
  c.checkpoint = {"ckpt: here", 50, 2, "auto"};
  c.log = {5, 25, 3, true};
  return c;
}

TEST(Config, YamlRoundTripKeepsEveryField) {
  const uint64_t seed = taco::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Config c = random_config(seed);
  const std::string yaml = taco::config_to_yaml(c);
  SCOPED_TRACE(yaml);
  expect_same_config(load_config_text(yaml, "roundtrip.yaml"), c);
}

TEST(Config, EmittedYamlIsStableAndFitsOneHundredColumns) {
  const std::string yaml = taco::config_to_yaml(random_config(taco::test::fresh_seed()));
  EXPECT_EQ(taco::config_to_yaml(load_config_text(yaml, "a.yaml")), yaml);
  size_t start = 0;
  while (start < yaml.size()) {
    const size_t end = yaml.find('\n', start);
    EXPECT_LE(end - start, 100u) << yaml.substr(start, end - start);
    start = end + 1;
  }
  const std::string defaults = taco::config_to_yaml(Config{});
  EXPECT_NE(defaults.find("run:        { name: tiny-cpu, dir: runs }"), std::string::npos)
      << defaults;
  EXPECT_NE(defaults.find("rules: []"), std::string::npos) << defaults;
}

TEST(Config, OverridesApplyInOrderAsIfWrittenInTheFile) {
  const Config c = load_config_text(
      with_model(
          "train: { lr: 1.0e-3 }\ncompression:\n  rules:\n    - { layers: all, codec: taco }\n"),
      "o.yaml",
      {"train.lr=1e-2", "train.lr=3e-4", "parallel.tp=2", "compression.default.codec=taco",
       "data.train=\"a b\"", "data.val=x y", "checkpoint.dir=", "log.all_ranks=true",
       "compression.rules.0.group=auto", "compression.rules.0.sites=[mlp.out.fwd, attn.out.fwd]",
       "compression.calibrate_steps=2"});
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_EQ(c.compression.default_spec.codec, CodecKind::taco);
  EXPECT_EQ(c.data.train, "a b");
  EXPECT_EQ(c.data.val, "x y");
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_TRUE(c.log.all_ranks);
  ASSERT_EQ(c.compression.rules.size(), 1u);
  EXPECT_EQ(c.compression.rules[0].spec.codec, CodecKind::taco);
  EXPECT_EQ(c.compression.rules[0].spec.group, 0);
  EXPECT_EQ(c.compression.rules[0].sites,
            (std::vector<std::string>{"mlp.out.fwd", "attn.out.fwd"}));
}

TEST(Config, OverrideCanReplaceAListAndCreateMissingSections) {
  const Config c = load_config_text(
      "", "empty.yaml",
      {"model={n_layer: 2, n_head: 2, d_model: 64, seq_len: 32, vocab_size: 256}",
       "train.global_batch_tokens=256",
       "compression.rules=[{layers: \"0-1\", sites: [mlp.out.fwd], codec: fp8_block, group: 64}]"});
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.train.global_batch_tokens, 256);
  ASSERT_EQ(c.compression.rules.size(), 1u);
  EXPECT_EQ(c.compression.rules[0].spec.codec, CodecKind::fp8_block);
  EXPECT_EQ(c.compression.rules[0].spec.group, 64);
  EXPECT_EQ(c.compression.rules[0].line, 0);  // written by --set, not on a line of the file
}

TEST(Config, LayerRangesParse) {
  EXPECT_EQ(taco::parse_layer_ranges("all", 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(taco::parse_layer_ranges("3", 4), (std::vector<int>{3}));
  EXPECT_EQ(taco::parse_layer_ranges("1-3", 4), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(taco::parse_layer_ranges("0,2,5-7", 8), (std::vector<int>{0, 2, 5, 6, 7}));
  EXPECT_EQ(taco::parse_layer_ranges(" 5 - 6 , 1,2-3,2 ", 8), (std::vector<int>{1, 2, 3, 5, 6}));
  for (const char* bad : {"", "1-", "-1", "a", "3-1", "1,,2", "1.5", "4", "0-4", "all,1"}) {
    EXPECT_THROW(taco::parse_layer_ranges(bad, 4), taco::UserError) << "\"" << bad << "\"";
  }
}

TEST(Config, SiteNamesIndexThemselves) {
  EXPECT_EQ(taco::kSiteNames.size(), 15u);
  for (int i = 0; i < taco::kNumSites; ++i) EXPECT_EQ(taco::site_index(taco::kSiteNames[i]), i);
  EXPECT_EQ(taco::site_index("attn.out"), -1);
  EXPECT_EQ(taco::site_index("pp.act.fwd"), -1);
}

}  // namespace
