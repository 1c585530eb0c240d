// Every YAML file in configs/ (configs/README.md): it loads with the real config loader, its
// compression rules build a policy and its layout passes the process grid's checks for its own
// world size; each taco flavour resolves every tensor-parallel site of every layer to TACO E4M3,
// G = 128, dual scales (the auto one to a calibrated group) and leaves the other sites alone; and
// a flavour differs from its base file only where it says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "compression/codec_options.h"
#include "compression/policy.h"
#include "engine/config/config.h"
#include "parallel/process_grid.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

namespace fs = std::filesystem;

std::string configs_dir() { return test::source_dir() + "/configs"; }

std::vector<std::string> yaml_files() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(configs_dir()))
    if (e.path().extension() == ".yaml") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The sites that carry tensor-parallel traffic (docs/design.md §3): all but pp.* and dp.grad.
const std::vector<std::string> kTensorParallelSites = {
    "embed.fwd",  "embed.bwd",  "attn.in.fwd", "attn.in.bwd", "attn.out.fwd", "attn.out.bwd",
    "mlp.in.fwd", "mlp.in.bwd", "mlp.out.fwd", "mlp.out.bwd", "head.in.fwd",  "head.in.bwd"};
const std::vector<std::string> kOtherSites = {"pp.act", "pp.grad", "dp.grad"};

Site site(const std::string& name) {
  Site s{};
  EXPECT_TRUE(parse_site(name, &s)) << name;
  return s;
}

CodecOptions taco_g128_dual(int group = 128) {
  CodecOptions o;
  o.kind = CodecKind::taco;
  o.format = Fp8Format::e4m3;
  o.group = group;
  o.scales = Fp8Scales::dual;
  o.axis = GroupAxis::hidden;
  return canonical(o);
}

TEST(ShippedConfigs, EveryYamlLoadsBuildsItsPolicyAndFitsItsOwnWorldSize) {
  const std::vector<std::string> files = yaml_files();
  // The files configs/README.md describes; a new one is checked too, by the loop.
  for (const char* expected :
       {"tiny-cpu.yaml", "gpt2-124m.yaml", "gpt2-350m.yaml", "gpt-1.3b.yaml", "gpt-2.7b.yaml",
        "tiny-cpu-taco.yaml", "gpt2-124m-taco.yaml", "gpt2-350m-taco.yaml", "gpt-1.3b-taco.yaml",
        "gpt-2.7b-taco.yaml", "tiny-cpu-taco-auto.yaml", "gpt-1.3b-tp8-taco.yaml",
        "gpt-1.3b-tp4-pp2-taco.yaml"})
    EXPECT_NE(std::find(files.begin(), files.end(), expected), files.end()) << expected;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    const std::string path = configs_dir() + "/" + f;
    Config c;
    ASSERT_NO_THROW(c = load_config_file(path));
    EXPECT_EQ(c.run.name + ".yaml", f) << "run.name names the file, so runs do not collide";
    EXPECT_NO_THROW(CompressionPolicy(c.compression, c.model.n_layer, c.model.d_model, path));
    const auto& p = c.parallel;
    EXPECT_NO_THROW(validate_grid({p.tp, p.pp, p.dp}, p.tp * p.pp * p.dp,
                                  {c.model.n_head, c.model.d_model, c.model.n_layer,
                                   c.model.vocab_size, c.model.seq_len, p.sequence_parallel}));
  }
}

