// taco-prep: text files -> llm.c token shards (docs/design.md §8).
//
//   taco-prep --tokenizer byte --out DIR [--val-every 20] [--shard-tokens 100000000] INPUT...
//   taco-prep --tokenizer gpt2 --bpe-dir DIR --out DIR [...] INPUT...
//
// Document k of the corpus (files in sorted path order, documents in file order) goes to val when
// k % val_every == 0, else to train, so the split is the same on every machine.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/bpe_tokenizer.h"
#include "engine/data/byte_tokenizer.h"
#include "kernels/check.h"
#include "tools/prep/corpus.h"
#include "tools/prep/split_writer.h"
#include "tools/tool_main.h"

namespace {

const char* const kUsage =
    "usage: taco-prep --tokenizer byte --out DIR [--val-every N] [--shard-tokens N] INPUT...\n"
    "       taco-prep --tokenizer gpt2 --bpe-dir DIR --out DIR [...] INPUT...\n"
    "\n"
    "Tokenizes text into llm.c token shards DIR/train_000000.bin ... and DIR/val_000000.bin ...\n"
    "\n"
    "  INPUT             a text file, or a directory whose regular files are read (not\n"
    "                    recursive; hidden files and fortune index files *.dat, *.u8 are skipped)\n"
    "  --tokenizer NAME  byte: one token per byte, vocab 256\n"
    "                    gpt2: GPT-2's BPE, vocab 50257 (set model.vocab_size: 50257)\n"
    "  --bpe-dir DIR     gpt2 only: the folder holding encoder.json and vocab.bpe\n"
    "                    (tools/fetch_bpe.sh puts them in .cache/gpt2-bpe)\n"
    "  --out DIR         output directory, created if missing; shards an earlier run left\n"
    "                    beyond this run's count are removed\n"
    "  --val-every N     document k goes to val when k % N == 0, else to train (default 20)\n"
    "  --shard-tokens N  tokens per shard (default 100000000); the last two shards of a split\n"
    "                    share the remainder, so none is shorter than N/2 unless the split is\n"
    "  --help            this text\n"
    "\n"
    "Documents: in a fortune file (lines holding just \"%\" separate fortunes) each fortune is a\n"
    "document and the \"%\" lines are dropped; any other file is one document. byte: every\n"
    "document is followed by a \"\\n\" separator; gpt2: every document is preceded by\n"
    "<|endoftext|> (50256), as in llm.c's GPT-2 shards.\n"
    "\n"
    "Train on them with --set data.train='DIR/train_*.bin' --set data.val='DIR/val_*.bin'\n"
    "(and model.vocab_size to match the tokenizer); every config key: docs/config-reference.md.\n";

struct Options {
  std::string tokenizer;
  std::string bpe_dir;
  std::string out;
  int64_t val_every = 20;
  int64_t shard_tokens = 100000000;
  std::vector<std::string> inputs;
  bool help = false;
};

int64_t parse_count(const std::string& option, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw taco::UserError(option + " '" + text + "': expected an integer in [" +
                          std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return value;
}

Options parse_options(int argc, char** argv) {
  Options o;
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_done || arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      o.inputs.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    if (arg == "--help") {
      o.help = true;
      continue;
    }
    // --name VALUE or --name=VALUE
    std::string name = arg, value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (name == "--tokenizer" || name == "--bpe-dir" || name == "--out" ||
               name == "--val-every" || name == "--shard-tokens") {
      if (i + 1 == argc) throw taco::UserError(name + " needs a value (--help for usage)");
      value = argv[++i];
    }
    if (name == "--tokenizer") {
      o.tokenizer = value;
    } else if (name == "--bpe-dir") {
      o.bpe_dir = value;
    } else if (name == "--out") {
      o.out = value;
    } else if (name == "--val-every") {
      o.val_every = parse_count(name, value, 2, std::numeric_limits<int64_t>::max());
    } else if (name == "--shard-tokens") {
      o.shard_tokens = parse_count(name, value, 1, std::numeric_limits<int32_t>::max());
    } else {
      throw taco::UserError("unknown option " + arg + " (--help for usage)");
    }
  }
  return o;
}

void check_options(const Options& o) {
  if (o.tokenizer.empty()) {
    throw taco::UserError("--tokenizer is required: use --tokenizer byte or --tokenizer gpt2");
  }
  if (o.tokenizer != "byte" && o.tokenizer != "gpt2") {
    throw taco::UserError("unknown tokenizer '" + o.tokenizer + "'; use byte or gpt2");
  }
  if (o.tokenizer == "gpt2" && o.bpe_dir.empty()) {
    throw taco::UserError(
        "--tokenizer gpt2 needs --bpe-dir DIR, the folder with encoder.json and vocab.bpe "
        "(tools/fetch_bpe.sh puts them in .cache/gpt2-bpe)");
  }
  if (o.tokenizer == "byte" && !o.bpe_dir.empty()) {
    throw taco::UserError("--bpe-dir is for --tokenizer gpt2 only; drop it or use gpt2");
  }
  if (o.out.empty()) throw taco::UserError("--out DIR is required (where the shards go)");
  if (o.inputs.empty()) {
    throw taco::UserError("no INPUT given: name text files or directories (--help for usage)");
  }
}

// The chosen tokenizer, with its document separator.
class DocumentTokenizer {
 public:
  explicit DocumentTokenizer(const Options& o) {
    if (o.tokenizer != "gpt2") return;
    bpe_.emplace(taco::BpeTokenizer::from_dir(o.bpe_dir));
    if (bpe_->eot_id() < 0) {
      throw taco::UserError(o.bpe_dir +
                            "/encoder.json: no <|endoftext|> token to separate "
                            "documents; use GPT-2's files (tools/fetch_bpe.sh)");
    }
  }

