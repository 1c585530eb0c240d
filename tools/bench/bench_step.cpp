// taco-bench step: one full bf16 training step of a GPT-2-family model on one GPU (Gpt + AdamW
// + Arena on random tokens, no data files), timed with CUDA events:
//   zero grads -> forward -> backward -> grad norm -> clip -> AdamW (fp32 master weights),
// as a CUDA graph with the norm and clip on the device (as taco-train runs it on one GPU): the
// host reads nothing until the steps end.
// Prints ms/step, tokens/s, MFU (6N + 6LTd flops per token) against the datasheet's 989 TFLOP/s
// and the ~790 TFLOP/s a bf16 GEMM measures on an H200, and device memory. Options:
//   --per-kernel  every op family of the step timed alone, and the fused kernels that could
//                 replace some of them (bench_step_kernels.cpp);
//   --check       exits 1 unless the loss is finite, starts near ln(vocab) and falls (the batch
//                 repeats, so a working step must start memorizing it);
//   --torch       also runs tools/bench/pytorch_gpt2.py (eager and torch.compile) on the same
//                 shapes and prints taco's speedup over each;
//   --graph off   launches each op as the eager trainer does (train.cuda_graph: off), the norm
//                 read by the host; the default, on, replays the step as a CUDA graph from the
//                 second step on, the norm and the clip on the device. The same bits either way.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/matmul.h"
#include "tools/bench/bench.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/runtime/cuda_check.h"
#include "engine/train/metrics.h"
#include "kernels/attention.h"
#include "kernels/gradnorm.h"
#include "model/ops.h"
#include "tools/bench/bench_step.h"
#endif

