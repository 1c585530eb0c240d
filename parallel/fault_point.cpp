#include "parallel/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace taco {

namespace {

std::atomic<bool> g_armed{false};
std::string g_name;  // written once by init_fault_point, before any fault_point call
long g_remaining = 0;

}  // namespace

void init_fault_point(int world_rank) {
  const char* spec = std::getenv("TACO_FAULT_POINT");
  if (!spec || !*spec) return;
  std::string s = spec;
  int rank = 0;
  long count = 1;
  if (const size_t at = s.find('@'); at != std::string::npos) {
    rank = std::atoi(s.c_str() + at + 1);
    s.resize(at);
  }
  if (const size_t colon = s.find(':'); colon != std::string::npos) {
    count = std::max(1L, std::atol(s.c_str() + colon + 1));
    s.resize(colon);
  }
  if (rank != world_rank) return;
  g_name = s;
  g_remaining = count;
  g_armed.store(true);
}

void fault_point(const char* name) {
  if (!g_armed.load(std::memory_order_relaxed) || g_name != name || --g_remaining > 0) return;
  char line[160];
  const int n =
      std::snprintf(line, sizeof line, "taco: test hook TACO_FAULT_POINT: SIGKILL at %s\n", name);
  const ssize_t ignored = ::write(STDERR_FILENO, line, size_t(n));
  (void)ignored;
  ::kill(::getpid(), SIGKILL);
}

}  // namespace taco
