// Sum of squares of bf16 gradients for the global norm, and plain fp32 sums (kernels/gradnorm.h),
// in two stages with a fixed shape, so the result is bit-identical from run to run: kBlocks
// blocks each reduce a grid-strided share (fp32 per 8 elements, double per thread, then the
// block in a fixed order) into one double; one block then adds the kBlocks partials in order.
#include "kernels/cuda/common.cuh"
#include "kernels/gradnorm.h"

namespace taco::cuda {
namespace {

using detail::block_sum;
using detail::load;
using detail::nv;
using detail::nv_bf16;

constexpr int kBlocks = 512;
constexpr int kThreads = 256;

// What each element adds: its square (the gradient norm) or itself (a plain sum).
struct Squared {
  __device__ static float of(float v) { return v * v; }
};
struct Plain {
  __device__ static float of(float v) { return v; }
};

template <class F, class T>
__global__ void partials_kernel(double* partials, const T* x, size_t n, bool vectorized) {
  __shared__ double shared[32];
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t start = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t groups = vectorized ? n / 8 : 0;
  double acc = 0.0;
  for (size_t g = start; g < groups; g += stride) {
    float v[8];
    load<8>(v, x + g * 8);
    float s = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) s += F::of(v[e]);
    acc += s;
  }
  for (size_t i = groups * 8 + start; i < n; i += stride) {
    float v[1];
    load<1>(v, x + i);
    acc += F::of(v[0]);
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block of kBlocks threads.
__global__ void final_kernel(double* out, const double* partials, bool accumulate) {
  __shared__ double shared[32];
  const double total = block_sum(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) *out = accumulate ? *out + total : total;
}

template <class F, class T>
void reduce(double* result, const T* x, size_t n, bool accumulate, Stream stream) {
  auto* partials = static_cast<double*>(detail::scratch(stream, kBlocks * sizeof(double)));
  partials_kernel<F><<<kBlocks, kThreads, 0, stream>>>(partials, x, n, detail::aligned16(x));
  TACO_LAUNCH_OK();
  final_kernel<<<1, kBlocks, 0, stream>>>(result, partials, accumulate);
  TACO_LAUNCH_OK();
}

}  // namespace

void sum_of_squares(double* result, const bf16* x, size_t n, bool accumulate, Stream stream) {
  reduce<Squared>(result, nv(x), n, accumulate, stream);
}

void sum(double* result, const float* x, size_t n, bool accumulate, Stream stream) {
  reduce<Plain>(result, x, n, accumulate, stream);
}

}  // namespace taco::cuda
