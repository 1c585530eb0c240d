// CUDA build: host memory for the CPU path, cudaMalloc for devices (never managed memory).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/runtime/cuda_check.h"
#include "engine/runtime/memory.h"

namespace taco {

void* device_alloc(DeviceKind device, size_t bytes) {
  if (device == DeviceKind::cpu) {
    return host_alloc(bytes);
  }
  void* p = nullptr;
  TACO_CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

void device_free(DeviceKind device, void* p) {
  if (device == DeviceKind::cpu)
    std::free(p);
  else
    cudaFree(p);
}

void device_memset_zero(DeviceKind device, void* p, size_t bytes) {
  if (device == DeviceKind::cpu)
    std::memset(p, 0, bytes);
  else
    TACO_CHECK_CUDA(cudaMemset(p, 0, bytes));
}

void device_copy(void* dst, const void* src, size_t bytes, DeviceKind dst_dev, DeviceKind src_dev) {
  if (dst_dev == DeviceKind::cpu && src_dev == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  TACO_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

void device_memset_zero_async(void* p, size_t bytes, Stream stream) {
  TACO_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream));
}

void device_copy_async(void* dst, const void* src, size_t bytes, Stream stream) {
  TACO_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

void* host_pinned_alloc(size_t bytes) {
  void* p = nullptr;
  TACO_CHECK_CUDA(cudaMallocHost(&p, bytes));
  return p;
}

void host_pinned_free(void* p) {
  if (p) cudaFreeHost(p);
}

double* device_scalar_slot() {
  static std::mutex mutex;
  static std::map<int, double*> slots;
  int device = 0;
  TACO_CHECK_CUDA(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  double*& slot = slots[device];
  if (!slot) TACO_CHECK_CUDA(cudaMalloc(&slot, sizeof(double)));
  return slot;
}

}  // namespace taco
