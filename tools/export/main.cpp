// taco-export: a trained taco run as a Hugging Face GPT-2 folder, so that transformers (and
// anything that reads its format) can load, evaluate and fine-tune it.
//
//   taco-export RUN_DIR|CHECKPOINT_DIR [--format hf] OUT_DIR [--config FILE] [--bpe-dir DIR]
//               [--no-tokenizer]
//
// The checkpoint is found as taco-generate finds it (a run's newest checkpoint that loads, any
// tp/pp/dp/ZeRO layout, CPU or GPU) and gathered to its tp = 1 view; OUT_DIR gets config.json,
// model.safetensors (tools/export/hf_gpt2.h: names, layouts, float32) and, for GPT-2 BPE runs,
// vocab.json and merges.txt. Everything is written into a fresh OUT_DIR.tmp-XXXXXX beside OUT_DIR
// and renamed at the end, so OUT_DIR is either complete or absent.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/bpe_tokenizer.h"
#include "engine/data/byte_tokenizer.h"
#include "engine/train/checkpoint_model.h"
#include "kernels/check.h"
#include "tools/export/hf_gpt2.h"
#include "tools/tool_main.h"

namespace {

namespace fs = std::filesystem;
using taco::UserError;

const char* const kUsage =
    "usage: taco-export RUN_DIR|CHECKPOINT_DIR [--format hf] OUT_DIR [--config FILE]\n"
    "                   [--bpe-dir DIR] [--no-tokenizer]\n"
    "\n"
    "Writes a trained run as a Hugging Face GPT-2 folder (GPT2LMHeadModel) in OUT_DIR, which\n"
    "must not exist or be empty: config.json, model.safetensors (float32) and, for GPT-2 BPE\n"
    "runs, the tokenizer (vocab.json, merges.txt, tokenizer_config.json). Load it with\n"
    "  transformers.GPT2LMHeadModel.from_pretrained(\"OUT_DIR\")\n"
    "\n"
    "  RUN_DIR         runs/<name>: its config.yaml and newest complete checkpoint that loads\n"
    "                  (any tp/pp/dp/ZeRO layout, CPU or GPU; a damaged newer one is skipped)\n"
    "  CHECKPOINT_DIR  one checkpoint folder (.../ckpt/step_N); config.yaml from two levels up\n"
    "  --format hf     the output format (hf, the only one so far, is the default)\n"
    "  --config FILE   the run's config when it is not where described above\n"
    "  --bpe-dir DIR   where the run's GPT-2 BPE files are (encoder.json, vocab.bpe; default\n"
    "                  .cache/gpt2-bpe, where tools/fetch_bpe.sh puts them). A run does not\n"
    "                  record its tokenizer: a vocabulary of 50257 is taken to be GPT-2's BPE\n"
    "                  (what taco-prep --tokenizer gpt2 writes) and its files are copied from\n"
    "                  here; give the folder that taco-prep --bpe-dir read\n"
    "  --no-tokenizer  write the model only\n"
    "Byte-level runs (vocabulary 256: token id = byte value) get no tokenizer files; encode text\n"
    "as its UTF-8 bytes. The padded vocabulary rows of the embedding are left out.\n"
    "tools/export/check_hf.py compares the folder's logits with taco's (needs torch, "
    "transformers).\n";

struct Options {
  std::string run, out, config, format = "hf", bpe_dir = ".cache/gpt2-bpe";
  bool no_tokenizer = false, help = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(a + ": missing value (see --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--format") {
      o.format = value();
      if (o.format != "hf") throw UserError("--format " + o.format + ": unknown; use hf");
    } else if (a == "--config") {
      o.config = value();
    } else if (a == "--bpe-dir") {
      o.bpe_dir = value();
    } else if (a == "--no-tokenizer") {
      o.no_tokenizer = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(a + ": unknown option (see --help)");
    } else {
      positional.push_back(a);
    }
  }
  if (o.help) return o;
  if (positional.size() != 2)
    throw UserError("expected RUN_DIR (or CHECKPOINT_DIR) and OUT_DIR, got " +
                    std::to_string(positional.size()) + " paths (see --help)");
  o.run = positional[0];
  fs::path out = fs::path(positional[1]).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "OUT/" -> "OUT"
  o.out = out.string();
  return o;
}

// OUT_DIR may be absent or an empty folder; anything else would be overwritten or mixed.
void check_output(const std::string& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st))
    throw UserError(out + ": exists and is not a folder; choose a new OUT_DIR");
  if (!fs::is_empty(out, ec))
    throw UserError(out + ": exists and is not empty; choose a new OUT_DIR or remove this one");
}

