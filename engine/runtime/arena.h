// One allocation per device for everything a rank keeps during training (parameters, gradients,
// optimizer state, activations), carved into aligned views. The plan is made before the first
// step: callers `reserve` every tensor, then `allocate` once; `peak_bytes` is what was taken.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/runtime/memory.h"  // the raw helpers the arena allocates with
#include "engine/runtime/tensor.h"

namespace taco {

class Arena {
 public:
  explicit Arena(DeviceKind device) : device_(device) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Plans a tensor of `numel` elements; returns a handle valid after allocate().
  size_t reserve(const std::string& name, DType dtype, size_t numel);
  // Makes the single allocation (zero-filled) and binds every planned tensor.
  void allocate();
  Tensor get(size_t handle) const;

  size_t total_bytes() const { return total_; }
  DeviceKind device() const { return device_; }
  // Largest planned tensors first, for the memory report.
  std::string summary(int top = 8) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    size_t numel;
    size_t offset;
  };
  DeviceKind device_;
  std::vector<Entry> entries_;
  size_t total_ = 0;
  char* base_ = nullptr;
};

}  // namespace taco
