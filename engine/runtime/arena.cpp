#include "engine/runtime/arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/check.h"

namespace taco {

namespace {
constexpr size_t kAlign = 256;  // covers 16-byte vector loads and cuBLASLt's alignment wishes
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void* host_alloc(size_t bytes) {
  void* p = std::aligned_alloc(kAlign, round_up(std::max<size_t>(bytes, 1)));
  if (!p) {
    throw Error("rank " + std::to_string(error_rank()) + ": out of host memory allocating " +
                    std::to_string(bytes) + " bytes",
                1);
  }
  return p;
}

Arena::~Arena() {
  if (base_) device_free(device_, base_);
}

size_t Arena::reserve(const std::string& name, DType dtype, size_t numel) {
  TACO_CHECK(base_ == nullptr, "Arena::reserve after allocate: " + name);
  entries_.push_back({name, dtype, numel, total_});
  total_ += round_up(numel * dtype_size(dtype));
  return entries_.size() - 1;
}

void Arena::allocate() {
  TACO_CHECK(base_ == nullptr, "Arena::allocate called twice");
  base_ = static_cast<char*>(device_alloc(device_, std::max<size_t>(total_, kAlign)));
  device_memset_zero(device_, base_, total_);
}

Tensor Arena::get(size_t handle) const {
  TACO_CHECK(base_ != nullptr, "Arena::get before allocate");
  TACO_CHECK(handle < entries_.size(), "Arena::get: bad handle");
  const Entry& e = entries_[handle];
  return Tensor{base_ + e.offset, e.dtype, device_, e.numel};
}

std::string Arena::summary(int top) const {
  std::vector<const Entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->numel * dtype_size(a->dtype) > b->numel * dtype_size(b->dtype);
  });
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << "arena " << total_ / 1048576.0 << " MiB in " << entries_.size()
     << " tensors; largest:";
  for (int i = 0; i < top && i < int(order.size()); ++i) {
    os << " " << order[i]->name << " " << order[i]->numel * dtype_size(order[i]->dtype) / 1048576.0
       << " MiB" << (i + 1 < top && i + 1 < int(order.size()) ? "," : "");
  }
  return os.str();
}

}  // namespace taco
