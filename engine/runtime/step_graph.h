// A training step as a CUDA graph: the step's ops are captured once from a stream and the graph is
// replayed every step after, so the host launches one graph instead of a few hundred kernels and
// the GPU runs them back to back. step_graph.cu implements it; in a CPU-only build
// step_graph_nocuda.cpp runs the body as it is.
//
// What a body may do: queue work on the stream only. No host synchronization, no blocking copy,
// no allocation, no op on the legacy default stream, and the same shapes and addresses every step
// (per-step values live in device memory the host writes before the replay). Run the body once
// eagerly first, so that lazily made state (cuBLASLt algorithm choice, workspaces) exists.
//
// A body that cannot be captured (some op broke the rules above) is reported once, in failure(),
// and then runs eagerly every step: the results are the same, only slower.
#pragma once

#include <functional>
#include <string>

#include "kernels/dtype.h"

namespace taco {

// A stream for the compute, created blocking: ordered with the legacy default stream both ways,
// as ops on the legacy stream itself were. The legacy stream cannot be captured.
Stream create_compute_stream();
void destroy_compute_stream(Stream stream);
// Waits until everything queued on `stream` has run.
void stream_synchronize(Stream stream);

class StepGraph {
 public:
  explicit StepGraph(Stream stream) : stream_(stream) {}
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Queues one step: replays the graph of `body`, capturing it first when there is none or the
  // kernels' per-stream memory has moved since the capture (kernels/stream_memory.h).
  void run(const std::function<void()>& body);

  bool replaying() const { return exec_ != nullptr; }
  int captures() const { return captures_; }               // how many times the body was captured
  const std::string& failure() const { return failure_; }  // why capture failed ("" if it did not)

 private:
  bool capture(const std::function<void()>& body);
  void release();

  Stream stream_;
  void* exec_ = nullptr;  // cudaGraphExec_t
  unsigned long long epoch_ = 0;
  int captures_ = 0;
  std::string failure_;
};

}  // namespace taco