namespace taco::bench {
namespace {

constexpr double kPeakTflops = 989.0;      // H100/H200 SXM dense bf16, datasheet
constexpr double kMeasuredTflops = 790.0;  // 8192^3 bf16 GEMM on random data, H200 (KINDS.md)

struct Args {
  std::string model = "124m";
  int steps = 20;
  int warmup = 5;
  int batch = 0;  // 0: the model's default micro-batch
  int reps = 10;  // per-kernel repetitions
  uint64_t seed = 1234;
  std::string json;
  std::string torch_script;
  std::string attention = "auto";  // auto | own | cudnn (kernels/attention.h's AttentionEngine)
  std::string gemm = "tuned";      // tuned | heuristic (kernels/matmul.h's matmul_set_autotune)
  int gemm_candidates = cuda::kMatmulDefaultCandidates;  // with tuned
  bool torch = false, per_kernel = false, check = false;
  bool graph = true;  // --graph on|off
};

Args parse_args(const std::vector<std::string>& a) {
  Args r;
  auto value = [&](size_t& i) -> const std::string& {
    if (i + 1 >= a.size()) throw UserError(a[i] + ": missing value");
    return a[++i];
  };
  auto count = [&](size_t& i, int min) {
    const std::string key = a[i];
    const std::string& v = value(i);
    try {
      size_t used = 0;
      const long n = std::stol(v, &used);
      if (used == v.size() && n >= min && n <= (1 << 20)) return int(n);
    } catch (...) {
    }
    throw UserError(key + ": '" + v + "' is not an integer >= " + std::to_string(min));
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == "--model") {
      r.model = value(i);
    } else if (a[i] == "--steps") {
      r.steps = count(i, 1);
    } else if (a[i] == "--warmup") {
      r.warmup = count(i, 0);
    } else if (a[i] == "--batch") {
      r.batch = count(i, 1);
    } else if (a[i] == "--reps") {
      r.reps = count(i, 1);
    } else if (a[i] == "--seed") {
      r.seed = uint64_t(count(i, 0));
    } else if (a[i] == "--json") {
      r.json = value(i);
    } else if (a[i] == "--torch") {
      r.torch = true;
    } else if (a[i] == "--torch-script") {
      r.torch_script = value(i);
      r.torch = true;
    } else if (a[i] == "--gemm") {
      r.gemm = value(i);
      if (r.gemm != "tuned" && r.gemm != "heuristic")
        throw UserError("--gemm: '" + r.gemm + "' is not one of tuned, heuristic");
    } else if (a[i] == "--gemm-candidates") {
      r.gemm_candidates = count(i, 1);
      if (r.gemm_candidates > cuda::kMatmulMaxCandidates)
        throw UserError("--gemm-candidates: " + std::to_string(r.gemm_candidates) +
                        " is more than cuBLASLt is asked for at most (" +
                        std::to_string(cuda::kMatmulMaxCandidates) + ")");
    } else if (a[i] == "--attention") {
      r.attention = value(i);
      if (r.attention != "auto" && r.attention != "own" && r.attention != "cudnn")
        throw UserError("--attention: '" + r.attention + "' is not one of auto, own, cudnn");
    } else if (a[i] == "--graph") {
      const std::string& v = value(i);
      if (v != "on" && v != "off") throw UserError("--graph: '" + v + "' is not one of on, off");
      r.graph = v == "on";
    } else if (a[i] == "--per-kernel") {
      r.per_kernel = true;
    } else if (a[i] == "--check") {
      r.check = true;
    } else {
      throw UserError("unknown option '" + a[i] + "'; see taco-bench --help");
    }
  }
  if (r.model != "124m" && r.model != "350m" && r.model != "1.3b")
    throw UserError("--model: '" + r.model + "' is not one of 124m, 350m, 1.3b");
  return r;
}

#if TACO_HAVE_CUDA

using step_detail::KernelRow;
using step_detail::Shape;
using step_detail::StepRunner;
using step_detail::TorchResult;
using step_detail::TorchRun;

Shape shape_of(const Args& a) {
  Shape s;
  if (a.model == "124m") s = {"gpt2-124m", 12, 768, 12, 1024, 16, 50257, 6e-4};
  if (a.model == "350m") s = {"gpt2-350m", 24, 1024, 16, 1024, 16, 50257, 3e-4};
  if (a.model == "1.3b") s = {"gpt-1.3b", 24, 2048, 16, 2048, 8, 50257, 2e-4};
  if (a.batch > 0) s.batch = a.batch;
  return s;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0 : x[x.size() / 2];
}

struct StepResult {
  double ms_mean = 0, ms_median = 0, ms_min = 0, ms_max = 0;
  double tokens_per_s = 0, mfu_peak = 0, mfu_measured = 0;
  double device_used_gib = 0, arena_gib = 0;
  double allocated_gib = 0;    // device_used_gib less what was in use before the model (context)
  std::vector<double> losses;  // warmup and timed steps
};

// Warmup steps, then `steps` steps with a CUDA event between consecutive steps.
StepResult run_steps(StepRunner& runner, const Args& a, size_t used_before) {
  StepResult r;
  // The size's learning rate after a 5-step linear warmup.
  auto lr = [&](int t) { return runner.shape().lr * std::min(1.0, t / 5.0); };
  int t = 1;
  for (int i = 0; i < a.warmup; ++i, ++t) runner.step(t, lr(t));
  std::vector<cudaEvent_t> events(a.steps + 1);
  for (auto& e : events) TACO_CHECK_CUDA(cudaEventCreate(&e));
  TACO_CHECK_CUDA(cudaDeviceSynchronize());
  TACO_CHECK_CUDA(cudaEventRecord(events[0], runner.stream()));
  for (int i = 0; i < a.steps; ++i) {
    runner.step(t, lr(t));
    ++t;
    TACO_CHECK_CUDA(cudaEventRecord(events[i + 1], runner.stream()));
  }
  TACO_CHECK_CUDA(cudaEventSynchronize(events[a.steps]));
  for (int k = 1; k < t; ++k) r.losses.push_back(runner.loss(k));
  std::vector<double> ms(a.steps);
  for (int i = 0; i < a.steps; ++i) {
    float x = 0;
    TACO_CHECK_CUDA(cudaEventElapsedTime(&x, events[i], events[i + 1]));
    ms[i] = x;
  }
  for (auto& e : events) TACO_CHECK_CUDA(cudaEventDestroy(e));
  double total = 0;
  for (double x : ms) total += x;
  r.ms_mean = total / a.steps;
  r.ms_median = median(ms);
  r.ms_min = *std::min_element(ms.begin(), ms.end());
  r.ms_max = *std::max_element(ms.begin(), ms.end());
  r.tokens_per_s = runner.tokens_per_step() / (r.ms_mean / 1e3);
  const double achieved = r.tokens_per_s * step_detail::flops_per_token(runner.dims()) / 1e12;
  r.mfu_peak = achieved / kPeakTflops;
  r.mfu_measured = achieved / kMeasuredTflops;
  size_t free_bytes = 0, total_bytes = 0;
  TACO_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Nothing is freed during steps (one arena; kernel workspaces only grow), so what is in use
  // now is the peak; it includes the CUDA context.
  r.device_used_gib = double(total_bytes - free_bytes) / (1 << 30);
  r.allocated_gib = double(total_bytes - free_bytes - used_before) / (1 << 30);
  r.arena_gib = double(runner.arena_bytes()) / (1 << 30);
  return r;
}

// --check: the step trains. Returns "" when it does, else what failed.
std::string check_losses(const std::vector<double>& losses, int vocab) {
  for (size_t i = 0; i < losses.size(); ++i)
    if (!std::isfinite(losses[i])) return "loss is not finite at step " + std::to_string(i + 1);
  if (losses.size() < 10) return "--check needs at least 10 steps (--warmup + --steps)";
  // GPT-2 init predicts almost uniformly: the first loss is ln(vocab) to within a few tenths.
  const double uniform = std::log(double(vocab));
  if (std::fabs(losses[0] - uniform) > 1.0)
    return "first loss " + std::to_string(losses[0]) +
           " is not near ln(vocab) = " + std::to_string(uniform);
  // The batch repeats: after 10+ AdamW steps the model has at least learned the batch's token
  // frequencies (ln(50257) -> about ln(#distinct targets), over a nat for 16k tokens).
  const size_t n = losses.size();
  const double last3 = (losses[n - 1] + losses[n - 2] + losses[n - 3]) / 3;
  if (!(last3 < losses[0] - 0.5))
    return "loss did not fall: first " + std::to_string(losses[0]) + ", mean of the last 3 " +
           std::to_string(last3) + " (expected at least 0.5 lower)";
  return "";
}

void print_kernels(const std::vector<KernelRow>& rows, double step_ms) {
  std::printf("\nper-kernel (each op family timed alone on the step's shapes, CUDA events)\n");
  std::printf("%-9s %-44s %5s %9s %9s %6s %8s %8s\n", "phase", "op", "calls", "ms/call", "ms/step",
              "%step", "TFLOP/s", "GB/s");
  for (const KernelRow& r : rows) {
    if (r.phase == "fused" || r.phase == "measured") continue;
    const double per_step = r.calls * r.ms_per_call;
    char tf[16] = "-", gb[16] = "-";
    if (r.flops_per_call > 0)
      std::snprintf(tf, sizeof tf, "%.0f", r.flops_per_call / (r.ms_per_call * 1e9));
    if (r.bytes_per_call > 0)
      std::snprintf(gb, sizeof gb, "%.0f", r.bytes_per_call / (r.ms_per_call * 1e6));
    std::printf("%-9s %-44s %5d %9.4f %9.3f %5.1f%% %8s %8s\n", r.phase.c_str(), r.op.c_str(),
                r.calls, r.ms_per_call, per_step, 100 * per_step / step_ms, tf, gb);
  }
  std::printf("\nmeasured in the step (the sum of its ops above vs the whole piece)\n");
  for (const KernelRow& m : rows) {
    if (m.phase != "measured") continue;
    double sum = 0;
    for (const KernelRow& r : rows)
      if (r.phase == m.op) sum += r.calls * r.ms_per_call;
    std::printf("  %-10s measured %8.3f ms, sum of its ops %8.3f ms, gaps %7.3f ms\n", m.op.c_str(),
                m.ms_per_call, sum, m.ms_per_call - sum);
  }
  std::printf(
      "\nalternatives the model does not call (saving = calls x (what it replaces - it))\n");
  std::printf("%-40s %-44s %5s %9s %9s\n", "alternative", "replaces", "calls", "ms/call",
              "saves ms");
  for (const KernelRow& f : rows) {
    if (f.phase != "fused") continue;
    double unfused = 0;
    for (const KernelRow& r : rows)
      if (r.phase != "fused" && r.phase != "measured" &&
          f.replaces.find("|" + r.op + "|") != std::string::npos)
        unfused += r.ms_per_call;
    std::string shown = f.replaces.substr(1, f.replaces.size() - 2);
    std::replace(shown.begin(), shown.end(), '|', '+');
    std::printf("%-40s %-44s %5d %9.4f %9.3f\n", f.op.c_str(), shown.c_str(), f.calls,
                f.ms_per_call, f.calls * (unfused - f.ms_per_call));
  }
}

std::string kernels_json(const std::vector<KernelRow>& rows) {
  std::string out = "[";
  for (const KernelRow& r : rows) {
    if (out.size() > 1) out += ",";
    out += JsonRecord()
               .add("phase", r.phase)
               .add("op", r.op)
               .add("calls", (long long)r.calls)
               .add("ms_per_call", r.ms_per_call)
               .add("flops_per_call", r.flops_per_call)
               .add("bytes_per_call", r.bytes_per_call)
               .add("replaces", r.replaces)
               .str();
  }
  return out + "]";
}

#endif  // TACO_HAVE_CUDA

}  // namespace

