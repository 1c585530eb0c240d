#include "engine/train/graph_step.h"

#include <utility>

#include "engine/runtime/memory.h"
#include "kernels/check.h"
#include "model/ops.h"
#include "parallel/pipeline.h"

namespace taco {

namespace {

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

std::string GraphStep::eager_reason(const Config& cfg, int world_size, DeviceKind device) {
  if (cfg.train.cuda_graph == "off") return "train.cuda_graph: off";
  if (device != DeviceKind::cuda) return "CPU ranks";
  if (!built_with_cuda()) return "a build without CUDA";
  if (world_size != 1)
    return std::to_string(world_size) + " ranks: the collectives run outside a graph";
  return "";
}

GraphStep::GraphStep(Stream stream, Gpt& model, AdamW& optimizer, std::vector<Tensor> grad_runs,
                     int micro_steps, int tokens, float dloss, double grad_clip)
    : stream_(stream),
      model_(model),
      optimizer_(optimizer),
      grad_runs_(std::move(grad_runs)),
      micro_steps_(micro_steps),
      tokens_(tokens),
      dloss_(dloss),
      grad_clip_(grad_clip),
      graph_(stream) {
  TACO_CHECK(micro_steps >= 1 && tokens >= 1, "GraphStep: no tokens to run");
  const size_t all = size_t(micro_steps) * size_t(tokens);
  const size_t token_bytes = round_up(all * sizeof(int32_t));
  const size_t scalar_bytes = round_up(sizeof(cuda::AdamWStepScalars));
  char* d = static_cast<char*>(
      device_alloc(DeviceKind::cuda, 2 * token_bytes + scalar_bytes + round_up(sizeof(double))));
  device_ = d;
  inputs_ = Tensor{d, DType::i32, DeviceKind::cuda, all};
  targets_ = Tensor{d + token_bytes, DType::i32, DeviceKind::cuda, all};
  scalars_ =
      Tensor{d + 2 * token_bytes, DType::u8, DeviceKind::cuda, sizeof(cuda::AdamWStepScalars)};
  sumsq_ = Tensor{d + 2 * token_bytes + scalar_bytes, DType::f64, DeviceKind::cuda, 1};
  char* h = static_cast<char*>(
      host_pinned_alloc(4 * token_bytes + scalar_bytes + round_up(2 * sizeof(double))));
  host_ = h;
  host_tokens_[0] = reinterpret_cast<int32_t*>(h);
  host_tokens_[1] = reinterpret_cast<int32_t*>(h + 2 * token_bytes);
  host_scalars_ = reinterpret_cast<cuda::AdamWStepScalars*>(h + 4 * token_bytes);
  host_out_ = reinterpret_cast<double*>(h + 4 * token_bytes + scalar_bytes);
}

GraphStep::~GraphStep() {
  stream_synchronize(stream_);
  device_free(DeviceKind::cuda, device_);
  host_pinned_free(host_);
}

void GraphStep::fill(int slot, int step, const Sampler& sample) {
  const size_t all = size_t(micro_steps_) * size_t(tokens_);
  int32_t* in = host_tokens_[slot];
  int32_t* tg = in + all;
  for (int m = 0; m < micro_steps_; ++m)
    sample(step, m, in + size_t(m) * tokens_, tg + size_t(m) * tokens_);
  prefetched_step_ = step;
}

// The eager step's order exactly (trainer.cpp): zero, 1F1B over the micro-batches on one stage,
// the norm over the counted runs, the update.
void GraphStep::body() {
  ops::zero(model_.grads());
  model_.zero_loss_sum();
  PipelineStage stage;
  stage.forward = [this](int micro, int slot) {
    const size_t at = size_t(micro) * size_t(tokens_);
    model_.set_batch(slot, inputs_.slice(at, tokens_), targets_.slice(at, tokens_));
    model_.forward_stage(slot, dloss_);
  };
  stage.backward = [this](int, int slot) { model_.backward_stage(slot, dloss_); };
  run_1f1b(nullptr, micro_steps_, 1, stage);
  ops::sum_of_squares_into(sumsq_, grad_runs_);
  optimizer_.update_on_device(model_.params(), model_.grads(),
                              static_cast<const cuda::AdamWStepScalars*>(scalars_.data), sumsq_,
                              model_.loss_sum(), grad_clip_);
}

GraphStep::Result GraphStep::run(int step, double lr, const Sampler& sample) {
  const int slot = step % 2;
  if (prefetched_step_ != step) fill(slot, step, sample);
  const size_t all = size_t(micro_steps_) * size_t(tokens_);
  *host_scalars_ = optimizer_.step_scalars(lr, step + 1);
  device_copy_async(inputs_.data, host_tokens_[slot], all * sizeof(int32_t), stream_);
  device_copy_async(targets_.data, host_tokens_[slot] + all, all * sizeof(int32_t), stream_);
  device_copy_async(scalars_.data, host_scalars_, sizeof(cuda::AdamWStepScalars), stream_);
  // The first step runs eagerly: it makes what the ops create on first use (GEMM algorithm
  // choices, workspaces), which a capture must not.
  if (steps_run_ == 0) {
    body();
  } else {
    graph_.run([this] { body(); });
  }
  ++steps_run_;
  device_copy_async(&host_out_[0], model_.loss_sum().data, sizeof(double), stream_);
  device_copy_async(&host_out_[1], sumsq_.data, sizeof(double), stream_);
  // Taken, as Gpt::take_loss_sum leaves it: evaluation adds its own losses to the same sum.
  model_.zero_loss_sum();
  fill(1 - slot, step + 1, sample);  // while the GPU runs this step
  stream_synchronize(stream_);
  return {host_out_[0], host_out_[1]};
}

std::string GraphStep::describe() const {
  if (!graph_.failure().empty()) return "eager: the capture failed (" + graph_.failure() + ")";
  if (graph_.captures() == 0) return "a CUDA graph from the second step on";
  return "a CUDA graph, captured " + std::to_string(graph_.captures()) + "x and replayed";
}

}  // namespace taco
