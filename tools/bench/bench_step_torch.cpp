// taco-bench step --torch: the PyTorch reference (tools/bench/pytorch_gpt2.py, eager and
// torch.compile) run on the step's shapes in a child process, its JSON lines read back.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/check.h"

#if TACO_HAVE_CUDA
#include "tools/bench/bench_step.h"

namespace taco::bench::step_detail {
namespace {

std::string find_torch_script(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) {
    if (!fs::exists(given)) throw UserError("--torch-script " + given + ": no such file");
    return given;
  }
  std::vector<fs::path> candidates = {"tools/bench/pytorch_gpt2.py"};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / ".." / "tools/bench/pytorch_gpt2.py");
  for (const fs::path& p : candidates)
    if (fs::exists(p)) return p.string();
  throw UserError(
      "--torch: tools/bench/pytorch_gpt2.py not found from here; run from the repository root or "
      "pass --torch-script PATH");
}

// The number after "key": in one JSON line (json.dumps spacing), NaN when absent.
double json_field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return NAN;
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}

}  // namespace

std::vector<TorchResult> run_torch(const TorchRun& run, const Shape& s) {
  // Options appended one by one (GCC 12 warns falsely on long literal + std::string chains).
  std::string cmd = "python3 '";
  cmd += find_torch_script(run.script);
  cmd += "'";
  auto option = [&](const char* key, double value) {
    char text[64];
    std::snprintf(text, sizeof text, " --%s %.10g", key, value);
    cmd += text;
  };
  option("layers", s.layers);
  option("d-model", s.d_model);
  option("heads", s.heads);
  option("seq-len", s.seq_len);
  option("batch", s.batch);
  option("vocab", s.vocab);
  option("steps", run.steps);
  option("warmup", run.warmup);
  option("peak-tflops", run.peak_tflops);
  std::printf("\n$ %s\n", cmd.c_str());
  std::fflush(stdout);
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) throw Error("--torch: could not start python3", 1);
  std::vector<TorchResult> results;
  char buf[8192];
  while (std::fgets(buf, sizeof buf, pipe)) {
    std::string line(buf);
    std::fputs(line.c_str(), stdout);
    if (line.rfind("{", 0) != 0 || line.find("\"impl\": \"torch\"") == std::string::npos) continue;
    TorchResult r;
    r.line = line.substr(0, line.find_last_not_of("\r\n") + 1);
    r.variant = line.find("\"variant\": \"compile\"") != std::string::npos ? "compile" : "eager";
    r.ms = json_field(line, "ms_per_step");
    r.tokens_per_s = json_field(line, "tokens_per_s");
    r.reserved_gib = json_field(line, "reserved_peak_gib");
    results.push_back(r);
  }
  const int status = pclose(pipe);
  if (status != 0)
    throw Error(
        "--torch: " + cmd + " failed (status " + std::to_string(status) + "); its output is above",
        1);
  return results;
}

}  // namespace taco::bench::step_detail

#endif  // TACO_HAVE_CUDA
