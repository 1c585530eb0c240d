// CUDA graphs of a training step (engine/runtime/step_graph.h).
#include <cuda_runtime.h>

#include "engine/runtime/cuda_check.h"
#include "engine/runtime/step_graph.h"
#include "kernels/stream_memory.h"

namespace taco {

Stream create_compute_stream() {
  cudaStream_t s = nullptr;
  TACO_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
  return s;
}

void destroy_compute_stream(Stream stream) {
  if (stream) cudaStreamDestroy(stream);
}

void stream_synchronize(Stream stream) { TACO_CHECK_CUDA(cudaStreamSynchronize(stream)); }

StepGraph::~StepGraph() { release(); }

void StepGraph::release() {
  if (!exec_) return;
  cudaStreamSynchronize(stream_);  // no replay of it is still queued
  cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  exec_ = nullptr;
}

void StepGraph::run(const std::function<void()>& body) {
  if (!failure_.empty()) return body();
  if (exec_ && epoch_ != cuda::stream_memory_epoch()) release();
  if (!exec_ && !capture(body)) return body();
  TACO_CHECK_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream_));
}

// Capture mode "thread local": this thread's unsafe calls (a blocking copy, a synchronization)
// fail the capture; other threads are not affected.
bool StepGraph::capture(const std::function<void()>& body) {
  TACO_CHECK(stream_ != nullptr, "StepGraph: the legacy default stream cannot be captured");
  const unsigned long long epoch = cuda::stream_memory_epoch();
  TACO_CHECK_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  std::string error;
  try {
    body();
  } catch (const std::exception& e) {
    error = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (error.empty() && end != cudaSuccess)
    error = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  if (error.empty() && epoch != cuda::stream_memory_epoch())
    error = "the body allocated kernel memory while captured (run it once eagerly first)";
  cudaGraphExec_t exec = nullptr;
  if (error.empty()) {
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    if (inst != cudaSuccess)
      error = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
  }
  if (graph) cudaGraphDestroy(graph);
  if (!error.empty()) {
    (void)cudaGetLastError();  // a failed capture leaves its error behind; it is reported here
    failure_ = error;
    return false;
  }
  exec_ = exec;
  epoch_ = epoch;
  ++captures_;
  return true;
}

}  // namespace taco
