// taco-bench SUBCOMMAND [options]: benchmarks that print an aligned table and can write JSON.
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "tools/bench/bench.h"

namespace taco::bench {

int64_t parse_size(const std::string& option, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw UserError(option + ": '" + text + "' is not a size (e.g. 1M, 256K, 1G)");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "K"               ? 1024.0
                       : unit == "M"               ? 1048576.0
                       : unit == "G"               ? 1073741824.0
                                                   : -1;
  if (scale < 0 || !(v > 0)) throw UserError(option + ": '" + text + "' is not a size (e.g. 1M)");
  return int64_t(v * scale);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const std::string item =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace taco::bench

namespace {

struct Subcommand {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
  const char* help;
};

constexpr Subcommand kSubcommands[] = {
    {"codec", taco::bench::codec,
     "codec [--cpu|--gpu] [--codecs fp8_tensor,fp8_block,taco] [--rows R] [--cols C]\n"
     "      [--reps N] [--seed S] [--threads T] [--min-bytes 1M] [--max-bytes 1G] [--json FILE]\n"
     "      [--data gaussian,outliers,channels,zeros,constant] (--cpu)\n"
     "      GPU (default where one exists): encode, decode, decode-accumulate GB/s of the\n"
     "      device codecs at 1 MB .. 1 GB (x4 steps) of bf16 next to a device memcpy, and their\n"
     "      error;\n"
     "      --cpu: bytes/element, ratio vs bf16, relative and per-channel error and GB/s of\n"
     "      every codec on synthetic activations (docs/design.md §4)"},
    {"comm", taco::bench::comm,
     "comm [--ops all_reduce,reduce_scatter,all_gather] [--codecs none,taco,fp8_block]\n"
     "      [--min-bytes 1M] [--max-bytes 1G] [--factor 4] [--iters 20] [--warmup 5]\n"
     "      [--cols 1024] [--device auto|cpu|cuda] [--backend auto|nccl|mpi] [--chunks auto|N]\n"
     "      [--stage-piece 4M] [--json FILE]\n"
     "      under mpirun, any number of ranks: nccl-tests columns (size, count, time, algbw,\n"
     "      busbw, #wrong) for the native collective (none) and each codec, plus wire bytes\n"
     "      per rank and relative error against the native result; on a GPU the codecs run on\n"
     "      device buffers, pipelined in --chunks pieces (compression.chunks); --stage-piece:\n"
     "      the host-staging piece size with --backend mpi on a GPU (parallel.stage_piece_bytes)"},
    {"step", taco::bench::step,
     "step [--model 124m|350m|1.3b] [--steps N] [--warmup N] [--batch B] [--per-kernel]\n"
     "      [--reps N] [--check] [--torch] [--torch-script PATH] [--seed S] [--json FILE]\n"
     "      [--attention auto|own|cudnn] [--gemm tuned|heuristic] [--gemm-candidates 8]\n"
     "      [--graph on|off]\n"
     "      one bf16 training step on one GPU: ms/step, tokens/s, MFU, memory; per-kernel\n"
     "      breakdown; loss check; PyTorch eager and torch.compile on the same shapes;\n"
     "      attention by cuDNN's fused SDPA (auto: where it runs the shape) or our kernels;\n"
     "      the step replayed as a CUDA graph (on, the default) or launched op by op (off)"},
};

constexpr const char* kFooter =
    "Each table's header says what its columns count; --json FILE writes the same rows.\n"
    "Measured figures and their commands: tools/bench/RESULTS.md. Config keys and site\n"
    "names (compression.*, --chunks = compression.chunks): docs/config-reference.md.\n";

void usage(FILE* to) {
  std::fprintf(to,
               "usage: taco-bench SUBCOMMAND [options]    (taco-bench SUBCOMMAND --help: one)\n"
               "Benchmarks of taco's pieces alone, printed as aligned tables.\n");
  for (const Subcommand& s : kSubcommands) std::fprintf(to, "  %s\n", s.help);
  std::fputs(kFooter, to);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const Subcommand& s : kSubcommands) {
    if (name != s.name) continue;
    for (const std::string& a : args) {
      if (a == "--help" || a == "-h") {
        std::printf("usage: taco-bench %s\n%s", s.help, kFooter);
        return 0;
      }
    }
    try {
      return s.run(args);
    } catch (const taco::Error& e) {
      std::fprintf(stderr, "taco-bench %s: %s\n", s.name, e.what());
      return e.exit_code();
    }
  }
  std::fprintf(stderr, "taco-bench: unknown subcommand '%s'\n", name.c_str());
  usage(stderr);
  return 2;
}
