// Where a rank computes: the CPU reference or one CUDA device chosen by local rank.
#pragma once

#include <string>

namespace taco {

enum class DeviceKind { cpu, cuda };

struct DeviceInfo {
  DeviceKind kind = DeviceKind::cpu;
  int index = -1;  // CUDA ordinal, -1 on the CPU
  std::string name = "cpu";
  double bf16_peak_tflops = 0;  // dense bf16 tensor-core peak, for MFU; 0 when unknown
  size_t memory_bytes = 0;
};

// True when this binary was built with CUDA. A constant, so code that calls CUDA kernels can put
// the calls under `if constexpr (built_with_cuda())`: a CPU-only build compiles them out and links
// without the CUDA kernels, with no stand-in for each one.
constexpr bool built_with_cuda() { return TACO_HAVE_CUDA; }

// Number of usable CUDA devices (0 without a CUDA build, a driver or a device).
int cuda_device_count();

// Selects the device for this rank: with `want_gpu` and at least one device, CUDA device
// local_rank % count; otherwise the CPU.
DeviceInfo select_device(bool want_gpu, int local_rank);

}  // namespace taco
