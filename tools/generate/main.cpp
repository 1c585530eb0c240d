// taco-generate: samples text from a trained checkpoint, on the CPU (fp32), so a user sees what
// the model learned.
//
//   taco-generate RUN_DIR|CHECKPOINT_DIR [--prompt TEXT | --token-ids I,J,...] [--tokens N]
//                 [--temperature T] [--top-k K] [--seed S] [--config FILE] [--bpe-dir DIR]
//                 [--dump-logits FILE]
//
// RUN_DIR (runs/<name>) uses its config.yaml and its newest complete checkpoint that loads (a
// damaged newer one is skipped with a warning, as the trainer does); a checkpoint
// folder (.../ckpt/step_N) uses the config.yaml two levels up unless --config names one. The
// checkpoint may come from any tp/pp/dp layout, CPU or GPU (engine/train/checkpoint_model.h).
// --dump-logits writes the logits of the prompt's tokens instead of sampling, for comparisons
// with other implementations of the same model (tools/export/check_hf.py).
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
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
#include "tools/tool_main.h"

namespace {

using taco::UserError;

const char* const kUsage =
    "usage: taco-generate RUN_DIR|CHECKPOINT_DIR [--prompt TEXT | --token-ids I,J,...]\n"
    "                     [--tokens N] [--temperature T] [--top-k K] [--seed S] [--config FILE]\n"
    "                     [--bpe-dir DIR] [--dump-logits FILE]\n"
    "\n"
    "Prints TEXT followed by N sampled tokens (default 200) from a trained model, on the CPU.\n"
    "\n"
    "  RUN_DIR         runs/<name>: its config.yaml and newest complete checkpoint\n"
    "  CHECKPOINT_DIR  one checkpoint folder (.../ckpt/step_N); config.yaml from two levels up\n"
    "  --prompt TEXT   text the sample continues (default empty: it starts after a newline\n"
    "                  byte, or <|endoftext|> for GPT-2 BPE models)\n"
    "  --tokens N      tokens to sample (default 200)\n"
    "  --token-ids L   start from these token ids (comma-separated) instead of a text prompt\n"
    "  --dump-logits F write the logits of the prompt's (or --token-ids') n tokens to F instead\n"
    "                  of sampling: n x vocab_size float32, little-endian, row t = the logits\n"
    "                  after token t (n <= model.seq_len; the vocabulary's padding left out)\n"
    "  --temperature T softmax temperature (default 0.8; 0 = always the most likely token)\n"
    "  --top-k K       sample among the K most likely tokens (default 40; 0 = all)\n"
    "  --seed S        sampling seed (default 1234)\n"
    "  --config FILE   the run's config when it is not where described above\n"
    "  --bpe-dir DIR   GPT-2 BPE files for vocab 50257 models (default .cache/gpt2-bpe)\n"
    "  --help          this text\n"
    "\n"
    "The model's shape comes from the run's config (keys: docs/config-reference.md).\n";

struct Options {
  std::string path, prompt, config, bpe_dir = ".cache/gpt2-bpe", dump_logits;
  std::vector<int> token_ids;
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
    } else if (a == "--dump-logits") {
      o.dump_logits = value();
    } else if (a == "--token-ids") {
      const std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.token_ids.push_back(parse_number<int>(a, list.substr(at, comma - at)));
        if (o.token_ids.back() < 0) throw UserError("--token-ids: ids must be >= 0");
        at = comma + 1;
      }
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(a + ": unknown option (see --help)");
    } else if (o.path.empty()) {
      o.path = a;
    } else {
      throw UserError(a + ": only one RUN_DIR or CHECKPOINT_DIR (see --help)");
    }
  }
  if (!o.help && o.path.empty()) throw UserError("missing RUN_DIR or CHECKPOINT_DIR (see --help)");
  if (!o.token_ids.empty() && !o.prompt.empty())
    throw UserError("--prompt and --token-ids: give one of them");
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

// Writes the logits of `context` (one forward, positions 0..n-1) to `path`: [n, vocab_size]
// float32, little-endian, row by row; the padded vocabulary's columns are left out.
void dump_logits(taco::Gpt& model, const std::vector<uint16_t>& context, int vocab, int padded,
                 const std::string& path) {
  static_assert(std::endian::native == std::endian::little, "float32 written as in memory");
  std::vector<int32_t> tokens(context.begin(), context.end()), targets(context.size(), 0);
  model.forward(tokens.data(), targets.data());
  const float* logits = model.logits().as<float>();
  std::ofstream out(path, std::ios::binary);
  for (size_t t = 0; t < context.size() && out; ++t)
    out.write(reinterpret_cast<const char*>(logits + t * size_t(padded)),
              std::streamsize(vocab * sizeof(float)));
  out.close();
  if (!out) throw UserError(path + ": cannot write the logits (--dump-logits)");
}

int run(const Options& o) {
  const taco::RunState loaded = taco::load_run_state(o.path, o.config, "taco-generate", true);
  const taco::Config& cfg = loaded.config;
  const taco::FullState& full = loaded.state;
  const std::string& folder = loaded.folder;
  const std::vector<float>& full_params = full.sections.at("params");
  const auto& d = full.dims;

  std::vector<uint16_t> context;
  std::optional<Tokenizer> tok;  // not needed for --token-ids
  if (!o.token_ids.empty()) {
    for (const int id : o.token_ids) {
      if (id >= d.vocab_size)
        throw UserError("--token-ids: " + std::to_string(id) + " is beyond the vocabulary (" +
                        std::to_string(d.vocab_size) + " tokens)");
      context.push_back(uint16_t(id));
    }
  } else {
    tok.emplace(cfg.model.vocab_size, o.bpe_dir);
    context = tok->encode(o.prompt);
    if (context.empty()) context.push_back(tok->start());
  }
  const bool dumping = !o.dump_logits.empty();
  if (dumping && int(context.size()) > cfg.model.seq_len)
    throw UserError("--dump-logits: " + std::to_string(context.size()) +
                    " tokens do not fit the model's window of model.seq_len = " +
                    std::to_string(cfg.model.seq_len));
  // The window: up to seq_len tokens, no more than this sample needs (positions are absolute
  // from the window's start, so a shorter window is the same model on fewer positions).
  const int T = dumping ? int(context.size())
                        : std::min<int>(cfg.model.seq_len, int(context.size()) + o.tokens);
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

  if (dumping) {
    dump_logits(model, context, d.vocab_size, d.padded_vocab, o.dump_logits);
    std::fprintf(stderr, "taco-generate: %s (step %lld): logits of %d tokens x %d -> %s\n",
                 folder.c_str(), (long long)full.step, T, d.vocab_size, o.dump_logits.c_str());
    return 0;
  }
  std::fprintf(stderr, "taco-generate: %s (step %lld), window %d tokens\n", folder.c_str(),
               (long long)full.step, T);
  if (!tok) tok.emplace(cfg.model.vocab_size, o.bpe_dir);  // --token-ids: decode the samples
  if (o.token_ids.empty())
    std::fputs(o.prompt.c_str(), stdout);
  else
    for (const uint16_t id : context) std::fputs(tok->decode(id).c_str(), stdout);
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
    std::fputs(tok->decode(uint16_t(next)).c_str(), stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return taco::run_tool("taco-generate", [&] {
    const Options o = parse_args(argc, argv);
    if (o.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o);
  });
}
