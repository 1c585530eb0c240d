#include "kernels/cuda/context.cuh"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda/check.cuh"

namespace taco::cuda::detail {
namespace {

struct DeviceState {
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  int sm_count = 0;
  int max_smem_optin = 0;
  // wave_blocks: (kernel, threads per block, dynamic shared bytes) -> blocks resident per SM
  std::map<std::tuple<const void*, int, size_t>, int> resident;
};

struct StreamState {
  void* workspace = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

// Handles and buffers are never released: they live until the process ends, when the driver
// reclaims them (freeing them from static destructors would race the CUDA context teardown).
std::mutex g_mutex;
std::map<int, DeviceState> g_devices;
std::map<std::pair<int, cudaStream_t>, StreamState> g_streams;
std::atomic<uint64_t> g_memory_epoch{0};  // stream_memory_epoch()

DeviceState& device_state_locked(int device) {
  DeviceState& s = g_devices[device];
  if (s.sm_count == 0) {
    TACO_CUDA_OK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, device));
    TACO_CUDA_OK(
        cudaDeviceGetAttribute(&s.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  }
  return s;
}

}  // namespace

int current_device() {
  int device = 0;
  TACO_CUDA_OK(cudaGetDevice(&device));
  return device;
}

int sm_count() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  return device_state_locked(device).sm_count;
}

int wave_blocks(const void* kernel, int threads, size_t smem) {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = device_state_locked(device);
  auto [it, added] = s.resident.try_emplace(std::make_tuple(kernel, threads, smem), 0);
  if (added) {
    TACO_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, smem));
    if (it->second < 1) it->second = 1;
  }
  return s.sm_count * it->second;
}

int max_shared_memory_optin() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  return device_state_locked(device).max_smem_optin;
}

cublasLtHandle_t cublaslt_handle() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = device_state_locked(device);
  if (!s.lt) TACO_CUBLAS_OK(cublasLtCreate(&s.lt));
  return s.lt;
}

cudnnHandle_t cudnn_handle() {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceState& s = device_state_locked(device);
  if (!s.dnn) TACO_CUDNN_OK(cudnnCreate(&s.dnn));
  return s.dnn;
}

void* cublaslt_workspace(cudaStream_t stream) {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  StreamState& s = g_streams[{device, stream}];
  if (!s.workspace) {
    TACO_CUDA_OK(cudaMalloc(&s.workspace, kCublasLtWorkspaceBytes));
    ++g_memory_epoch;
  }
  return s.workspace;
}

void* scratch(cudaStream_t stream, size_t bytes) {
  const int device = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  StreamState& s = g_streams[{device, stream}];
  if (bytes > s.scratch_bytes) {
    if (s.scratch) {
      // Earlier ops on this stream may still read the old buffer.
      TACO_CUDA_OK(cudaStreamSynchronize(stream));
      TACO_CUDA_OK(cudaFree(s.scratch));
    }
    size_t grown = s.scratch_bytes * 2;
    s.scratch = nullptr;
    s.scratch_bytes = 0;
    if (grown < bytes) grown = bytes;
    if (grown < (size_t(1) << 20)) grown = size_t(1) << 20;
    TACO_CUDA_OK(cudaMalloc(&s.scratch, grown));
    s.scratch_bytes = grown;
    ++g_memory_epoch;
  }
  return s.scratch;
}

}  // namespace taco::cuda::detail

namespace taco::cuda {

uint64_t stream_memory_epoch() { return detail::g_memory_epoch.load(); }

}  // namespace taco::cuda
