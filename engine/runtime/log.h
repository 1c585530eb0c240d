// Rank-aware logging on spdlog. Rank 0 prints to the terminal unless `all_ranks` is set; every
// rank can also append to a log file in the run directory.
#pragma once

#include <string>

namespace taco {

void init_logging(int rank, bool all_ranks, const std::string& log_file = "");

}  // namespace taco
