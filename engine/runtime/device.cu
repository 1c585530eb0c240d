// CUDA build: device discovery and selection by local rank.
#include <cuda_runtime.h>

#include <string>

#include "engine/runtime/cuda_check.h"
#include "engine/runtime/device.h"

namespace taco {

int cuda_device_count() {
  int count = 0;
  // No driver or no device is not an error here: the trainer then runs on the CPU.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

DeviceInfo select_device(bool want_gpu, int local_rank) {
  DeviceInfo info;
  int count = want_gpu ? cuda_device_count() : 0;
  if (count == 0) return info;
  info.kind = DeviceKind::cuda;
  info.index = local_rank % count;
  TACO_CHECK_CUDA(cudaSetDevice(info.index));
  cudaDeviceProp prop{};
  TACO_CHECK_CUDA(cudaGetDeviceProperties(&prop, info.index));
  info.name = prop.name;
  info.memory_bytes = prop.totalGlobalMem;
  // Dense bf16 peak by datasheet: Hopper (sm_90) SXM 989 TFLOP/s, Ampere A100 312.
  if (prop.major == 9)
    info.bf16_peak_tflops = 989.0;
  else if (prop.major == 8 && prop.minor == 0)
    info.bf16_peak_tflops = 312.0;
  return info;
}

}  // namespace taco
