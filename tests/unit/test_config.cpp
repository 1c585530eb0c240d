// The experiment file contract (docs/design.md §9): what loads, what round-trips, and the one-line
// error every bad input gets ("FILE:LINE: KEY: what is wrong; expected WHAT", exit code 2).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/config/default_config.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"

namespace {

using taco::CodecKind;
using taco::Config;
using taco::Fp8Format;
using taco::Fp8Scales;
using taco::load_config_text;

const std::string kModel =
    "model: { n_layer: 4, n_head: 4, d_model: 128, seq_len: 128, vocab_size: 256 }\n";

// kModel on line 1, `rest` from line 2 on.
std::string with_model(const std::string& rest) { return kModel + rest; }

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

// The message of the UserError that loading `yaml` as "bad.yaml" must throw.
std::string rejection(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_text(yaml, "bad.yaml", overrides);
  } catch (const taco::UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return "";
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

TEST(Config, FileErrorsNameThePath) {
  const std::string path = taco::test::scratch_dir("config_file_errors") + "/exp.yaml";
  taco::test::write_file(path, with_model("train: { steps: 0 }\n"));
  try {
    taco::load_config_file(path);
    FAIL() << "steps: 0 accepted";
  } catch (const taco::UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ":2: train.steps: ", 0), 0u) << e.what();
  }
}

TEST(Config, MissingFileSaysItCannotOpenIt) {
  const std::string path = taco::test::scratch_dir("config_missing") + "/nope.yaml";
  try {
    taco::load_config_file(path);
    FAIL() << "missing file accepted";
  } catch (const taco::UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()), path + ": cannot open config file: No such file or directory");
  }
  EXPECT_THROW(taco::load_config_file(taco::test::scratch_dir("config_dir")), taco::UserError);
}

TEST(Config, UnknownKeyFarFromEveryKnownKeyGetsNoSuggestion) {
  // "foo" is two edits from "log", but that is most of the word: no suggestion.
  EXPECT_EQ(rejection(with_model("foo: 1\n")).find("did you mean"), std::string::npos);
  const std::string m = rejection(with_model("log: { colour: red }\n"));
  EXPECT_NE(m.find("bad.yaml:2: log.colour: unknown key; expected one of every,"),
            std::string::npos)
      << m;
}

// One bad input each: the message starts with its place and holds the key, what is wrong and what
// is expected.
struct BadInput {
  const char* name;
  std::string yaml;
  std::vector<std::string> overrides;
  std::string where;                  // the message starts with this
  std::vector<std::string> contains;  // key, problem, expectation
};

void PrintTo(const BadInput& input, std::ostream* os) { *os << input.name; }

class ConfigRejects : public testing::TestWithParam<BadInput> {};

TEST_P(ConfigRejects, WithOneLineNamingPlaceKeyAndExpectation) {
  const BadInput& c = GetParam();
  const std::string m = rejection(c.yaml, c.overrides);
  EXPECT_EQ(m.rfind(c.where, 0), 0u) << m;
  for (const auto& part : c.contains)
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
}

// Model lines with one size changed, on line 1.
std::string model_with(const std::string& key_value) {
  std::string yaml = kModel;
  const std::string key = key_value.substr(0, key_value.find(':') + 1);
  const size_t at = yaml.find(key);
  yaml.replace(at, yaml.find_first_of(",}", at) - at, key_value);
  return yaml;
}

