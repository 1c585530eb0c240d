// taco-generate: samples text from a trained checkpoint, on the CPU (fp32), so a user sees what
// the model learned.
//
//   taco-generate RUN_DIR|CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T]
//                 [--top-k K] [--seed S] [--config FILE] [--bpe-dir DIR]
//
// RUN_DIR (runs/<name>) uses its config.yaml and its newest complete checkpoint that loads (a
// damaged newer one is skipped with a warning, as the trainer does); a checkpoint
// folder (.../ckpt/step_N) uses the config.yaml two levels up unless --config names one. The
// checkpoint may come from any tp/pp/dp layout, CPU or GPU (engine/train/checkpoint_model.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/bpe_tokenizer.h"
#include "engine/data/byte_tokenizer.h"
#include "engine/runtime/arena.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_model.h"
#include "kernels/check.h"
#include "model/gpt.h"

namespace {

namespace fs = std::filesystem;
using taco::UserError;

const char* const kUsage =
    "usage: taco-generate RUN_DIR|CHECKPOINT_DIR [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                     [--top-k K] [--seed S] [--config FILE] [--bpe-dir DIR]\n"
    "\n"
    "Prints TEXT followed by N sampled tokens (default 200) from a trained model, on the CPU.\n"
    "\n"
    "  RUN_DIR         runs/<name>: its config.yaml and newest complete checkpoint\n"
    "  CHECKPOINT_DIR  one checkpoint folder (.../ckpt/step_N); config.yaml from two levels up\n"
    "  --prompt TEXT   text the sample continues (default empty: it starts after a newline\n"
    "                  byte, or <|endoftext|> for GPT-2 BPE models)\n"
    "  --tokens N      tokens to sample (default 200)\n"
    "  --temperature T softmax temperature (default 0.8; 0 = always the most likely token)\n"
    "  --top-k K       sample among the K most likely tokens (default 40; 0 = all)\n"
    "  --seed S        sampling seed (default 1234)\n"
    "  --config FILE   the run's config when it is not where described above\n"
    "  --bpe-dir DIR   GPT-2 BPE files for vocab 50257 models (default .cache/gpt2-bpe)\n"
    "  --help          this text\n"
    "\n"
    "The model's shape comes from the run's config (keys: docs/config-reference.md).\n";

struct Options {
  std::string path, prompt, config, bpe_dir = ".cache/gpt2-bpe";
  int tokens = 200, top_k = 40;
  double temperature = 0.8;
  uint64_t seed = 1234;
  bool help = false;
};

template <typename T>
T parse_number(const std::string& option, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw UserError(option + ": '" + text + "' is not a number");
  return value;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(a + ": missing value (see --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--prompt") {
      o.prompt = value();
    } else if (a == "--tokens") {
      o.tokens = parse_number<int>(a, value());
      if (o.tokens < 0) throw UserError("--tokens: must be >= 0");
    } else if (a == "--temperature") {
      o.temperature = std::stod(value());
      if (!(o.temperature >= 0)) throw UserError("--temperature: must be >= 0");
    } else if (a == "--top-k") {
      o.top_k = parse_number<int>(a, value());
      if (o.top_k < 0) throw UserError("--top-k: must be >= 0");
    } else if (a == "--seed") {
      o.seed = parse_number<uint64_t>(a, value());
    } else if (a == "--config") {
      o.config = value();
    } else if (a == "--bpe-dir") {
      o.bpe_dir = value();
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(a + ": unknown option (see --help)");
    } else if (o.path.empty()) {
      o.path = a;
    } else {
      throw UserError(a + ": only one RUN_DIR or CHECKPOINT_DIR (see --help)");
    }
  }
  if (!o.help && o.path.empty()) throw UserError("missing RUN_DIR or CHECKPOINT_DIR (see --help)");
  return o;
}

// Text <-> ids for the model's vocabulary: bytes for 256, GPT-2 BPE for 50257.
class Tokenizer {
 public:
  Tokenizer(int vocab, const std::string& bpe_dir) {
    if (vocab == taco::ByteTokenizer::kVocabSize) return;
    if (vocab != taco::BpeTokenizer::kGpt2VocabSize)
      throw UserError("model.vocab_size " + std::to_string(vocab) +
                      ": taco-generate knows the byte (256) and GPT-2 (50257) vocabularies");
    bpe_.emplace_back(taco::BpeTokenizer::from_dir(bpe_dir));
  }
  std::vector<uint16_t> encode(const std::string& text) {
    return bpe_.empty() ? bytes_.encode(text) : bpe_[0].encode(text);
  }
  std::string decode(uint16_t id) const {
    return bpe_.empty() ? bytes_.decode(&id, 1) : bpe_[0].decode(&id, 1);
  }
  // What an empty prompt starts from: a newline byte, or <|endoftext|>.
  uint16_t start() const {
    return bpe_.empty() ? uint16_t('\n') : uint16_t(std::max(0, bpe_[0].eot_id()));
  }