#if TACO_HAVE_CUDA

namespace step_detail {

double time_on_device(int reps, const std::function<void()>& f) {
  f();
  cudaEvent_t start, stop;
  TACO_CHECK_CUDA(cudaEventCreate(&start));
  TACO_CHECK_CUDA(cudaEventCreate(&stop));
  TACO_CHECK_CUDA(cudaEventRecord(start, nullptr));
  for (int i = 0; i < reps; ++i) f();
  TACO_CHECK_CUDA(cudaEventRecord(stop, nullptr));
  TACO_CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  TACO_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  TACO_CHECK_CUDA(cudaEventDestroy(start));
  TACO_CHECK_CUDA(cudaEventDestroy(stop));
  return ms / reps;
}

double flops_per_token(const GptDims& d) {
  return 6.0 * double(d.num_params()) + 6.0 * d.n_layer * double(d.seq_len) * d.d_model;
}

StepRunner::StepRunner(const Shape& shape, uint64_t seed, bool graph, int max_steps)
    : shape_(shape),
      dims_(GptDims::make(shape.layers, shape.heads, shape.d_model, shape.seq_len, shape.vocab, 1)),
      layout_(dims_, LayoutSpec{1, 0, 0, shape.layers, true, true}),
      arena_(DeviceKind::cuda),
      model_(layout_, shape.batch, /*slots=*/1, DeviceKind::cuda, DType::bf16, nullptr),
      optimizer_(layout_, DType::bf16, DeviceKind::cuda, AdamWConfig{}),
      use_graph_(graph),
      max_steps_(max_steps) {
  // Graph runs: before the first op, so every op and the kernels' per-stream workspaces use it.
  if (graph) compute_stream_.open();
  stream_ = compute_stream_.get();
  graph_ = std::make_unique<StepGraph>(stream_);
  model_.plan(arena_);
  optimizer_.plan(arena_);
  static_assert(sizeof(cuda::AdamWStepScalars) % sizeof(float) == 0);
  h_scalars_ =
      arena_.reserve("step.scalars", DType::f32, sizeof(cuda::AdamWStepScalars) / sizeof(float));
  h_sumsq_ = arena_.reserve("step.grad_sumsq", DType::f64, 1);
  arena_.allocate();
  model_.bind(arena_);
  optimizer_.bind(arena_, model_.params());
  scalars_ = arena_.get(h_scalars_);
  sumsq_ = arena_.get(h_sumsq_);
  TACO_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&host_scalars_),
                                 kRing * sizeof(cuda::AdamWStepScalars)));
  TACO_CHECK_CUDA(
      cudaMallocHost(reinterpret_cast<void**>(&host_losses_), size_t(max_steps) * sizeof(double)));
  for (int i = 0; i < kRing; ++i) {
    cudaEvent_t e = nullptr;
    TACO_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TACO_CHECK_CUDA(cudaEventRecord(e, stream_));
    slot_copied_.push_back(e);
  }
  std::vector<float> init(layout_.total());
  init_params_gpt2(layout_, seed, init.data());
  optimizer_.load_initial(init.data());
  // One random sequence of T + 1 tokens per row: targets are the inputs shifted by one.
  const int B = shape.batch, T = shape.seq_len;
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<int32_t> pick(0, shape.vocab - 1);
  inputs_.resize(size_t(B) * T);
  targets_.resize(size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t prev = pick(rng);
    for (int t = 0; t < T; ++t) {
      const int32_t next = pick(rng);
      inputs_[size_t(b) * T + t] = prev;
      targets_[size_t(b) * T + t] = next;
      prev = next;
    }
  }
  // The batch repeats: its tokens go up once (a blocking copy, which a graph could not hold).
  model_.set_batch(0, inputs_.data(), targets_.data());
}