// One bad input per entry (clang-format would put each field on its own line).
// clang-format off
const std::vector<BadInput> kBadInputs = {
  {"UnknownSection", with_model("trian: { steps: 3 }\n"), {}, "bad.yaml:2: ",
   {"trian: unknown key (did you mean train?)", "expected one of run, model, parallel"}},
  {"UnknownKeyTransposed", with_model("train: { stesp: 3 }\n"), {}, "bad.yaml:2: ",
   {"train.stesp: unknown key (did you mean train.steps?)", "expected one of steps,"}},
  {"UnknownKeyInSection", with_model("train:\n  steps: 3\n  lrr: 0.1\n"), {}, "bad.yaml:4: ",
   {"train.lrr: unknown key (did you mean train.lr?)", "expected one of steps,"}},
  {"DuplicateKey", with_model("log:\n  every: 3\n  every: 4\n"), {}, "bad.yaml:4: ",
   {"log.every: duplicate key", "expected each key at most once"}},
  {"SectionNotAMap", with_model("train: 5\n"), {}, "bad.yaml:2: ",
   {"train: got '5'", "expected a map { steps,"}},
  {"TopLevelNotAMap", "- a\n- b\n", {}, "bad.yaml:1: ", {"(top level)", "expected sections"}},
  {"IntegerGivenWord", "# line 1\n" + model_with("n_layer: four"), {}, "bad.yaml:2: ",
   {"model.n_layer: 'four' is not an integer", "expected an integer"}},
  {"ValueWithLineBreakStaysOneLine", model_with("n_layer: \"4\\n5\""), {}, "bad.yaml:1: ",
   {"model.n_layer: '4\\n5' is not an integer"}},
  {"IntegerOutOfRange", model_with("n_layer: 99999999999"), {}, "bad.yaml:1: ",
   {"model.n_layer: '99999999999' is out of range", "expected an integer from"}},
  {"BooleanGivenMaybe", with_model("parallel:\n  tp: 1\n  sequence_parallel: maybe\n"), {},
   "bad.yaml:4: ",
   {"parallel.sequence_parallel: 'maybe' is not a boolean", "expected true or false"}},
  {"NumberGivenWord", with_model("train: { lr: fast }\n"), {}, "bad.yaml:2: ",
   {"train.lr: 'fast' is not a finite number", "expected a number"}},
  {"NegativeSeed", with_model("train: { seed: -1 }\n"), {}, "bad.yaml:2: ",
   {"train.seed: '-1' is not a non-negative integer", "expected an integer from 0"}},
  {"MissingModel", "train: { steps: 3 }\n", {}, "bad.yaml:1: ",
   {"model: missing required section", "expected model: { n_layer: N"}},
  {"MissingModelKey",
   "run: { name: x }\nmodel: { n_layer: 4, n_head: 4, d_model: 128, seq_len: 128 }\n", {},
   "bad.yaml:2: ", {"model.vocab_size: missing required key", "expected an integer"}},
  {"BadPrecision", with_model("train: { precision: fp16 }\n"), {}, "bad.yaml:2: ",
   {"train.precision: unknown value 'fp16'", "expected one of auto, fp32, bf16"}},
  {"BadDevice", with_model("train: { device: tpu }\n"), {}, "bad.yaml:2: ",
   {"train.device: unknown value 'tpu'", "expected one of auto, cpu, cuda"}},
  {"BadBackend", with_model("parallel: { backend: gloo }\n"), {}, "bad.yaml:2: ",
   {"parallel.backend: unknown value 'gloo'", "expected one of auto, nccl, mpi"}},
  {"BadStagedReduce", with_model("parallel: { staged_reduce: ring }\n"), {}, "bad.yaml:2: ",
   {"parallel.staged_reduce: unknown value 'ring'", "expected one of auto, native, two_shot"}},
  {"BadCodec", with_model("compression:\n  default: { codec: zstd }\n"), {}, "bad.yaml:3: ",
   {"compression.default.codec: unknown value 'zstd'",
    "expected one of none, fp8_tensor, fp8_block, taco"}},
  {"BadFormat", with_model("compression:\n  rules:\n    - { codec: taco, format: e3m4 }\n"), {},
   "bad.yaml:4: ",
   {"compression.rules[0].format: unknown value 'e3m4'", "expected one of e4m3, e5m2"}},
  {"BadScales", with_model("compression: { default: { codec: taco, scales: triple } }\n"), {},
   "bad.yaml:2: ",
   {"compression.default.scales: unknown value 'triple'", "expected one of dual, single, e8m0"}},
  {"BadResume", with_model("checkpoint: { resume: maybe }\n"), {}, "bad.yaml:2: ",
   {"checkpoint.resume: unknown value 'maybe'", "expected one of false, true, auto"}},
  {"NegativeKeep", with_model("checkpoint: { keep: -1 }\n"), {}, "bad.yaml:2: ",
   {"checkpoint.keep: -1 is too small", "expected an integer >= 0"}},
  {"ResumeWithoutCheckpoints", with_model("checkpoint: { keep: 0, resume: auto }\n"), {},
   "bad.yaml:2: ",
   {"checkpoint.resume: 'auto' with checkpoint.keep = 0", "checkpoint.keep >= 1"}},
  {"HeadsDoNotDivideWidth", model_with("n_head: 3"), {}, "bad.yaml:1: ",
   {"model.d_model: 128 is not divisible by model.n_head = 3", "expected a multiple of n_head"}},
  {"ZeroLayers", model_with("n_layer: 0"), {}, "bad.yaml:1: ",
   {"model.n_layer: 0 is too small", "expected an integer >= 1"}},
  {"NegativeWidth", model_with("d_model: -128"), {}, "bad.yaml:1: ",
   {"model.d_model: -128 is too small", "expected an integer >= 1"}},
  {"ZeroSeqLen", model_with("seq_len: 0"), {}, "bad.yaml:1: ",
   {"model.seq_len: 0 is too small", "expected an integer >= 1"}},
  {"VocabOfOne", model_with("vocab_size: 1"), {}, "bad.yaml:1: ",
   {"model.vocab_size: 1 is too small", "expected an integer >= 2"}},
  {"ZeroMicroBatch", with_model("train: { micro_batch_size: 0 }\n"), {}, "bad.yaml:2: ",
   {"train.micro_batch_size: 0 is too small", "expected an integer >= 1"}},
  {"ZeroTp", with_model("parallel: { tp: 0 }\n"), {}, "bad.yaml:2: ",
   {"parallel.tp: 0 is too small", "expected an integer >= 1"}},
  {"ZeroPp", with_model("parallel: { pp: 0 }\n"), {}, "bad.yaml:2: ",
   {"parallel.pp: 0 is too small", "expected an integer >= 1"}},
  {"ZeroDp", with_model("parallel: { dp: 0 }\n"), {}, "bad.yaml:2: ",
   {"parallel.dp: 0 is too small", "expected an integer >= 1"}},
  {"ZeroMicrobatches", with_model("parallel: { microbatches: 0 }\n"), {}, "bad.yaml:2: ",
   {"parallel.microbatches: 0 is too small", "expected an integer >= 1"}},
  {"ZeroStageTwo", with_model("parallel: { zero: 2 }\n"), {}, "bad.yaml:2: ",
   {"parallel.zero: 2 is not a ZeRO stage", "expected 0 (replicated optimizer state) or 1"}},
  {"TpDoesNotDivideHeads", with_model("parallel: { tp: 3 }\n"), {}, "bad.yaml:2: ",
   {"parallel.tp: 3 does not divide model.n_head = 4", "expected a divisor of model.n_head"}},
  {"PpDoesNotDivideLayers", with_model("parallel: { pp: 3 }\n"), {}, "bad.yaml:2: ",
   {"parallel.pp: 3 does not divide model.n_layer = 4", "expected a divisor of model.n_layer"}},
  {"SequenceParallelSplitsSequenceUnevenly",
   model_with("seq_len: 126") + "parallel: { tp: 4, sequence_parallel: true }\n", {},
   "bad.yaml:2: ",
   {"parallel.sequence_parallel: true, but model.seq_len = 126",
    "expected model.seq_len a multiple of parallel.tp"}},
  {"ZeroLr", with_model("train: { lr: 0 }\n"), {}, "bad.yaml:2: ",
   {"train.lr: 0 is not positive", "expected a number > 0"}},
  {"NegativeLr", with_model("train:\n  lr: -1e-3\n"), {}, "bad.yaml:3: ",
   {"train.lr: -0.001 is not positive", "expected a number > 0"}},
  {"MinLrFracAboveOne", with_model("train: { min_lr_frac: 1.5 }\n"), {}, "bad.yaml:2: ",
   {"train.min_lr_frac: 1.5 is out of range", "expected a number in [0, 1]"}},
  {"MinLrFracNegative", with_model("train: { min_lr_frac: -0.1 }\n"), {}, "bad.yaml:2: ",
   {"train.min_lr_frac: -0.1 is out of range", "expected a number in [0, 1]"}},
  {"NegativeWarmup", with_model("train: { warmup_steps: -1 }\n"), {}, "bad.yaml:2: ",
   {"train.warmup_steps: -1 is too small", "expected an integer >= 0"}},
  {"ZeroSteps", with_model("train: { steps: 0 }\n"), {}, "bad.yaml:2: ",
   {"train.steps: 0 is too small", "expected an integer >= 1"}},
  {"GlobalBatchNotWholeMicroBatches",
   with_model("parallel: { dp: 2 }\ntrain: { micro_batch_size: 4, global_batch_tokens: 8000 }\n"),
   {},
   "bad.yaml:3: ", {"train.global_batch_tokens: 8000 is not a whole number of micro-batches",
                    "4 * 128 * 2 = 1024", "expected a multiple of 1024"}},
  {"ZeroLogEvery", with_model("log: { every: 0 }\n"), {}, "bad.yaml:2: ",
   {"log.every: 0 is too small", "expected an integer >= 1"}},
  {"GroupNotAPowerOfTwo", with_model("compression: { default: { codec: taco, group: 100 } }\n"), {},
   "bad.yaml:2: ", {"compression.default.group: '100' is not a supported group size",
                    "expected 32, 64, 128, 256, 512 or auto"}},
  {"GroupZero", with_model("compression:\n  rules:\n    - { codec: taco, group: 0 }\n"), {},
   "bad.yaml:4: ", {"compression.rules[0].group: '0'", "expected 32, 64, 128, 256, 512 or auto"}},
  {"GroupDoesNotDivideWidth",
   with_model("compression: { default: { codec: fp8_block, group: 256 } }\n"), {}, "bad.yaml:2: ",
   {"compression.default.group: 256 does not divide model.d_model = 128",
    "expected a group size that divides d_model, or auto"}},
  {"UnknownSite", with_model("compression:\n  rules:\n    - layers: \"1-3\"\n      sites:\n"
                             "        - attn.out.fwd\n        - attn.out\n"),
   {}, "bad.yaml:7: ", {"compression.rules[0].sites[1]: unknown site 'attn.out'",
                        "expected one of embed.fwd, embed.bwd, attn.in.fwd"}},
  {"NeverCompressedSite",
   with_model("compression:\n  rules:\n    - layers: all\n      sites: [mlp.out.fwd, sp.grad]\n"),
   {}, "bad.yaml:5: ",
   {"compression.rules[0].sites[1]: sp.grad is never compressed",
    "expected one of embed.fwd, embed.bwd, attn.in.fwd"}},
  {"LayerRangeOpen",
   with_model("compression:\n  rules:\n    - { layers: \"1-\", codec: taco }\n"), {},
   "bad.yaml:4: ", {"compression.rules[0].layers: \"1-\" in \"1-\" is not a layer or range",
                    "expected \"all\", a layer \"3\", a range \"1-3\" or a list \"0,2,5-7\" "
                    "of layers 0..3"}},
  {"LayerRangeBackwards", with_model("compression:\n  rules:\n    - { layers: \"3-1\" }\n"), {},
   "bad.yaml:4: ",
   {"compression.rules[0].layers: range \"3-1\" runs backwards", "expected \"all\""}},
  {"LayerRangeEmpty", with_model("compression:\n  rules:\n    - { layers: \"\" }\n"), {},
   "bad.yaml:4: ", {"compression.rules[0].layers: empty layer list", "expected \"all\""}},
  {"LayerBeyondModel", with_model("compression:\n  rules:\n    - { layers: \"0,2-4\" }\n"), {},
   "bad.yaml:4: ", {"compression.rules[0].layers: \"0,2-4\" names layer 4 but model.n_layer = 4",
                    "of layers 0..3"}},
  // Checked by the policy (compression/policy.cpp) and, since the config builds it, at load time.
  {"ModelWideSiteOnSomeLayers",
   with_model("compression:\n  rules:\n    - layers: \"0-1\"\n"
              "      sites: [mlp.out.fwd, dp.grad]\n"),
   {}, "bad.yaml:5: ",
   {"compression.rules[0].sites[1]: dp.grad belongs to no layer, so a rule naming it needs "
    "layers: all", "expected layers: all"}},
  {"ModelWideSiteOnSomeLayersOverride", kModel,
   {"compression.rules=[{layers: \"1\", sites: [pp.act]}]"},
   "bad.yaml: --set compression.rules: ",
   {"compression.rules[0].sites[0]: pp.act belongs to no layer"}},
  {"GroupAutoWithoutCalibrationSteps",
   with_model("compression:\n  calibrate_steps: 0\n  rules:\n"
              "    - { layers: all, codec: taco, group: auto }\n"),
   {}, "bad.yaml:3: ",
   {"compression.calibrate_steps: 0, but compression.rules[0] says group: auto",
    "expected an integer >= 1"}},
  {"GroupAutoDefaultWithoutCalibrationSteps",
   with_model("compression:\n  default: { codec: fp8_block, group: auto }\n"), {},
   "bad.yaml:2: ",
   {"compression.calibrate_steps: 0, but compression.default says group: auto",
    "expected an integer >= 1"}},
  {"NegativeMinBytes", with_model("compression: { min_bytes: -1 }\n"), {}, "bad.yaml:2: ",
   {"compression.min_bytes: -1 is negative", "expected an integer >= 0"}},
  {"ChunksZero", with_model("compression: { chunks: 0 }\n"), {}, "bad.yaml:2: ",
   {"compression.chunks: '0' is not a number of pipeline pieces",
    "expected an integer >= 1 or auto"}},
  {"ChunksWord", with_model("compression:\n  chunks: many\n"), {}, "bad.yaml:3: ",
   {"compression.chunks: 'many' is not a number of pipeline pieces",
    "expected an integer >= 1 or auto"}},
  {"ChunksOverride", kModel, {"compression.chunks=-2"}, "bad.yaml: --set compression.chunks: ",
   {"compression.chunks: '-2' is not a number of pipeline pieces"}},
  // codec: auto (compression/policy.h): candidate, margin and re-check steps.
  {"AutoCandidateNone",
   with_model("compression:\n  default: { codec: auto, candidate: none }\n"), {},
   "bad.yaml:3: ", {"compression.default.candidate: none is no candidate for codec: auto",
                    "expected fp8_tensor, fp8_block or taco"}},
  {"AutoCandidateAuto",
   with_model("compression:\n  rules:\n    - { codec: auto, candidate: auto }\n"), {},
   "bad.yaml:4: ", {"compression.rules[0].candidate: unknown value 'auto'",
                    "expected one of fp8_tensor, fp8_block, taco"}},
  {"AutoCandidateTypo",
   with_model("compression:\n  default: { codec: auto, candidat: fp8_block }\n"), {},
   "bad.yaml:3: ", {"compression.default.candidat: unknown key (did you mean "
                    "compression.default.candidate?)", "expected one of codec, candidate"}},
  {"AutoWithGroupAuto",
   with_model("compression:\n  calibrate_steps: 2\n  rules:\n"
              "    - { layers: all, codec: auto, group: auto }\n"), {},
   "bad.yaml:5: ", {"compression.rules[0].group: auto cannot be combined with codec: auto",
                    "expected 32, 64, 128, 256 or 512"}},
  {"AutoMarginOne", with_model("compression: { auto_margin: 1 }\n"), {}, "bad.yaml:2: ",
   {"compression.auto_margin: 1 is out of range", "expected a number in [0, 1)"}},
  {"AutoMarginNegativeOverride", kModel, {"compression.auto_margin=-0.5"},
   "bad.yaml: --set compression.auto_margin: ",
   {"compression.auto_margin: -0.5 is out of range", "expected a number in [0, 1)"}},
  {"AutoMarginWord", with_model("compression:\n  auto_margin: lots\n"), {}, "bad.yaml:3: ",
   {"compression.auto_margin: 'lots' is not a finite number", "expected a number"}},
  {"AutoRecheckNegative", with_model("compression:\n  auto_recheck_steps: -5\n"), {},
   "bad.yaml:3: ", {"compression.auto_recheck_steps: -5 is negative",
                    "expected an integer >= 0"}},
  {"RulesNotAList", with_model("compression: { rules: { codec: taco } }\n"), {}, "bad.yaml:2: ",
   {"compression.rules: got a map", "expected a list of rules"}},
  {"YamlSyntax", with_model("data: { train: \"x\" ] }\n"), {}, "bad.yaml:2: ",
   {"YAML syntax error", "expected valid YAML"}},
  {"OverrideUnknownKey", kModel, {"train.lrr=3e-4"}, "bad.yaml: --set train.lrr: ",
   {"train.lrr: unknown key (did you mean train.lr?)", "expected one of steps"}},
  {"OverrideUnknownSection", kModel, {"trainn.lr=3e-4"}, "bad.yaml: --set trainn.lr: ",
   {"trainn: unknown key (did you mean train?)", "expected one of run, model"}},
  {"OverrideWrongType", kModel, {"model.n_layer=four"}, "bad.yaml: --set model.n_layer: ",
   {"model.n_layer: 'four' is not an integer", "expected an integer"}},
  {"OverrideBreaksADivision", kModel, {"parallel.tp=3"}, "bad.yaml: --set parallel.tp: ",
   {"parallel.tp: 3 does not divide model.n_head = 4", "expected a divisor of model.n_head"}},
  {"OverrideWithoutEquals", kModel, {"train.lr"}, "bad.yaml: --set train.lr: ",
   {"no '=' in the override", "expected --set key.path=value"}},
  {"OverrideValueNotYaml", kModel, {"train.lr=[1"}, "bad.yaml: --set train.lr: ",
   {"cannot parse value '[1'", "expected a YAML value"}},
  {"OverrideIndexWithoutList", kModel, {"compression.rules.0.codec=taco"},
   "bad.yaml: --set compression.rules.0.codec: ",
   {"compression.rules is not a list to index", "expected an index into an existing list"}},
  {"OverrideIndexPastListEnd", with_model("compression: { rules: [{ codec: taco }] }\n"),
   {"compression.rules.1.codec=taco"}, "bad.yaml: --set compression.rules.1.codec: ",
   {"compression.rules is a list of 1 and '1' is not an index in it", "expected an index 0..1"}},
};
// clang-format on

INSTANTIATE_TEST_SUITE_P(BadInput, ConfigRejects, testing::ValuesIn(kBadInputs),
                         [](const testing::TestParamInfo<BadInput>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
