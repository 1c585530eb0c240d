// The experiment file contract (docs/design.md §9), what is refused: every bad input gets one line
// "FILE:LINE: KEY: what is wrong; expected WHAT" and exit code 2. What loads is
// test_config_accepts.cpp.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_config_common.h"

namespace {

using taco::test::kModel;
using taco::test::rejection;
using taco::test::with_model;

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
  {"BadCudaGraph", with_model("train: { cuda_graph: on }\n"), {}, "bad.yaml:2: ",
   {"train.cuda_graph: unknown value 'on'", "expected one of auto, off"}},
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
