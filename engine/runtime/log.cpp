#include "engine/runtime/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

namespace taco {

void init_logging(int rank, bool all_ranks, const std::string& log_file) {
  std::vector<spdlog::sink_ptr> sinks;
  auto console = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  console->set_level((rank == 0 || all_ranks) ? spdlog::level::info : spdlog::level::err);
  sinks.push_back(console);
  if (!log_file.empty()) {
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, false));
  }
  auto logger = std::make_shared<spdlog::logger>("taco", sinks.begin(), sinks.end());
  std::string prefix = all_ranks ? "[rank " + std::to_string(rank) + "] " : "";
  logger->set_pattern(prefix + "%v");
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace taco
