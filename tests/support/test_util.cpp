#include "tests/support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace taco::test {

namespace {
// Escapes single quotes for use inside '...'.
std::string shell_quote_single(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out;
}
}  // namespace

uint64_t fresh_seed() {
  // TACO_TEST_SEED replays the seed a failure printed.
  if (const char* fixed = std::getenv("TACO_TEST_SEED"); fixed && *fixed)
    return std::strtoull(fixed, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::vector<float> random_normal(size_t n, uint64_t seed, float mean, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double relative_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

std::string source_dir() { return TACO_SOURCE_DIR; }
std::string binary_dir() { return TACO_BINARY_DIR; }

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = float_to_bf16(x[i]);
  return y;
}

std::vector<float> to_float(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_float(x[i]);
  return y;
}

std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(TACO_BINARY_DIR) / "test-scratch" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The variables an MPI singleton (this test process) sets for itself; a child MPI program that
// inherits them would try to join this process's job instead of starting its own.
std::string clean_mpi_environment() {
  std::string unset;
  for (char** e = environ; *e; ++e) {
    std::string var(*e);
    std::string name = var.substr(0, var.find('='));
    const bool mpi = name.rfind("PMIX_", 0) == 0 || name.rfind("OMPI_", 0) == 0;
    const bool user_setting =
        name.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) == 0 || name == "OMPI_MCA_rmaps_base_oversubscribe";
    if (mpi && !user_setting) unset += " -u " + name;
  }
  return unset.empty() ? "" : "env" + unset + " ";
}

CommandResult run_command(const std::string& cmd) {
  std::string full = clean_mpi_environment() + "sh -c '" + shell_quote_single(cmd) + "' 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  int status = pclose(pipe);
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, out};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace taco::test
