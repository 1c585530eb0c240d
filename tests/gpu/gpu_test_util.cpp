#include "tests/gpu/gpu_test_util.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "tests/support/test_util.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/runtime/cuda_check.h"
#endif

namespace taco::test {

#if TACO_HAVE_CUDA

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  TACO_CHECK_CUDA(cudaMalloc(&p, bytes > 0 ? bytes : 1));
  return p;
}

void device_free(void* p) noexcept { cudaFree(p); }

void device_upload(void* dst, const void* src, size_t bytes) {
  TACO_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void device_download(void* dst, const void* src, size_t bytes) {
  TACO_CHECK_CUDA(cudaDeviceSynchronize());
  TACO_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_fill(void* p, int byte, size_t bytes) { TACO_CHECK_CUDA(cudaMemset(p, byte, bytes)); }

void device_synchronize() { TACO_CHECK_CUDA(cudaDeviceSynchronize()); }

#else

namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("gpu_test_util: built without CUDA"); }
}  // namespace

void* device_alloc(size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void device_upload(void*, const void*, size_t) { no_cuda(); }
void device_download(void*, const void*, size_t) { no_cuda(); }
void device_fill(void*, int, size_t) { no_cuda(); }
void device_synchronize() { no_cuda(); }

#endif

std::vector<float> rounded_to_bf16(const std::vector<float>& x) { return to_float(to_bf16(x)); }

std::vector<float> random_bf16_values(size_t n, uint64_t seed, float mean, float stddev) {
  return rounded_to_bf16(random_normal(n, seed, mean, stddev));
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  return relative_l2(a.data(), ref.data(), a.size());
}

double relative_l2_of_increment(const std::vector<float>& after,
                                const std::vector<float>& ref_after,
                                const std::vector<float>& before) {
  return relative_l2(increment(after, before), increment(ref_after, before));
}

size_t count_nonfinite(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += !std::isfinite(v);
  return n;
}

size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return a.size() > b.size() ? a.size() : b.size();
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

std::vector<float> increment(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> d(after.size());
  for (size_t i = 0; i < after.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

}  // namespace taco::test
