// taco-bench subcommands. Each takes the arguments after its name and returns the exit code;
// bad arguments throw taco::UserError. Add a subcommand here and in bench_main.cpp's table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace taco::bench {

// A byte count as given on the command line: a number with an optional unit B, K, M or G (powers
// of 1024). Anything else throws taco::UserError naming `option`.
int64_t parse_size(const std::string& option, const std::string& text);

// "a,b,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s);

// taco-bench codec [--cpu|--gpu] [--codecs LIST] [--rows R] [--cols C] [--reps N] [--seed S]
//                  [--threads T] [--min-bytes S] [--max-bytes S] [--json FILE]
int codec(const std::vector<std::string>& args);

// taco-bench step [--model 124m|350m|1.3b] [--steps N] [--warmup N] [--batch B] [--per-kernel]
//                 [--reps N] [--check] [--torch] [--torch-script PATH] [--seed S] [--json FILE]
int step(const std::vector<std::string>& args);

// taco-bench comm (under mpirun, any number of ranks) [--ops LIST] [--codecs LIST]
//                 [--min-bytes S] [--max-bytes S] [--factor F] [--iters N] [--warmup N]
//                 [--cols C] [--device auto|cpu|cuda] [--backend auto|nccl|mpi]
//                 [--chunks auto|N] [--json FILE]
int comm(const std::vector<std::string>& args);

}  // namespace taco::bench