 private:
  taco::ByteTokenizer bytes_;
  std::vector<taco::BpeTokenizer> bpe_;  // empty for bytes
};

// Index into the `valid` first entries of `logits`, sampled with temperature and top-k.
int sample(const float* logits, int valid, const Options& o, std::mt19937_64& rng) {
  std::vector<int> order(size_t(valid), 0);
  for (int i = 0; i < valid; ++i) order[size_t(i)] = i;
  if (o.temperature == 0) return int(std::max_element(logits, logits + valid) - logits);
  const int k = o.top_k > 0 ? std::min(o.top_k, valid) : valid;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[order[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i)
    sum += p[size_t(i)] = std::exp((logits[order[size_t(i)]] - top) / o.temperature);
  double u = std::uniform_real_distribution<double>(0, sum)(rng);
  for (int i = 0; i < k; ++i) {
    u -= p[size_t(i)];
    if (u <= 0) return order[size_t(i)];
  }
  return order[size_t(k - 1)];
}

int run(const Options& o) {
  // Where the checkpoint and the config are.
  std::string folder, config_path = o.config;
  if (fs::exists(fs::path(o.path) / "COMPLETE")) {
    folder = o.path;
    if (config_path.empty())
      config_path = (fs::path(o.path) / ".." / ".." / "config.yaml").string();
  } else {
    if (config_path.empty()) config_path = (fs::path(o.path) / "config.yaml").string();
  }
  if (!fs::exists(config_path))
    throw UserError(config_path + ": no config.yaml for this run; pass --config FILE");
  const taco::Config cfg = taco::load_config_file(config_path, {});
  taco::FullState full;
  if (folder.empty()) {
    // The newest checkpoint that loads, as the trainer resumes: a damaged newer one is skipped.
    const std::string dir =
        cfg.checkpoint.dir.empty() ? (fs::path(o.path) / "ckpt").string() : cfg.checkpoint.dir;
    full = taco::load_newest_full_state(dir, cfg, "taco-generate", &folder);
  } else {
    full = taco::load_full_state(folder, cfg);
  }
  const std::vector<float>& full_params = full.sections.at("params");
  Tokenizer tok(cfg.model.vocab_size, o.bpe_dir);

  std::vector<uint16_t> context = tok.encode(o.prompt);
  if (context.empty()) context.push_back(tok.start());
  // The window: up to seq_len tokens, no more than this sample needs (positions are absolute
  // from the window's start, so a shorter window is the same model on fewer positions).
  const int T = std::min<int>(cfg.model.seq_len, int(context.size()) + o.tokens);
  const auto& d = full.dims;
  const taco::GptDims dims =
      taco::GptDims::make(d.n_layer, d.n_head, d.d_model, T, d.vocab_size, 1);
  const taco::ParamLayout layout(dims, taco::LayoutSpec{1, 0, 0, d.n_layer, true, true});
  const taco::ParamLayout full_layout(d, taco::LayoutSpec{1, 0, 0, d.n_layer, true, true});
  taco::Arena arena(taco::DeviceKind::cpu);
  taco::Gpt model(layout, 1, 1, taco::DeviceKind::cpu, taco::DType::f32, nullptr);
  model.plan(arena);
  arena.allocate();
  model.bind(arena);
  float* params = model.params().as<float>();
  for (const taco::ParamInfo& p : layout.params()) {  // wpe: its first T rows
    const taco::ParamInfo& q = full_layout.get(p.name);
    std::copy_n(full_params.data() + q.offset, p.numel(), params + p.offset);
  }

  std::fprintf(stderr, "taco-generate: %s (step %lld), window %d tokens\n", folder.c_str(),
               (long long)full.step, T);
  std::fputs(o.prompt.c_str(), stdout);
  std::fflush(stdout);
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T), 0);
  for (int n = 0; n < o.tokens; ++n) {
    const size_t len = std::min(context.size(), size_t(T));
    std::fill(tokens.begin(), tokens.end(), 0);
    std::copy(context.end() - long(len), context.end(), tokens.begin());
    model.forward(tokens.data(), targets.data());
    const float* row = model.logits().as<float>() + (len - 1) * size_t(d.padded_vocab);
    const int next = sample(row, d.vocab_size, o, rng);
    context.push_back(uint16_t(next));
    std::fputs(tok.decode(uint16_t(next)).c_str(), stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_args(argc, argv);
    if (o.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o);
  } catch (const taco::Error& e) {
    std::fprintf(stderr, "taco-generate: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "taco-generate: error: %s\n", e.what());
    return 1;
  }
}
