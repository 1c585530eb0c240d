// CPU-only build: host memory only.
#include <cstdlib>
#include <cstring>

#include "engine/runtime/arena.h"
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

}  // namespace taco
