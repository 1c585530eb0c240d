// CPU-only build: host memory only.
#include <cstdlib>
#include <cstring>

#include "engine/runtime/memory.h"
#include "kernels/check.h"

namespace taco {

void* device_alloc(DeviceKind device, size_t bytes) {
  TACO_CHECK(device == DeviceKind::cpu, "CUDA memory requested in a CPU-only build");
  return host_alloc(bytes);
}

void device_free(DeviceKind, void* p) { std::free(p); }

void device_memset_zero(DeviceKind, void* p, size_t bytes) { std::memset(p, 0, bytes); }

void device_copy(void* dst, const void* src, size_t bytes, DeviceKind, DeviceKind) {
  std::memcpy(dst, src, bytes);
}

void device_memset_zero_async(void* p, size_t bytes, Stream) { std::memset(p, 0, bytes); }

void device_copy_async(void* dst, const void* src, size_t bytes, Stream) {
  std::memcpy(dst, src, bytes);
}

void* host_pinned_alloc(size_t bytes) { return host_alloc(bytes); }
void host_pinned_free(void* p) { std::free(p); }

double* device_scalar_slot() {
  TACO_CHECK(false, "a device scalar requested in a CPU-only build");
  return nullptr;
}

}  // namespace taco