  // Replaces `tokens` with the document's tokens and its separator.
  void document(std::string_view doc, std::vector<uint16_t>& tokens) {
    tokens.clear();
    if (!bpe_) {
      byte_.encode(doc, tokens);
      byte_.encode("\n", tokens);
      return;
    }
    tokens.push_back(static_cast<uint16_t>(bpe_->eot_id()));
    bpe_->encode(doc, tokens);
  }

  std::string describe() const {
    if (!bpe_) return "byte tokenizer (vocab " + std::to_string(byte_.vocab_size()) + ")";
    return "gpt2 tokenizer (vocab " + std::to_string(bpe_->vocab_size()) + ")";
  }

 private:
  taco::ByteTokenizer byte_;
  std::optional<taco::BpeTokenizer> bpe_;
};

void print_split(const taco::prep::SplitWriter& w, const char* name) {
  std::printf("%s: %zu documents, %zu tokens, %zu shard%s", name, w.documents(), w.tokens(),
              w.shards(), w.shards() == 1 ? "" : "s");
  if (w.shards() == 1) std::printf(" (%s)", w.shard_path(0).c_str());
  if (w.shards() > 1) {
    std::printf(" (%s .. %s)", w.shard_path(0).c_str(),
                std::filesystem::path(w.shard_path(w.shards() - 1)).filename().c_str());
  }
  std::printf("\n");
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  check_options(o);
  DocumentTokenizer tokenizer(o);  // a bad --bpe-dir fails before anything is written
  const taco::prep::InputFiles inputs = taco::prep::list_input_files(o.inputs);
  if (inputs.files.empty()) {
    throw taco::UserError("no input files: the directories given hold no regular text files (" +
                          std::to_string(inputs.skipped) + " skipped)");
  }
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (ec) throw taco::UserError(o.out + ": cannot create output directory (" + ec.message() + ")");

  taco::prep::SplitWriter train(o.out, "train", size_t(o.shard_tokens));
  taco::prep::SplitWriter val(o.out, "val", size_t(o.shard_tokens));
  int64_t k = 0;
  std::vector<uint16_t> tokens;
  for (const auto& path : inputs.files) {
    const std::string text = taco::prep::read_text_file(path);
    for (std::string_view doc : taco::prep::split_documents(text)) {
      tokenizer.document(doc, tokens);
      (k++ % o.val_every == 0 ? val : train).add_document(tokens);
    }
  }
  if (k == 0) {
    throw taco::UserError("empty corpus: the " + std::to_string(inputs.files.size()) +
                          " input files hold no text; give files with text");
  }
  if (train.documents() == 0) {
    throw taco::UserError("the corpus holds only " + std::to_string(k) +
                          " document, which went to val; give more text");
  }
  train.finish();
  val.finish();
  const size_t stale = taco::prep::remove_stale_shards(o.out, "train", train.shards()) +
                       taco::prep::remove_stale_shards(o.out, "val", val.shards());

  std::printf("taco-prep: %zu files (%zu skipped), %lld documents, %s\n", inputs.files.size(),
              inputs.skipped, static_cast<long long>(k), tokenizer.describe().c_str());
  print_split(train, "train");
  print_split(val, "val");
  if (stale > 0)
    std::printf("removed %zu stale shards of an earlier run from %s\n", stale, o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return taco::run_tool("taco-prep", [&] { return run(argc, argv); });
}
