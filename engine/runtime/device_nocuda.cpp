// CPU-only build: no CUDA devices exist.
#include "engine/runtime/device.h"

namespace taco {

int cuda_device_count() { return 0; }
DeviceInfo select_device(bool, int) { return DeviceInfo{}; }

}  // namespace taco