StepRunner::~StepRunner() {
  cudaStreamSynchronize(stream_);
  for (void* e : slot_copied_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  cudaFreeHost(host_scalars_);
  cudaFreeHost(host_losses_);
  // The graph goes with the members, then the stream (compute_stream_ is declared first).
}

void StepRunner::zero_grads() { ops::zero(model_.grads()); }

double StepRunner::forward() {
  return model_.forward(inputs_.data(), targets_.data(), float(1.0 / tokens_per_step())) /
         tokens_per_step();
}

void StepRunner::backward() { model_.backward(float(1.0 / tokens_per_step())); }

double StepRunner::grad_norm() { return std::sqrt(ops::sum_of_squares(model_.grads())); }

void StepRunner::update(int t, double lr, double norm) {
  optimizer_.update(model_.params(), model_.grads(), lr, clip_scale(norm, 1.0), t);
}

void StepRunner::body() {
  const float dloss = float(1.0 / tokens_per_step());
  zero_grads();
  model_.zero_loss_sum();
  model_.forward_stage(0, dloss);
  model_.backward(dloss);
  ops::sum_of_squares_into(sumsq_, {model_.grads()});
  optimizer_.update_on_device(model_.params(), model_.grads(),
                              scalars_.as<cuda::AdamWStepScalars>(), sumsq_, model_.loss_sum(),
                              /*grad_clip=*/1.0);
}

void StepRunner::step(int t, double lr) {
  TACO_CHECK(t >= 1 && t <= max_steps_, "StepRunner::step: step out of range");
  if (!use_graph_) {
    // As the eager trainer runs a step, on the legacy stream: the tokens copied up, the norm read
    // by the host for the clip, the loss read after the update is queued.
    zero_grads();
    model_.set_batch(0, inputs_.data(), targets_.data());
    model_.forward_stage(0, float(1.0 / tokens_per_step()));
    backward();
    update(t, lr, grad_norm());
    host_losses_[t - 1] = model_.take_loss_sum();
    return;
  }
  // lr and the step up, from a ring slot whose last copy has run.
  const int slot = t % kRing;
  auto copied = static_cast<cudaEvent_t>(slot_copied_[slot]);
  TACO_CHECK_CUDA(cudaEventSynchronize(copied));
  host_scalars_[slot] = optimizer_.step_scalars(lr, t);
  TACO_CHECK_CUDA(cudaMemcpyAsync(scalars_.data, &host_scalars_[slot],
                                  sizeof(cuda::AdamWStepScalars), cudaMemcpyHostToDevice, stream_));
  TACO_CHECK_CUDA(cudaEventRecord(copied, stream_));
  // The first step runs eagerly: it makes what the ops create on first use (GEMM algorithm
  // choices, workspaces), which a capture must not.
  if (t > 1) {
    graph_->run([this] { body(); });
  } else {
    body();
  }
  TACO_CHECK_CUDA(cudaMemcpyAsync(&host_losses_[t - 1], model_.loss_sum().data, sizeof(double),
                                  cudaMemcpyDeviceToHost, stream_));
}

double StepRunner::loss(int t) {
  TACO_CHECK(t >= 1 && t <= max_steps_, "StepRunner::loss: step out of range");
  TACO_CHECK_CUDA(cudaStreamSynchronize(stream_));
  return host_losses_[t - 1] / tokens_per_step();
}

}  // namespace step_detail

