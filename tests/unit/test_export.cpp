// taco-export (tools/export/): a run becomes a Hugging Face GPT-2 folder. Runs are trained by the
// real taco-train (2- and 4-rank layouts under mpirun), exported by the real tool, and read back
// with an independent safetensors reader (test_export_support.h): names, shapes, dtypes and every
// value against the checkpoint's gathered state, a tensor-parallel run against the single-rank
// run of the same training, the tokenizer files, and bad input (exit 2, one line, no folder).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_model.h"
#include "model/param_layout.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_export_support.h"

namespace taco {
namespace {

namespace fs = std::filesystem;
using test::Json;
using test::JsonParser;
using test::StFile;
using test::StTensor;

constexpr int kC = 32, kLayers = 2, kSeq = 32, kVocab = 300;  // 300: padded to 320 / 512

// Tiny runs made by taco-train in one scratch folder, as a user makes them.
struct Runs {
  std::string dir, args;
  explicit Runs(const std::string& name) : dir(test::scratch_dir(name)) {
    const std::string data = test::fortune_shards();
    args = " --set model.n_layer=" + std::to_string(kLayers) +
           " --set model.d_model=" + std::to_string(kC) +
           " --set model.n_head=2 --set model.seq_len=" + std::to_string(kSeq) +
           " --set train.micro_batch_size=4 --set train.global_batch_tokens=256"
           " --set train.steps=3 --set train.warmup_steps=1 --set log.every=1"
           " --set log.eval_every=0 --set data.train=" +
           data + "/train_*.bin --set data.val=" + data + "/val_*.bin";
  }
  std::string run(const std::string& name) const { return dir + "/runs/" + name; }
  // Trains runs/<name>; np > 1 under mpirun. Returns taco-train's exit code and output.
  test::CommandResult train(const std::string& name, const std::string& extra, int np = 1) const {
    std::string launch = test::binary_dir() + "/taco-train";
    if (np > 1)
      launch = "timeout 600 " + std::string(TACO_MPIEXEC) +
               " --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1"
               " --mca orte_abort_on_non_zero_status 1 -np " +
               std::to_string(np) + " " + launch;
    return test::run_command("cd " + dir + " && " + launch + args + " --set run.name=" + name +
                             " " + extra);
  }
};

test::CommandResult taco_export(const std::string& args) {
  return test::run_command(test::binary_dir() + "/taco-export " + args);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Folders beside `out` whose name starts with its name plus ".tmp-" (left by a failed export).
int leftovers(const std::string& out) {
  int n = 0;
  const std::string prefix = fs::path(out).filename().string() + ".tmp-";
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

// What Hugging Face's GPT2LMHeadModel expects, restated from modeling_gpt2: each HF name with the
// taco parameter it comes from, and whether it is a Conv1D weight ([in, out], taco's transposed).
struct HfName {
  std::string hf, taco;
  bool conv1d;
};
std::vector<HfName> hf_names(int n_layer) {
  std::vector<HfName> names = {{"transformer.wte.weight", "wte", false},
                               {"transformer.wpe.weight", "wpe", false}};
  for (int l = 0; l < n_layer; ++l) {
    std::string h = "transformer.h.", t = "h";  // step by step: GCC 12's false -Wrestrict
    h += std::to_string(l) + ".";
    t += std::to_string(l);
    for (const HfName& n : std::vector<HfName>{{"ln_1.weight", ".ln1_w", false},
                                               {"ln_1.bias", ".ln1_b", false},
                                               {"attn.c_attn.weight", ".qkv_w", true},
                                               {"attn.c_attn.bias", ".qkv_b", false},
                                               {"attn.c_proj.weight", ".proj_w", true},
                                               {"attn.c_proj.bias", ".proj_b", false},
                                               {"ln_2.weight", ".ln2_w", false},
                                               {"ln_2.bias", ".ln2_b", false},
                                               {"mlp.c_fc.weight", ".fc_w", true},
                                               {"mlp.c_fc.bias", ".fc_b", false},
                                               {"mlp.c_proj.weight", ".fc2_w", true},
                                               {"mlp.c_proj.bias", ".fc2_b", false}})
      names.push_back({h + n.hf, t + n.taco, n.conv1d});
  }
  names.push_back({"transformer.ln_f.weight", "lnf_w", false});
  names.push_back({"transformer.ln_f.bias", "lnf_b", false});
  return names;
}

// The run's newest checkpoint as its tp = 1 parameters.
struct Gathered {
  FullState state;
  std::unique_ptr<ParamLayout> layout;  // tp = 1
  const float* at(const std::string& name, int r, int c) const {
    const ParamInfo& p = layout->get(name);
    return state.sections.at("params").data() + p.offset + size_t(r) * p.cols + c;
  }
};
Gathered gathered(const std::string& run) {
  Gathered g;
  const Config cfg = load_config_file(run + "/config.yaml");
  g.state = load_full_state(newest_complete_checkpoint(run + "/ckpt", nullptr), cfg);
  g.layout = std::make_unique<ParamLayout>(g.state.dims,
                                           LayoutSpec{1, 0, 0, g.state.dims.n_layer, true, true});
  return g;
}

// Every tensor of `f` equals what HF expects from `g`'s parameters, bit for bit: the export is
// pure data movement (a copy or a transpose of float32 values), so the tolerance is zero.
void expect_values_of(const StFile& f, const Gathered& g) {
  const ParamLayout& full = *g.layout;
  for (const HfName& n : hf_names(g.state.dims.n_layer)) {
    SCOPED_TRACE(n.hf);
    ASSERT_EQ(f.tensors.count(n.hf), 1u);
    const std::vector<float>& got = f.tensors.at(n.hf).values;
    const ParamInfo& p = full.get(n.taco);
    const int rows = n.taco == "wte" ? g.state.dims.vocab_size : p.rows;
    ASSERT_EQ(got.size(), size_t(rows) * p.cols);
    size_t bad = 0;
    float largest = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < p.cols; ++c) {
        const float want = *g.at(n.taco, r, c);
        const size_t at = n.conv1d ? size_t(c) * rows + r : size_t(r) * p.cols + c;
        bad += got[at] != want;
        largest = std::max(largest, std::fabs(want));
      }
    EXPECT_EQ(bad, 0u) << "elements differing from the checkpoint";
    EXPECT_GT(largest, 0.f) << "an all-zero tensor proves nothing";
  }
}

// Relative L2 distance of tensor `name` in two exports.
double distance(const StFile& a, const StFile& b, const std::string& name) {
  const auto& x = a.tensors.at(name).values;
  const auto& y = b.tensors.at(name).values;
  return test::relative_l2(x.data(), y.data(), x.size());
}

TEST(TacoExport, WritesGpt2NamesShapesAndTheCheckpointsValues) {
  const Runs runs("export_tp1");
  const std::string vocab = " --set model.vocab_size=" + std::to_string(kVocab);
  ASSERT_EQ(runs.train("a", vocab).exit_code, 0);
  const std::string out = runs.dir + "/hf";
  fs::create_directories(out);  // an empty OUT_DIR is taken
  const auto r = taco_export(runs.run("a") + " --format hf " + out + "/");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(step 3) -> " + out), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("vocabulary 300 (20 padding rows left out)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("does not know the tokenizer of a 300-token vocabulary"),
            std::string::npos)
      << r.output;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(leftovers(out), 0);

  const Json config = JsonParser(test::read_file(out + "/config.json")).parse();
  EXPECT_EQ(config.at("model_type").str, "gpt2");
  ASSERT_EQ(config.at("architectures").items.size(), 1u);
  EXPECT_EQ(config.at("architectures").items[0].str, "GPT2LMHeadModel");
  EXPECT_EQ(config.at("vocab_size").num, kVocab);  // the real vocabulary, not the padded 320
  EXPECT_EQ(config.at("n_embd").num, kC);
  EXPECT_EQ(config.at("n_layer").num, kLayers);
  EXPECT_EQ(config.at("n_head").num, 2);
  EXPECT_EQ(config.at("n_positions").num, kSeq);
  EXPECT_EQ(config.at("n_ctx").num, kSeq);
  EXPECT_EQ(config.at("activation_function").str, "gelu_new");  // kernels/gelu.h: tanh form
  EXPECT_EQ(config.at("layer_norm_epsilon").num, 1e-5);         // kernels/layernorm.h
  EXPECT_EQ(config.at("eos_token_id").kind, Json::null);

  const StFile f = test::read_safetensors(out + "/model.safetensors");
  EXPECT_EQ(f.data_start % 8, 0u) << "data 8-byte aligned";
  EXPECT_EQ(f.metadata.at("format").str, "pt");  // transformers refuses other formats
  std::vector<std::string> expected_order;
  for (const HfName& n : hf_names(kLayers)) expected_order.push_back(n.hf);
  EXPECT_EQ(f.order, expected_order) << "lm_head.weight must not be written (tied to wte)";
  const auto shape = [&](const std::string& name) { return f.tensors.at(name).shape; };
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(shape("transformer.wte.weight"), (Shape{kVocab, kC}));
  EXPECT_EQ(shape("transformer.wpe.weight"), (Shape{kSeq, kC}));
  EXPECT_EQ(shape("transformer.h.1.ln_1.weight"), (Shape{kC}));
  EXPECT_EQ(shape("transformer.h.1.attn.c_attn.weight"), (Shape{kC, 3 * kC}));
  EXPECT_EQ(shape("transformer.h.1.attn.c_attn.bias"), (Shape{3 * kC}));
  EXPECT_EQ(shape("transformer.h.0.attn.c_proj.weight"), (Shape{kC, kC}));
  EXPECT_EQ(shape("transformer.h.0.mlp.c_fc.weight"), (Shape{kC, 4 * kC}));
  EXPECT_EQ(shape("transformer.h.0.mlp.c_proj.weight"), (Shape{4 * kC, kC}));
  EXPECT_EQ(shape("transformer.ln_f.bias"), (Shape{kC}));

  // A few elements by hand (HF index <- taco index), then every element of every tensor.
  const Gathered g = gathered(runs.run("a"));
  const auto hf = [&](const std::string& name, int r, int c) {
    const StTensor& t = f.tensors.at(name);
    return t.values[size_t(r) * (t.shape.size() > 1 ? t.shape[1] : 1) + c];
  };
  const float key = *g.at("h1.qkv_w", kC + 5, 3), value = *g.at("h1.qkv_w", 2 * kC + 7, 30);
  EXPECT_EQ(hf("transformer.h.1.attn.c_attn.weight", 3, kC + 5), key);
  EXPECT_EQ(hf("transformer.h.1.attn.c_attn.weight", 30, 2 * kC + 7), value);
  EXPECT_EQ(hf("transformer.h.0.mlp.c_proj.weight", 100, 4), *g.at("h0.fc2_w", 4, 100));
  EXPECT_EQ(hf("transformer.h.1.attn.c_attn.bias", 2 * kC + 1, 0),
            *g.at("h1.qkv_b", 2 * kC + 1, 0));
  EXPECT_EQ(hf("transformer.wpe.weight", kSeq - 1, 9), *g.at("wpe", kSeq - 1, 9));
  EXPECT_EQ(hf("transformer.wte.weight", kVocab - 1, 2), *g.at("wte", kVocab - 1, 2));
  const float ln = *g.at("h0.ln2_w", 5, 0);
  EXPECT_EQ(hf("transformer.h.0.ln_2.weight", 5, 0), ln);
  EXPECT_NE(ln, 1.f) << "trained away from its initial 1";
  EXPECT_NE(key, 0.f);
  EXPECT_NE(value, 0.f);
  expect_values_of(f, g);
}

// Any layout gives the same folder: each multi-rank export equals its own checkpoint's gathered
// state exactly, and the tp = 1 export of the same training (same seed, same global batch) up to
// the rounding of a different summation order.
TEST(TacoExport, MultiRankRunsExportTheirGatheredStateAndMatchTheSingleRankRun) {
  const Runs runs("export_layouts");
  const std::string vocab = " --set model.vocab_size=" + std::to_string(kVocab);
  ASSERT_EQ(runs.train("tp1", vocab).exit_code, 0);
  struct Layout {
    std::string name, sets;
    int np;
  };
  const Layout layouts[] = {
      {"tp2", " --set parallel.tp=2", 2},
      {"pp2dp2", " --set parallel.pp=2 --set parallel.dp=2 --set parallel.zero=1", 4}};
  ASSERT_EQ(taco_export(runs.run("tp1") + " " + runs.dir + "/hf-tp1").exit_code, 0);
  const StFile single = test::read_safetensors(runs.dir + "/hf-tp1/model.safetensors");
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const auto t = runs.train(l.name, vocab + l.sets, l.np);
    ASSERT_EQ(t.exit_code, 0) << t.output;
    const std::string out = runs.dir + "/hf-" + l.name;
    const auto r = taco_export(runs.run(l.name) + " " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const StFile f = test::read_safetensors(out + "/model.safetensors");
    EXPECT_EQ(f.order, single.order);
    expect_values_of(f, gathered(runs.run(l.name)));
    // Three AdamW steps from the same start: the layouts differ only in fp32 rounding (sums in
    // another order), which AdamW's normalised steps can amplify for tiny gradients: at most
    // 1.0e-4 of a tensor's norm when this was written (tp2), so 2e-3 leaves 20x room. A shard
    // put in the wrong place (heads, vocabulary rows, stages) differs by order 1.
    for (const std::string& name : single.order) EXPECT_LT(distance(f, single, name), 2e-3) << name;
  }
}

TEST(TacoExport, BadInputIsOneLineWithExitCode2AndLeavesNoFolder) {
  const Runs runs("export_bad");
  ASSERT_EQ(runs.train("r", "--set checkpoint.every=1").exit_code, 0);  // steps 1, 2, 3
  const std::string out = runs.dir + "/out";
  const auto one_error_line = [&](const test::CommandResult& r, const std::string& names) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const auto lines = lines_of(r.output);
    ASSERT_EQ(lines.size(), 1u) << r.output;
    EXPECT_EQ(lines[0].rfind("taco-export: error: ", 0), 0u) << r.output;
    EXPECT_NE(lines[0].find(names), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_EQ(leftovers(out), 0);
  };
  one_error_line(taco_export(runs.run("missing") + " " + out), runs.run("missing"));
  one_error_line(taco_export(runs.run("r")), "expected RUN_DIR");
  one_error_line(taco_export(runs.run("r") + " --format onnx " + out), "--format onnx");

  // A non-empty OUT_DIR, or a file, is refused and left as it was.
  fs::create_directories(out);
  test::write_file(out + "/keep.txt", "mine");
  const auto full = taco_export(runs.run("r") + " " + out);
  EXPECT_EQ(full.exit_code, 2) << full.output;
  EXPECT_EQ(lines_of(full.output).size(), 1u) << full.output;
  EXPECT_NE(full.output.find(out + ": exists and is not empty"), std::string::npos) << full.output;
  EXPECT_EQ(test::read_file(out + "/keep.txt"), "mine");
  fs::remove_all(out);
  test::write_file(out, "a file");
  EXPECT_EQ(taco_export(runs.run("r") + " " + out).exit_code, 2);
  EXPECT_EQ(test::read_file(out), "a file");
  fs::remove(out);

  // A damaged newest checkpoint: the one before it is exported, with a warning naming the file.
  const std::string ckpt = runs.run("r") + "/ckpt";
  const auto truncate = [&](const std::string& step) {
    const std::string f = ckpt + "/" + step + "/" + rank_file_name(0);
    fs::resize_file(f, fs::file_size(f) - 64);
  };
  truncate("step_00000003");
  const auto older = taco_export(runs.run("r") + " " + out);
  ASSERT_EQ(older.exit_code, 0) << older.output;
  EXPECT_NE(older.output.find("warning: " + ckpt + "/step_00000003/rank_00000.bin"),
            std::string::npos)
      << older.output;
  EXPECT_NE(older.output.find("(step 2) -> " + out), std::string::npos) << older.output;
  fs::remove_all(out);

  // Every checkpoint damaged: nothing to export; the error names the file and what to do.
  truncate("step_00000002");
  truncate("step_00000001");
  const auto none = taco_export(runs.run("r") + " " + out);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  const auto lines = lines_of(none.output);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("taco-export: error: " + ckpt + "/step_00000001/rank_00000.bin", 0),
            0u)
      << none.output;
  EXPECT_NE(lines.back().find("none of the 3 complete checkpoint(s) in " + ckpt + " loads"),
            std::string::npos)
      << none.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(leftovers(out), 0);
}

// GPT-2's byte alphabet (encoder.py's bytes_to_unicode), as UTF-8: byte b stands for itself
// when printable, else for code point 256 + (its index among the unprintable bytes).
std::string byte_char(int b) {
  const auto printable = [](int k) {
    return (k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE;
  };
  int code = b;
  if (!printable(b)) {
    code = 256;
    for (int k = 0; k < b; ++k) code += !printable(k);
  }
  if (code < 0x80) return std::string(1, char(code));
  return {char(0xC0 | (code >> 6)), char(0x80 | (code & 0x3F))};
}

// A made-up vocabulary of GPT-2's size that the BPE loader accepts: the 256 bytes, 50000 strings
// of 2 or 3 letters, <|endoftext|> = 50256; and three merges.
void write_fake_gpt2_files(const std::string& dir) {
  fs::create_directories(dir);
  std::string json = "{", bpe = "#version: 0.2\n";
  const auto entry = [&](const std::string& token, int id) {
    std::string quoted;
    for (const char c : token)
      quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    json += (id ? ", \"" : "\"") + quoted + "\": " + std::to_string(id);
  };
  for (int b = 0; b < 256; ++b) entry(byte_char(b), b);
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  int id = 256;
  for (size_t i = 0; i < letters.size() && id < 50256; ++i)
    for (size_t j = 0; j < letters.size() && id < 50256; ++j)
      entry(std::string{letters[i], letters[j]}, id++);
  for (size_t i = 0; id < 50256; ++i)
    entry(std::string{letters[i / 3844], letters[i / 62 % 62], letters[i % 62]}, id++);
  entry("<|endoftext|>", 50256);
  test::write_file(dir + "/encoder.json", json + "}");
  test::write_file(dir + "/vocab.bpe", bpe + "a a\na b\nb a\n");
}

TEST(TacoExport, ByteRunsGetNoTokenizerFilesAndGpt2RunsGetTheirBpeFiles) {
  const Runs runs("export_tokenizers");
  ASSERT_EQ(runs.train("bytes", "--set train.steps=1").exit_code, 0);
  const auto bytes = taco_export(runs.run("bytes") + " " + runs.dir + "/hf-bytes");
  ASSERT_EQ(bytes.exit_code, 0) << bytes.output;
  EXPECT_NE(bytes.output.find("no tokenizer files: the run is byte-level"), std::string::npos)
      << bytes.output;
  EXPECT_FALSE(fs::exists(runs.dir + "/hf-bytes/vocab.json"));

  // A 50257-token run (trained on byte ids, which are valid GPT-2 ids).
  ASSERT_EQ(runs.train("bpe", "--set train.steps=1 --set model.vocab_size=50257").exit_code, 0);
  const std::string bpe_dir = runs.dir + "/gpt2-bpe";
  const auto missing =
      taco_export(runs.run("bpe") + " " + runs.dir + "/hf-bpe --bpe-dir " + bpe_dir);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(lines_of(missing.output).size(), 1u) << missing.output;
  EXPECT_NE(missing.output.find(bpe_dir + "/encoder.json"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("--no-tokenizer"), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(runs.dir + "/hf-bpe"));

  write_fake_gpt2_files(bpe_dir);
  const auto bpe = taco_export(runs.run("bpe") + " " + runs.dir + "/hf-bpe --bpe-dir " + bpe_dir);
  ASSERT_EQ(bpe.exit_code, 0) << bpe.output;
  const std::string hf = runs.dir + "/hf-bpe";
  EXPECT_EQ(test::read_file(hf + "/vocab.json"), test::read_file(bpe_dir + "/encoder.json"));
  EXPECT_EQ(test::read_file(hf + "/merges.txt"), test::read_file(bpe_dir + "/vocab.bpe"));
  const Json tok = JsonParser(test::read_file(hf + "/tokenizer_config.json")).parse();
  EXPECT_EQ(tok.at("model_max_length").num, kSeq);
  const Json config = JsonParser(test::read_file(hf + "/config.json")).parse();
  EXPECT_EQ(config.at("vocab_size").num, 50257);
  EXPECT_EQ(config.at("eos_token_id").num, 50256);
  const StFile f = test::read_safetensors(hf + "/model.safetensors");
  EXPECT_EQ(f.tensors.at("transformer.wte.weight").shape, (std::vector<int64_t>{50257, kC}));

  const auto alone =
      taco_export(runs.run("bpe") + " " + runs.dir + "/hf-alone --no-tokenizer --bpe-dir /none");
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_FALSE(fs::exists(runs.dir + "/hf-alone/vocab.json"));
}

// taco-generate --dump-logits (what tools/export/check_hf.py compares Hugging Face against):
// n x vocab float32 rows, causal (a row does not change when tokens follow), and its last row's
// argmax is the token greedy sampling picks.
TEST(TacoGenerate, DumpLogitsWritesOneRowPerTokenThatGreedySamplingAgreesWith) {
  const Runs runs("export_logits");
  ASSERT_EQ(runs.train("g", "--set train.steps=20").exit_code, 0);
  const std::string gen = test::binary_dir() + "/taco-generate " + runs.run("g");
  const auto dump = [&](const std::string& ids, const std::string& file) {
    const auto r = test::run_command(gen + " --token-ids " + ids + " --dump-logits " + file);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string bytes = test::read_file(file);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  };
  const std::vector<float> three = dump("84,104,101", runs.dir + "/three.bin");  // "The"
  const std::vector<float> four = dump("84,104,101,32", runs.dir + "/four.bin");
  ASSERT_EQ(three.size(), 3u * 256);
  ASSERT_EQ(four.size(), 4u * 256);
  // The same model on a window one longer: fp32 sums over other shapes, a few ulps of the
  // logits (~1e-6 relative); a leak from a later token would change them by far more.
  EXPECT_LT(test::relative_l2(four.data(), three.data(), three.size()), 1e-5);
  float lo = 0, hi = 0;
  for (const float x : three) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GT(hi - lo, 1.f) << "logits of a trained model spread out";
  const auto last = four.begin() + 3 * 256;
  const int argmax = int(std::max_element(last, last + 256) - last);
  const auto greedy = test::run_command(gen +
                                        " --token-ids 84,104,101,32 --tokens 1 "
                                        "--temperature 0 2>/dev/null");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_EQ(greedy.output, std::string("The ") + char(argmax) + "\n");

  std::string ids = "1";
  for (int i = 0; i < kSeq; ++i) ids += ",1";  // one more than the window
  const auto too_long = test::run_command(gen + " --token-ids " + ids + " --dump-logits x");
  EXPECT_EQ(too_long.exit_code, 2) << too_long.output;
  EXPECT_NE(too_long.output.find("33 tokens do not fit"), std::string::npos) << too_long.output;
}

}  // namespace
}  // namespace taco
