// parallel/staging_engine.h with the CUDA runtime (CUDA builds; staging_engine_nocuda.cpp stands
// in without CUDA).
#include "parallel/staging_engine.h"

#include <cuda_runtime.h>

#include <chrono>
#include <vector>

#include "engine/runtime/cuda_check.h"
#include "kernels/check.h"

namespace taco {

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

char* at(void* p, size_t offset) { return static_cast<char*>(p) + offset; }
const char* at(const void* p, size_t offset) { return static_cast<const char*>(p) + offset; }

}  // namespace

struct StagingEngine::Cuda {
  cudaStream_t down = nullptr, up = nullptr;
  cudaEvent_t ready = nullptr;
  std::vector<cudaEvent_t> piece_done;  // one per piece of the largest plan so far
  void* host[kHostSlots] = {};
  size_t host_bytes[kHostSlots] = {};
  void* device[kDeviceSlots] = {};
  size_t device_bytes[kDeviceSlots] = {};

  Cuda() {
    TACO_CHECK_CUDA(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    TACO_CHECK_CUDA(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    TACO_CHECK_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  }
  ~Cuda() {
    // No throwing from a destructor: a failing free leaves memory behind, nothing worse.
    for (void* p : host)
      if (p) cudaFreeHost(p);
    for (void* p : device)
      if (p) cudaFree(p);
    for (cudaEvent_t e : piece_done) cudaEventDestroy(e);
    cudaEventDestroy(ready);
    cudaStreamDestroy(down);
    cudaStreamDestroy(up);
  }
  cudaEvent_t event(size_t j) {
    while (piece_done.size() <= j) {
      cudaEvent_t e = nullptr;
      TACO_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      piece_done.push_back(e);
    }
    return piece_done[j];
  }
};

StagingEngine::StagingEngine() = default;
StagingEngine::~StagingEngine() = default;

void* StagingEngine::host(int slot, size_t bytes) {
  TACO_CHECK(slot >= 0 && slot < kHostSlots, "staging host slot " + std::to_string(slot));
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  Cuda& c = *cuda_;
  if (bytes > c.host_bytes[slot]) {
    if (c.host[slot]) TACO_CHECK_CUDA(cudaFreeHost(c.host[slot]));
    c.host[slot] = nullptr;
    c.host_bytes[slot] = 0;
    TACO_CHECK_CUDA(cudaMallocHost(&c.host[slot], bytes));
    c.host_bytes[slot] = bytes;
  }
  return c.host[slot];
}

void* StagingEngine::device(int slot, size_t bytes) {
  TACO_CHECK(slot >= 0 && slot < kDeviceSlots, "staging device slot " + std::to_string(slot));
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  Cuda& c = *cuda_;
  if (bytes > c.device_bytes[slot]) {
    release(slot);
    TACO_CHECK_CUDA(cudaMalloc(&c.device[slot], bytes));
    c.device_bytes[slot] = bytes;
  }
  return c.device[slot];
}

void StagingEngine::release(int slot) {
  TACO_CHECK(slot >= 0 && slot < kDeviceSlots, "staging device slot " + std::to_string(slot));
  if (!cuda_ || !cuda_->device[slot]) return;
  // The copy streams may still read or write it only inside run(), which has returned.
  TACO_CHECK_CUDA(cudaFree(cuda_->device[slot]));
  cuda_->device[slot] = nullptr;
  cuda_->device_bytes[slot] = 0;
}

Stream StagingEngine::up_stream() {
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  return cuda_->up;
}

void StagingEngine::to_host(void* host, const void* dev, size_t bytes, Stream after) {
  TACO_CHECK_CUDA(cudaStreamSynchronize(after));
  TACO_CHECK_CUDA(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

void StagingEngine::to_device(void* dev, const void* host, size_t bytes) {
  TACO_CHECK_CUDA(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
}

void StagingEngine::copy_on_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (dst != src && bytes > 0)
    TACO_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  TACO_CHECK_CUDA(cudaStreamSynchronize(stream));
}

void StagingEngine::fill(void* p, unsigned char value, size_t bytes) {
  TACO_CHECK_CUDA(cudaMemset(p, value, bytes));
}

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on older runtimes reports an error: clear it
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

void wait_for_stream(Stream stream) {
  static const bool has_device = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  if (has_device) TACO_CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGetLastError();  // a failed device count leaves its error behind: clear it
}

namespace {

void queue_copy(const staging::Copy& c, void* dst_dev, const void* src_host, void* dst_host,
                const void* src_dev, bool to_host, cudaStream_t s) {
  if (c.bytes == 0 || c.rows == 0) return;
  if (to_host) {
    if (c.rows == 1) {
      TACO_CHECK_CUDA(cudaMemcpyAsync(at(dst_host, c.host_offset), at(src_dev, c.dev_offset),
                                      c.bytes, cudaMemcpyDeviceToHost, s));
    } else {
      TACO_CHECK_CUDA(cudaMemcpy2DAsync(at(dst_host, c.host_offset), c.host_pitch,
                                        at(src_dev, c.dev_offset), c.dev_pitch, c.bytes, c.rows,
                                        cudaMemcpyDeviceToHost, s));
    }
  } else {
    if (c.rows == 1) {
      TACO_CHECK_CUDA(cudaMemcpyAsync(at(dst_dev, c.dev_offset), at(src_host, c.host_offset),
                                      c.bytes, cudaMemcpyHostToDevice, s));
    } else {
      TACO_CHECK_CUDA(cudaMemcpy2DAsync(at(dst_dev, c.dev_offset), c.dev_pitch,
                                        at(src_host, c.host_offset), c.host_pitch, c.bytes, c.rows,
                                        cudaMemcpyHostToDevice, s));
    }
  }
}

}  // namespace

double StagingEngine::run(const staging::Plan& plan, const void* dev_src, void* host_down,
                          void* dev_dst, const void* host_up, Stream after,
                          const std::function<void(size_t)>& wire) {
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  Cuda& c = *cuda_;
  // 1. The copies start after the caller's work on `after` (its writes to the inputs, its reads
  //    of the outputs).
  TACO_CHECK_CUDA(cudaEventRecord(c.ready, after));
  TACO_CHECK_CUDA(cudaStreamWaitEvent(c.down, c.ready, 0));
  TACO_CHECK_CUDA(cudaStreamWaitEvent(c.up, c.ready, 0));
  // 2. Every piece's down copies at once; the copy engine takes them in order.
  for (size_t j = 0; j < plan.pieces.size(); ++j) {
    for (const staging::Copy& copy : plan.pieces[j].down)
      queue_copy(copy, nullptr, nullptr, host_down, dev_src, true, c.down);
    TACO_CHECK_CUDA(cudaEventRecord(c.event(j), c.down));
  }
  for (const staging::Local& l : plan.local) {
    if (l.bytes == 0) continue;
    TACO_CHECK_CUDA(cudaMemcpyAsync(at(dev_dst, l.dst_offset), at(dev_src, l.src_offset), l.bytes,
                                    cudaMemcpyDeviceToDevice, c.up));
  }
  TACO_CHECK_CUDA(cudaEventSynchronize(c.ready));  // the caller's compute, not staging
  // 3. Wire piece j while j + 1 goes down and j - 1 goes up.
  double waited = 0;
  for (size_t j = 0; j < plan.pieces.size(); ++j) {
    const auto t0 = clock_type::now();
    TACO_CHECK_CUDA(cudaEventSynchronize(c.event(j)));
    waited += seconds_since(t0);
    wire(j);
    for (const staging::Copy& copy : plan.pieces[j].up)
      queue_copy(copy, dev_dst, host_up, nullptr, nullptr, false, c.up);
  }
  // 4. Everything has landed.
  const auto t0 = clock_type::now();
  TACO_CHECK_CUDA(cudaStreamSynchronize(c.up));
  waited += seconds_since(t0);
  return waited;
}

double StagingEngine::run_chained(const Stage& first, const Stage& second, Stream after,
                                  const std::function<void(size_t, Stream)>& between) {
  if (!cuda_) cuda_ = std::make_unique<Cuda>();
  Cuda& c = *cuda_;
  const size_t k = first.plan->pieces.size();
  TACO_CHECK(
      second.plan->pieces.size() == k && first.plan->local.empty() && second.plan->local.empty(),
      "run_chained: plans of " + std::to_string(k) + " and " +
          std::to_string(second.plan->pieces.size()) + " pieces");
  // Events: first's piece j down (j), between(j) done (k + j), second's piece j down (2k + j).
  TACO_CHECK_CUDA(cudaEventRecord(c.ready, after));
  TACO_CHECK_CUDA(cudaStreamWaitEvent(c.down, c.ready, 0));
  TACO_CHECK_CUDA(cudaStreamWaitEvent(c.up, c.ready, 0));
  for (size_t j = 0; j < k; ++j) {
    for (const staging::Copy& copy : first.plan->pieces[j].down)
      queue_copy(copy, nullptr, nullptr, first.host_down, first.dev_src, true, c.down);
    TACO_CHECK_CUDA(cudaEventRecord(c.event(j), c.down));
  }
  TACO_CHECK_CUDA(cudaEventSynchronize(c.ready));  // the caller's compute, not staging
  double waited = 0;
  auto second_wire = [&](size_t j) {
    const auto t0 = clock_type::now();
    TACO_CHECK_CUDA(cudaEventSynchronize(c.event(2 * k + j)));
    waited += seconds_since(t0);
    second.wire(j);
    for (const staging::Copy& copy : second.plan->pieces[j].up)
      queue_copy(copy, second.dev_dst, second.host_up, nullptr, nullptr, false, c.up);
  };
  for (size_t j = 0; j < k; ++j) {
    const auto t0 = clock_type::now();
    TACO_CHECK_CUDA(cudaEventSynchronize(c.event(j)));
    waited += seconds_since(t0);
    first.wire(j);
    for (const staging::Copy& copy : first.plan->pieces[j].up)
      queue_copy(copy, first.dev_dst, first.host_up, nullptr, nullptr, false, c.up);
    between(j, c.up);
    TACO_CHECK_CUDA(cudaEventRecord(c.event(k + j), c.up));
    // The down stream holds only first's copies queued before; second's piece j follows them.
    TACO_CHECK_CUDA(cudaStreamWaitEvent(c.down, c.event(k + j), 0));
    for (const staging::Copy& copy : second.plan->pieces[j].down)
      queue_copy(copy, nullptr, nullptr, second.host_down, second.dev_src, true, c.down);
    TACO_CHECK_CUDA(cudaEventRecord(c.event(2 * k + j), c.down));
    if (j > 0) second_wire(j - 1);
  }
  if (k > 0) second_wire(k - 1);
  const auto t0 = clock_type::now();
  TACO_CHECK_CUDA(cudaStreamSynchronize(c.up));
  waited += seconds_since(t0);
  return waited;
}

}  // namespace taco