int step(const std::vector<std::string>& args) {
  const Args a = parse_args(args);
  if (cuda_device_count() == 0)
    throw UserError("no CUDA device found; taco-bench step needs one GPU");
  const DeviceInfo device = select_device(true, 0);
  const Shape shape = shape_of(a);
  cuda::matmul_set_autotune(a.gemm == "tuned");
  cuda::matmul_set_autotune_candidates(a.gemm_candidates);
  cuda::attention_select_engine(a.attention == "own"     ? cuda::AttentionEngine::kOwn
                                : a.attention == "cudnn" ? cuda::AttentionEngine::kCudnn
                                                         : cuda::AttentionEngine::kAuto);
  // In use before the model: the CUDA context (what PyTorch's allocator statistics leave out).
  size_t free_before = 0, total_before = 0;
  TACO_CHECK_CUDA(cudaFree(nullptr));
  TACO_CHECK_CUDA(cudaMemGetInfo(&free_before, &total_before));

  auto runner = std::make_unique<StepRunner>(shape, a.seed, a.graph, a.warmup + a.steps);
  const GptDims d = runner->dims();  // a copy: the runner goes before the JSON is written
  std::printf(
      "taco-bench step: %s (L=%d d=%d H=%d T=%d B=%d, vocab %d->%d), %.1fM params, bf16 "
      "weights + fp32 master/AdamW, on %s\n",
      shape.name.c_str(), d.n_layer, d.d_model, d.n_head, d.seq_len, shape.batch, d.vocab_size,
      d.padded_vocab, d.num_params() / 1e6, device.name.c_str());
  std::printf("%d warmup + %d timed steps, %d tokens/step, %.3g flops/token (6N + 6LTd)\n",
              a.warmup, a.steps, runner->tokens_per_step(), step_detail::flops_per_token(d));
  const std::string attention_fwd =
      cuda::attention_engine_description(false, shape.batch, d.seq_len, d.d_model, d.n_head);
  const std::string attention_bwd =
      cuda::attention_engine_description(true, shape.batch, d.seq_len, d.d_model, d.n_head);
  std::printf("attention (--attention %s): forward %s; backward %s\n", a.attention.c_str(),
              attention_fwd.c_str(), attention_bwd.c_str());
  const std::string gemm_text =
      a.gemm == "tuned" ? "the fastest of cuBLASLt's first " + std::to_string(a.gemm_candidates) +
                              " candidates, timed per shape"
                        : std::string("cuBLASLt's first heuristic choice");
  std::printf("GEMM algorithms (--gemm %s): %s\n", a.gemm.c_str(), gemm_text.c_str());
  std::fflush(stdout);

  const StepResult r = run_steps(*runner, a, total_before - free_before);
  const StepGraph& g = runner->graph();
  const std::string graph_text =
      !a.graph               ? "off"
      : !g.failure().empty() ? "failed (" + g.failure() + "): the steps ran eagerly"
      : g.captures() > 0     ? "on (captured " + std::to_string(g.captures()) + "x, replayed)"
                             : "on, but never captured (one step: the first runs eagerly)";
  std::printf("CUDA graph (--graph %s): %s\n", a.graph ? "on" : "off", graph_text.c_str());
  // mem GiB: all device memory in use, CUDA context included; alloc GiB: without the context
  // (arena + cuBLASLt workspace + kernel scratch), comparable to PyTorch's reserved peak.
  std::printf("\n%-10s %10s %10s %10s %12s %9s %9s %10s %10s %10s\n", "impl", "ms/step", "median",
              "min", "tokens/s", "MFU@989", "MFU@790", "mem GiB", "alloc GiB", "arena GiB");
  std::printf("%-10s %10.2f %10.2f %10.2f %12.0f %8.1f%% %8.1f%% %10.2f %10.2f %10.2f\n", "taco",
              r.ms_mean, r.ms_median, r.ms_min, r.tokens_per_s, 100 * r.mfu_peak,
              100 * r.mfu_measured, r.device_used_gib, r.allocated_gib, r.arena_gib);
  std::printf("loss: first %.4f, last %.4f (one repeated batch, lr %.1e after a 5-step warmup)\n",
              r.losses.front(), r.losses.back(), shape.lr);

  std::vector<KernelRow> kernels;
  if (a.per_kernel) {
    kernels = step_detail::time_kernels(*runner, a.reps);
    print_kernels(kernels, r.ms_mean);
  }
  std::string check_failure;
  if (a.check) {
    check_failure = check_losses(r.losses, shape.vocab);
    std::printf("\ncheck: %s\n", check_failure.empty() ? "PASS (loss finite and falling)"
                                                       : ("FAIL: " + check_failure).c_str());
  }
  runner.reset();  // frees the arena before PyTorch allocates

  std::vector<TorchResult> torch;
  if (a.torch) {
    torch = run_torch(TorchRun{a.torch_script, a.steps, std::max(a.warmup, 3), kPeakTflops},
                      shape);  // torch.compile compiles in its first steps
    // Memory: taco's allocations without the CUDA context against PyTorch's allocator peaks.
    std::printf("\n%-16s %10s %12s %22s %16s\n", "impl", "ms/step", "tokens/s",
                "taco speedup (tok/s)", "peak mem GiB");
    std::printf("%-16s %10.2f %12.0f %22s %16.2f\n", "taco", r.ms_mean, r.tokens_per_s, "1.00x",
                r.allocated_gib);
    for (const TorchResult& t : torch) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.2fx", r.tokens_per_s / t.tokens_per_s);
      std::printf("%-16s %10.2f %12.0f %22s %16.2f\n", ("torch " + t.variant).c_str(), t.ms,
                  t.tokens_per_s, ratio, t.reserved_gib);
    }
    std::printf(
        "(taco: all its device allocations; torch: the caching allocator's reserved "
        "peak, which holds its\n allocated peak; neither counts the CUDA context)\n");
  }

  if (!a.json.empty()) {
    JsonRecord rec;
    rec.add("impl", std::string("taco"))
        .add("model", shape.name)
        .add("device", device.name)
        .add("layers", (long long)d.n_layer)
        .add("d_model", (long long)d.d_model)
        .add("heads", (long long)d.n_head)
        .add("seq_len", (long long)d.seq_len)
        .add("batch", (long long)shape.batch)
        .add("gemm_algorithms", a.gemm)
        .add("gemm_candidates", (long long)(a.gemm == "tuned" ? a.gemm_candidates : 1))
        .add("graph", graph_text)
        .add("attention_forward", attention_fwd)
        .add("attention_backward", attention_bwd)
        .add("vocab", (long long)d.padded_vocab)
        .add("params", (long long)d.num_params())
        .add("steps", (long long)a.steps)
        .add("ms_per_step", r.ms_mean)
        .add("ms_median", r.ms_median)
        .add("ms_min", r.ms_min)
        .add("ms_max", r.ms_max)
        .add("tokens_per_s", r.tokens_per_s)
        .add("mfu", r.mfu_peak)
        .add("mfu_vs_measured_790", r.mfu_measured)
        .add("device_used_gib", r.device_used_gib)
        .add("arena_gib", r.arena_gib)
        .add("allocated_gib", r.allocated_gib)
        .add("loss_first", r.losses.front())
        .add("loss_last", r.losses.back());
    if (a.check) rec.add("check", check_failure.empty() ? std::string("pass") : check_failure);
    if (a.per_kernel) rec.add_raw("kernels", kernels_json(kernels));
    if (a.torch) {
      std::string arr = "[";
      for (const TorchResult& t : torch) {
        if (arr.size() > 1) arr += ",";
        arr += t.line;
      }
      rec.add_raw("torch", arr + "]");
    }
    std::ofstream f(a.json);
    if (!(f << rec.str() << "\n")) throw UserError("--json " + a.json + ": cannot write");
    std::printf("\nwrote %s\n", a.json.c_str());
  }
  return check_failure.empty() ? 0 : 1;
}

#else  // !TACO_HAVE_CUDA

int step(const std::vector<std::string>& args) {
  parse_args(args);
  throw UserError("this build has no CUDA backend; taco-bench step needs a CUDA build and a GPU");
}

#endif  // TACO_HAVE_CUDA

}  // namespace taco::bench
