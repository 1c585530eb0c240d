// Device memory and bf16 helpers for the gpu_kernels_* tests. No CUDA headers here: the runtime
// calls live in gpu_test_util.cpp (which throws in a build without CUDA, where these tests skip).
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace taco::test {

void* device_alloc(size_t bytes);
void device_free(void* p) noexcept;
void device_upload(void* dst, const void* src, size_t bytes);
void device_download(void* dst, const void* src, size_t bytes);  // waits for the device
void device_fill(void* p, int byte, size_t bytes);
void device_synchronize();  // throws on an earlier asynchronous error

// A typed device array. It starts poisoned: 0xff bytes are NaN as bf16 and as fp32, so an element
// a kernel should have written but did not fails any comparison.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n), ptr_(static_cast<T*>(device_alloc(bytes()))) { poison(); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { device_free(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void poison() { device_fill(ptr_, 0xff, bytes()); }
  void upload(const std::vector<T>& host) { device_upload(ptr_, host.data(), bytes()); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    device_download(host.data(), ptr_, bytes());
    return host;
  }

 private:
  size_t n_;
  T* ptr_;
};

// Each value rounded to the nearest bf16 (as a kernel's bf16 store does).
std::vector<float> rounded_to_bf16(const std::vector<float>& x);

// Normal(mean, stddev) samples rounded to bf16: the CPU reference then reads exactly the values
// the GPU reads.
std::vector<float> random_bf16_values(size_t n, uint64_t seed, float mean = 0.f,
                                      float stddev = 1.f);

// The pieces streamed into one string: labels for SCOPED_TRACE (the case and the seed that
// reproduce a failure).
template <typename... Parts>
std::string describe(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// ||a - ref|| / ||ref|| over whole vectors, in double (NaN if any element is NaN).
double relative_l2(const std::vector<float>& a, const std::vector<float>& ref);

// For accumulating (+=) kernels: relative L2 of what the kernel added (after - before) against
// what the reference added (ref_after - before).
double relative_l2_of_increment(const std::vector<float>& after,
                                const std::vector<float>& ref_after,
                                const std::vector<float>& before);

size_t count_nonfinite(const std::vector<float>& x);
// How many elements differ in their bits.
size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b);
// after - before, elementwise: what an accumulating (+=) kernel added.
std::vector<float> increment(const std::vector<float>& after, const std::vector<float>& before);

}  // namespace taco::test
