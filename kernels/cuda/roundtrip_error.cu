// Round-trip error sums (kernels/roundtrip_error.h) in two stages of fixed shape, as the gradient
// norm: kBlocks blocks each sum a grid-strided share in double (8 elements per 16-byte load
// where both pointers allow it) and reduce the block in a fixed order; one block adds the
// partials in order into the three sums.
#include <cmath>

#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/roundtrip_error.h"

namespace taco::cuda {
namespace {

using detail::block_sum;
using detail::load;
using detail::nv_bf16;

constexpr int kBlocks = 512;
constexpr int kThreads = 256;

struct Sums {
  double err = 0, sig = 0, bad = 0;
  __device__ void add(float xv, float yv) {
    const double a = xv, d = double(yv) - a;
    err += d * d;
    sig += a * a;
    bad += isfinite(xv) ? 0.0 : 1.0;
  }
};

template <class X, class Y>
__global__ void partials_kernel(double* partials, const X* x, const Y* xhat, size_t n,
                                bool vectorized) {
  __shared__ double shared[32];
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t start = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t groups = vectorized ? n / 8 : 0;
  Sums s;
  for (size_t g = start; g < groups; g += stride) {
    float a[8], b[8];
    load<8>(a, x + g * 8);
    load<8>(b, xhat + g * 8);
#pragma unroll
    for (int e = 0; e < 8; ++e) s.add(a[e], b[e]);
  }
  for (size_t i = groups * 8 + start; i < n; i += stride) {
    float a[1], b[1];
    load<1>(a, x + i);
    load<1>(b, xhat + i);
    s.add(a[0], b[0]);
  }
  const double err = block_sum(s.err, shared);
  const double sig = block_sum(s.sig, shared);
  const double bad = block_sum(s.bad, shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = err;
    partials[kBlocks + blockIdx.x] = sig;
    partials[2 * kBlocks + blockIdx.x] = bad;
  }
}

// One block of kBlocks threads.
__global__ void final_kernel(double* sums, const double* partials) {
  __shared__ double shared[32];
  for (int k = 0; k < 3; ++k) {
    const double total = block_sum(partials[k * kBlocks + threadIdx.x], shared);
    if (threadIdx.x == 0) sums[k] += total;
  }
}

template <class X, class Y>
void launch(double* sums, const X* x, const Y* xhat, size_t n, cudaStream_t stream) {
  auto* partials = static_cast<double*>(detail::scratch(stream, 3 * kBlocks * sizeof(double)));
  const bool vectorized = detail::aligned16(x) && detail::aligned16(xhat);
  partials_kernel<<<kBlocks, kThreads, 0, stream>>>(partials, x, xhat, n, vectorized);
  TACO_LAUNCH_OK();
  final_kernel<<<1, kBlocks, 0, stream>>>(sums, partials);
  TACO_LAUNCH_OK();
}

template <class X>
void with_xhat(double* sums, const X* x, const void* xhat, DType xhat_dtype, size_t n,
               cudaStream_t stream) {
  if (xhat_dtype == DType::f32)
    launch(sums, x, static_cast<const float*>(xhat), n, stream);
  else
    launch(sums, x, static_cast<const nv_bf16*>(xhat), n, stream);
}

}  // namespace

void roundtrip_error_sums(double* sums, const void* x, DType x_dtype, const void* xhat,
                          DType xhat_dtype, size_t n, Stream stream) {
  TACO_CHECK((x_dtype == DType::f32 || x_dtype == DType::bf16) &&
                 (xhat_dtype == DType::f32 || xhat_dtype == DType::bf16),
             "roundtrip_error_sums takes f32 or bf16");
  if (n == 0) return;
  if (x_dtype == DType::f32)
    with_xhat(sums, static_cast<const float*>(x), xhat, xhat_dtype, n, stream);
  else
    with_xhat(sums, static_cast<const nv_bf16*>(x), xhat, xhat_dtype, n, stream);
}

}  // namespace taco::cuda