TEST(ShippedConfigs, TacoFlavoursCompressEveryTensorParallelSiteWithTacoG128Dual) {
  int checked = 0;
  for (const std::string& f : yaml_files()) {
    if (f.find("-taco") == std::string::npos) continue;
    SCOPED_TRACE(f);
    const Config c = load_config_file(configs_dir() + "/" + f);
    const CompressionPolicy policy(c.compression, c.model.n_layer, c.model.d_model, f);
    const bool calibrated = f.find("-auto") != std::string::npos;
    const CodecOptions want = taco_g128_dual(calibrated ? kAutoGroup : 128);
    EXPECT_EQ(describe(want), calibrated ? "taco e4m3 auto dual" : "taco e4m3 g128 dual hidden");
    for (int layer = 0; layer < c.model.n_layer; ++layer) {
      for (const std::string& s : kTensorParallelSites) {
        EXPECT_EQ(policy.configured(layer, site(s)), want) << s << " layer " << layer;
        // What a 1 MiB message is sent with: the calibrated group stands in as G = 128 until
        // calibration has run.
        EXPECT_EQ(policy.resolve(layer, site(s), 1 << 20), taco_g128_dual())
            << s << " layer " << layer;
      }
      for (const std::string& s : kOtherSites)
        EXPECT_EQ(policy.configured(layer, site(s)).kind, CodecKind::none) << s;
    }
    if (calibrated) {
      EXPECT_GE(policy.calibrate_steps(), 1);
      EXPECT_EQ(policy.sites_to_calibrate().size(), kTensorParallelSites.size());
      EXPECT_GE(c.parallel.tp, 2) << "calibration needs tensor-parallel traffic";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// A flavour is its base file plus the compression rule (and, for the multi-rank examples, the
// layout): a none and a taco run from the two files differ only by the codec.
TEST(ShippedConfigs, EachFlavourKeepsItsBasesModelDataAndSchedule) {
  struct Pair {
    const char *flavour, *base;
    bool same_layout;
  };
  for (const Pair& p :
       {Pair{"tiny-cpu-taco", "tiny-cpu", true}, Pair{"gpt2-124m-taco", "gpt2-124m", true},
        Pair{"gpt2-350m-taco", "gpt2-350m", true}, Pair{"gpt-1.3b-taco", "gpt-1.3b", true},
        Pair{"gpt-2.7b-taco", "gpt-2.7b", true}, Pair{"tiny-cpu-taco-auto", "tiny-cpu", false},
        Pair{"gpt-1.3b-tp8-taco", "gpt-1.3b", false},
        Pair{"gpt-1.3b-tp4-pp2-taco", "gpt-1.3b", false}}) {
    SCOPED_TRACE(p.flavour);
    const Config a = load_config_file(configs_dir() + "/" + p.flavour + ".yaml");
    const Config b = load_config_file(configs_dir() + "/" + p.base + ".yaml");
    EXPECT_EQ(a.model.n_layer, b.model.n_layer);
    EXPECT_EQ(a.model.n_head, b.model.n_head);
    EXPECT_EQ(a.model.d_model, b.model.d_model);
    EXPECT_EQ(a.model.seq_len, b.model.seq_len);
    EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
    EXPECT_EQ(a.data.train, b.data.train);
    EXPECT_EQ(a.data.val, b.data.val);
    EXPECT_EQ(a.train.steps, b.train.steps);
    EXPECT_EQ(a.train.global_batch_tokens, b.train.global_batch_tokens);
    EXPECT_EQ(a.train.micro_batch_size, b.train.micro_batch_size);
    EXPECT_EQ(a.train.lr, b.train.lr);
    EXPECT_EQ(a.train.warmup_steps, b.train.warmup_steps);
    EXPECT_EQ(a.train.seed, b.train.seed);
    EXPECT_EQ(a.train.device, b.train.device);
    if (p.same_layout) {
      EXPECT_EQ(a.parallel.tp, b.parallel.tp);
      EXPECT_EQ(a.parallel.pp, b.parallel.pp);
      EXPECT_EQ(a.parallel.dp, b.parallel.dp);
    }
    EXPECT_EQ(b.compression.rules.size(), 0u) << "the base file sends everything uncompressed";
    EXPECT_EQ(a.compression.default_spec.codec, CodecKind::none);
  }
}

}  // namespace
}  // namespace taco
