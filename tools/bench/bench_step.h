// Internal to `taco-bench step` (bench_step.cpp, bench_step_kernels.cpp): the model shapes, one
// full bf16 training step on one GPU, and the per-kernel breakdown. CUDA builds only.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/arena.h"
#include "engine/runtime/step_graph.h"
#include "engine/train/optimizer.h"
#include "model/gpt.h"
#include "model/ops.h"
#include "model/param_layout.h"

namespace taco::bench::step_detail {

// GPT-2 family shapes (the vocabulary is padded to 50304 by GptDims).
struct Shape {
  std::string name;
  int layers, d_model, heads, seq_len, batch;
  int vocab = 50257;
  double lr;  // GPT-3 paper's learning rate for the size (used by --check)
};

// 6N + 6LTd (docs/design.md §7): N parameters (padded vocabulary included), attention's causal
// matmuls counted as 6LTd.
double flops_per_token(const GptDims& dims);

// The model, its optimizer and one batch of random tokens, all in one device arena, on a stream
// of its own. A step is what the trainer does per optimizer step with one micro-batch:
//   zero grads -> forward -> backward -> grad norm -> clip -> AdamW.
// Without `graph`, as the eager trainer runs it on the legacy stream: the tokens copied up and the
// norm read by the host. With `graph`, on a stream of its own with nothing read by the host (the
// norm and the clip stay on the device, lr and the step number are copied up before the step, the
// loss down after it), as a CUDA graph from the second step on (captured once, replayed:
// engine/runtime/step_graph.h). Both give the same bits.
class StepRunner {
 public:
  // `max_steps`: the most steps step() will be called for (the losses are kept on the host).
  StepRunner(const Shape& shape, uint64_t seed, bool graph, int max_steps);
  ~StepRunner();

  // Queues the whole step; `t` is the 1-based optimizer step (1..max_steps). Does not wait.
  void step(int t, double lr);
  // The mean loss of step t's forward; waits for that step.
  double loss(int t);
  Stream stream() const { return stream_; }
  const StepGraph& graph() const { return *graph_; }

  // The step's pieces, for the breakdown, with the host-side norm (step() queues the same ops
  // and reads nothing).
  void zero_grads();
  double forward();  // mean loss
  void backward();
  double grad_norm();
  void update(int t, double lr, double norm);

  const GptDims& dims() const { return dims_; }
  const ParamLayout& layout() const { return layout_; }
  const Shape& shape() const { return shape_; }
  size_t arena_bytes() const { return arena_.total_bytes(); }
  int tokens_per_step() const { return shape_.batch * shape_.seq_len; }

 private:
  void body();  // the step's ops, as captured

  Shape shape_;
  GptDims dims_;
  ParamLayout layout_;
  ops::ComputeStream compute_stream_;  // opened for graph runs; the legacy stream otherwise
  Stream stream_ = nullptr;
  Arena arena_;
  Gpt model_;
  AdamW optimizer_;
  std::vector<int32_t> inputs_, targets_;
  size_t h_scalars_ = 0, h_sumsq_ = 0;
  Tensor scalars_, sumsq_;  // the step's lr and step (cuda::AdamWStepScalars); its squared norm
  bool use_graph_;
  std::unique_ptr<StepGraph> graph_;
  int max_steps_;
  // Pinned host memory: a ring of step scalars (each slot reused once its copy has run, tracked
  // by an event) and one loss sum per step.
  static constexpr int kRing = 4;
  cuda::AdamWStepScalars* host_scalars_ = nullptr;
  double* host_losses_ = nullptr;
  std::vector<void*> slot_copied_;  // cudaEvent_t per ring slot
};

// One op family of the step, timed alone on the model's shapes.
struct KernelRow {
  std::string phase;  // forward | backward | optimizer | fused (an alternative, not in the step)
  std::string op;
  int calls = 0;              // per step
  double ms_per_call = 0;     // mean over the timed repetitions
  double flops_per_call = 0;  // 0 where the op is memory-bound
  double bytes_per_call = 0;  // device memory moved at least once (0 where compute-bound)
  std::string replaces;       // fused rows: the ops of the step this would replace
};

// Times every op family of one step (the calls model/gpt.cpp makes, through model/ops.h), the
// optimizer pieces on `runner`, and the fused kernels that could replace some of them.
std::vector<KernelRow> time_kernels(StepRunner& runner, int reps);

// The PyTorch reference (tools/bench/pytorch_gpt2.py, eager and torch.compile) on the same
// shapes, run as a child process (bench_step_torch.cpp).
struct TorchRun {
  std::string script;  // empty: found from the working folder or the binary's
  int steps = 20, warmup = 3;
  double peak_tflops = 989.0;  // for its MFU column
};
struct TorchResult {
  std::string variant, line;                                // eager | compile; its JSON line
  double ms = NAN, tokens_per_s = NAN, reserved_gib = NAN;  // NaN: absent from its line
};
std::vector<TorchResult> run_torch(const TorchRun& run, const Shape& shape);

// CUDA-event timing of `reps` runs of f after one untimed run: mean milliseconds per run.
double time_on_device(int reps, const std::function<void()>& f);

}  // namespace taco::bench::step_detail
