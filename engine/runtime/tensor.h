// A view of typed memory on one device: pointer, element type, device, element count.
// Shapes live in the code that uses a tensor (comments give them); a view never owns memory.
#pragma once

#include <cstddef>

#include "engine/runtime/device.h"
#include "kernels/dtype.h"

namespace taco {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  DeviceKind device = DeviceKind::cpu;
  size_t numel = 0;

  size_t bytes() const { return numel * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Elements [offset, offset + count) as a view.
  Tensor slice(size_t offset, size_t count) const {
    return Tensor{static_cast<char*>(data) + offset * dtype_size(dtype), dtype, device, count};
  }
};

}  // namespace taco
