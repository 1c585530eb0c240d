#include "kernels/check.h"

#include <atomic>

namespace taco {

namespace {
std::atomic<int> g_error_rank{-1};
}

void set_error_rank(int rank) { g_error_rank = rank; }
int error_rank() { return g_error_rank; }

void fail_status(const char* library, const char* call, long code, const std::string& detail,
                 const char* file, int line) {
  std::string msg = "rank " + std::to_string(error_rank()) + ": " + library + " " + call +
                    " failed (" + std::to_string(code) + ")";
  if (!detail.empty()) msg += ": " + detail;
  msg += " [" + std::string(file) + ":" + std::to_string(line) + "]";
  throw Error(msg, 1);
}

}  // namespace taco
