// The trainer's step as one CUDA graph (train.cuda_graph: auto) on a run of one GPU rank: every
// micro-batch's forward and backward, the squared gradient norm, the clip and the AdamW update,
// captured at the second step and replayed from then on. The host launches one graph a step
// instead of each kernel, and reads nothing in the middle of a step: the clip scale is taken on
// the device from the norm (kernels/adamw.h), lr and the step number go up before the step, each
// micro-batch's tokens go up with them (sampled while the previous step ran) and are copied into
// the model inside the graph; loss and norm come down when the step is done. The bits are the
// eager step's (tests/gpu/gpu_model_step.cpp checks it), so train.cuda_graph: off, which runs the
// eager step, is for debugging only.
//
// Only a single-rank run qualifies: any collective would need the host (MPI) or a capture of the
// communicator's own streams. Elsewhere the trainer runs its eager step and says why at start-up.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/step_graph.h"
#include "engine/runtime/tensor.h"
#include "engine/train/optimizer.h"
#include "model/gpt.h"

namespace taco {

class GraphStep {
 public:
  // Why a run of this config on `world_size` ranks and `device` steps eagerly; "" when it can
  // step as a graph.
  static std::string eager_reason(const Config& cfg, int world_size, DeviceKind device);

  // `grad_runs`: the gradient ranges the norm sums (the trainer's counted runs); `micro_steps`
  // micro-batches of `tokens` tokens each per step.
  // `dloss`: each token's share of the step's mean loss (1 / tokens per step).
  GraphStep(Stream stream, Gpt& model, AdamW& optimizer, std::vector<Tensor> grad_runs,
            int micro_steps, int tokens, float dloss, double grad_clip);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // Fills one micro-batch's tokens: (step, micro, inputs, targets), each [tokens] int32.
  using Sampler = std::function<void(int step, int micro, int32_t* inputs, int32_t* targets)>;

  struct Result {
    double loss_sum = 0;  // the per-token losses of every micro-batch, summed
    double sumsq = 0;     // the squared gradient norm over grad_runs
  };
  // Runs optimizer step `step` (0-based; the update is step + 1) at learning rate `lr` and waits
  // for it; samples step + 1's tokens while the GPU works. A non-finite norm leaves the weights
  // and the optimizer state as they were.
  Result run(int step, double lr, const Sampler& sample);

  // One line for the run log: replayed, or why not.
  std::string describe() const;
  const std::string& failure() const { return graph_.failure(); }  // "" unless capture failed

 private:
  void body();
  void fill(int slot, int step, const Sampler& sample);

  Stream stream_;
  Gpt& model_;
  AdamW& optimizer_;
  std::vector<Tensor> grad_runs_;
  int micro_steps_, tokens_;
  float dloss_;
  double grad_clip_;
  StepGraph graph_;
  int steps_run_ = 0;
  // Device: each micro-batch's inputs and targets, the step's scalars, the squared norm.
  void* device_ = nullptr;
  Tensor inputs_, targets_, scalars_, sumsq_;
  // Pinned host memory: two slots of tokens (this step's, the next one's) and the scalars; the
  // loss sum and the squared norm coming back.
  void* host_ = nullptr;
  int32_t* host_tokens_[2] = {nullptr, nullptr};  // inputs then targets, per slot
  int prefetched_step_ = -1;                      // the step whose tokens slot (step % 2) holds
  cuda::AdamWStepScalars* host_scalars_ = nullptr;
  double* host_out_ = nullptr;  // [loss sum, sumsq]
};

}  // namespace taco
