// staged_sum_async (parallel/staged_sum.h): fp32 accumulation in rank order, one thread per
// 16-byte vector (8 bf16 or 4 fp32 elements), a scalar path for the tail and unaligned buffers.
#include <cuda_bf16.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "parallel/staged_sum.h"

namespace taco {

namespace {

using cuda::detail::ceil_div;
using cuda::detail::load;
using cuda::detail::nv_bf16;
using cuda::detail::store;

template <class T>
struct Vec;  // elements per 16-byte access
template <>
struct Vec<float> {
  static constexpr int kWidth = 4;
};
template <>
struct Vec<nv_bf16> {
  static constexpr int kWidth = 8;
};

// Elements [first * W, (first + count) * W) in groups of W: W = Vec<T>::kWidth for 16-byte
// accesses, W = 1 for the scalar path.
template <class T, int W>
__global__ void staged_sum_kernel(const T* own, const T* slots, size_t stride, int p, int me,
                                  T* out, size_t first, size_t count) {
  for (size_t v = blockIdx.x * size_t(blockDim.x) + threadIdx.x; v < count;
       v += size_t(gridDim.x) * blockDim.x) {
    const size_t i = (first + v) * W;
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; ++k) acc[k] = 0.f;
    for (int q = 0; q < p; ++q) {
      const T* src = (q == me ? own : slots + size_t(q) * stride) + i;
      float x[W];
      load<W>(x, src);
#pragma unroll
      for (int k = 0; k < W; ++k) acc[k] += x[k];
    }
    store<W>(out + i, acc);
  }
}

template <class T, int W>
void launch(const T* own, const T* slots, size_t stride, int p, int me, T* out, size_t first,
            size_t count, cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const size_t most = size_t(cuda::detail::sm_count()) * 8;  // grid-stride beyond a few waves
  const size_t blocks = std::min(ceil_div(count, kThreads), most);
  staged_sum_kernel<T, W>
      <<<unsigned(blocks), kThreads, 0, stream>>>(own, slots, stride, p, me, out, first, count);
  TACO_LAUNCH_OK();
}

template <class T>
void sum(const T* own, const T* slots, size_t stride, int p, int me, T* out, size_t n,
         cudaStream_t stream) {
  constexpr int W = Vec<T>::kWidth;
  using cuda::detail::aligned16;
  const bool vector =
      aligned16(own) && aligned16(slots) && aligned16(out) && (stride * sizeof(T)) % 16 == 0;
  const size_t vectors = vector ? n / W : 0;
  launch<T, W>(own, slots, stride, p, me, out, 0, vectors, stream);
  launch<T, 1>(own, slots, stride, p, me, out, vectors * W, n - vectors * W, stream);
}

}  // namespace

void staged_sum_async(const void* own, const void* slots, size_t slot_stride, int p, int me,
                      void* out, size_t n, DType dtype, Stream stream) {
  TACO_CHECK(p >= 1 && me >= 0 && me < p,
             "staged_sum_async: rank " + std::to_string(me) + " of " + std::to_string(p));
  if (dtype == DType::f32) {
    sum(static_cast<const float*>(own), static_cast<const float*>(slots), slot_stride, p, me,
        static_cast<float*>(out), n, stream);
  } else if (dtype == DType::bf16) {
    sum(static_cast<const nv_bf16*>(own), static_cast<const nv_bf16*>(slots), slot_stride, p, me,
        static_cast<nv_bf16*>(out), n, stream);
  } else {
    TACO_CHECK(false, std::string("staged_sum_async: dtype ") + dtype_name(dtype) +
                          " (expected f32 or bf16)");
  }
}

}  // namespace taco
