// Host and device memory without a Tensor: allocation, zeroing, copies and the device slot a
// kernel leaves a scalar in. memory.cu implements them with the CUDA runtime; in a CPU-only build
// memory_nocuda.cpp does with host memory only (every pointer there is a host pointer).
#pragma once

#include <cstddef>

#include "engine/runtime/device.h"
#include "kernels/dtype.h"

namespace taco {

void* host_alloc(size_t bytes);  // 256-byte aligned; throws taco::Error when memory runs out
void* device_alloc(DeviceKind device, size_t bytes);
void device_free(DeviceKind device, void* p);
void device_memset_zero(DeviceKind device, void* p, size_t bytes);
// Copies between host and `device` memory (either direction, or within one device); blocking,
// ordered with the legacy default stream.
void device_copy(void* dst, const void* src, size_t bytes, DeviceKind dst_dev, DeviceKind src_dev);

// Zeroes `bytes` of device memory at p, queued on `stream` (returns before it is done).
void device_memset_zero_async(void* p, size_t bytes, Stream stream);
// Copies `bytes` queued on `stream` (returns before it is done): device to device, or between the
// device and pinned host memory. The host side must stay as it is until the stream has run it.
void device_copy_async(void* dst, const void* src, size_t bytes, Stream stream);

// Page-locked host memory (what an asynchronous copy needs); plain host memory in a CPU-only
// build. Free with host_pinned_free.
void* host_pinned_alloc(size_t bytes);
void host_pinned_free(void* p);

// One double in the current CUDA device's memory, made on first use and kept for the process:
// where a kernel leaves a scalar for the host to read (the gradient norm's sum of squares). One
// slot per device, shared: its users keep to one stream.
double* device_scalar_slot();

}  // namespace taco