// What the folder gets for the run's vocabulary: GPT-2 BPE files (checked now, before anything
// is written), or none.
struct TokenizerFiles {
  std::string encoder_json, vocab_bpe;  // empty: none
  int eot_id = -1;
  std::string note;  // what stdout says about it
};

TokenizerFiles tokenizer_files(const Options& o, int vocab) {
  TokenizerFiles t;
  if (o.no_tokenizer) {
    t.note = "no tokenizer files (--no-tokenizer)";
  } else if (vocab == taco::ByteTokenizer::kVocabSize) {
    t.note =
        "no tokenizer files: the run is byte-level (token id = byte value, 256 ids), which "
        "Hugging Face has no tokenizer file for; feed it the UTF-8 bytes of the text";
  } else if (vocab == taco::BpeTokenizer::kGpt2VocabSize) {
    try {
      const taco::BpeTokenizer bpe = taco::BpeTokenizer::from_dir(o.bpe_dir);
      if (bpe.vocab_size() != vocab)
        throw UserError(o.bpe_dir + "/encoder.json: " + std::to_string(bpe.vocab_size()) +
                        " tokens, the model has " + std::to_string(vocab));
      t.eot_id = bpe.eot_id();
    } catch (const UserError& e) {
      throw UserError(std::string(e.what()) +
                      "; the run's vocabulary (50257) is GPT-2's BPE: run tools/fetch_bpe.sh, "
                      "give --bpe-dir DIR, or export the model alone with --no-tokenizer");
    }
    t.encoder_json = o.bpe_dir + "/encoder.json";
    t.vocab_bpe = o.bpe_dir + "/vocab.bpe";
    t.note = "GPT-2 BPE tokenizer from " + o.bpe_dir + " (vocab.json, merges.txt)";
  } else {
    t.note = "no tokenizer files: taco does not know the tokenizer of a " + std::to_string(vocab) +
             "-token vocabulary";
  }
  return t;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw taco::Error(path + ": cannot write", 1);
}

// Writes everything into `dir`.
void write_folder(const std::string& dir, const taco::FullState& state, const TokenizerFiles& t) {
  const std::vector<float>& params = state.sections.at("params");
  write_text(dir + "/config.json", taco::hf_gpt2_config_json(state.dims, t.eot_id));
  taco::write_safetensors_f32(dir + "/model.safetensors", taco::hf_gpt2_tensors(state.dims, params),
                              {{"format", "pt"}});
  if (!t.encoder_json.empty()) {
    fs::copy_file(t.encoder_json, dir + "/vocab.json");
    fs::copy_file(t.vocab_bpe, dir + "/merges.txt");
    write_text(dir + "/tokenizer_config.json",
               "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": " +
                   std::to_string(state.dims.seq_len) +
                   ",\n  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n"
                   "  \"unk_token\": \"<|endoftext|>\",\n  \"add_prefix_space\": false\n}\n");
  }
}

int run(const Options& o) {
  check_output(o.out);
  const taco::RunState loaded = taco::load_run_state(o.run, o.config, "taco-export", true);
  const taco::FullState& state = loaded.state;
  const TokenizerFiles tok = tokenizer_files(o, state.dims.vocab_size);

  // Everything goes into a fresh folder beside OUT_DIR, renamed into place once complete.
  const fs::path out(o.out);
  std::error_code ec;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  if (ec)
    throw UserError(out.parent_path().string() + ": cannot create this folder (" + ec.message() +
                    "); choose an OUT_DIR in a writable place");
  std::string pattern = o.out + ".tmp-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw UserError(o.out + ": cannot create a folder beside it (" + std::strerror(errno) +
                    "); choose an OUT_DIR in a writable place");
  const std::string tmp = pattern;
  const mode_t mask = umask(0);  // mkdtemp makes it 0700; give it a plain folder's mode
  umask(mask);
  chmod(tmp.c_str(), 0777 & ~mask);
  try {
    write_folder(tmp, state, tok);
    check_output(o.out);  // still absent or empty: rename replaces an empty folder
    fs::rename(tmp, o.out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  std::printf("taco-export: %s (step %lld) -> %s\n", loaded.folder.c_str(), (long long)state.step,
              o.out.c_str());
  std::printf(
      "taco-export: GPT2LMHeadModel, %d layers, %d heads, d_model %d, %d positions, vocabulary "
      "%d (%d padding rows left out), float32%s\n",
      state.dims.n_layer, state.dims.n_head, state.dims.d_model, state.dims.seq_len,
      state.dims.vocab_size, state.dims.padded_vocab - state.dims.vocab_size,
      state.dtype == taco::DType::bf16 ? " (the run's bf16 parameters, widened)" : "");
  std::printf("taco-export: %s\n", tok.note.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return taco::run_tool("taco-export", [&] {
    const Options o = parse_args(argc, argv);
    if (o.help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return run(o);
  });
}
