// Residual add on bf16: out = a + b in fp32, rounded once (kernels/residual.h). Elementwise,
// 16-byte accesses where the pointers allow; out may alias a or b.
#include "kernels/cuda/common.cuh"
#include "kernels/residual.h"

namespace taco::cuda {
namespace {

using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;

struct Add {
  nv_bf16* out;
  const nv_bf16* a;
  const nv_bf16* b;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W], y[W];
    load<W>(x, a + i);
    load<W>(y, b + i);
#pragma unroll
    for (int e = 0; e < W; ++e) x[e] += y[e];
    store<W>(out + i, x);
  }
};

// out[i] += bias[i % C]; the vector path needs C % 8 == 0 so a vector never wraps a row.
struct BiasAdd {
  nv_bf16* out;
  const nv_bf16* bias;
  size_t C;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W], y[W];
    load<W>(x, out + i);
    load<W>(y, bias + i % C);
#pragma unroll
    for (int e = 0; e < W; ++e) x[e] += y[e];
    store<W>(out + i, x);
  }
};

}  // namespace

void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, Stream stream) {
  const bool vec = detail::aligned16(out) && detail::aligned16(a) && detail::aligned16(b);
  detail::launch_elementwise(Add{nv(out), nv(a), nv(b)}, n, vec, stream);
}

void add_inplace(bf16* y, const bf16* x, size_t n, Stream stream) {
  residual_forward(y, y, x, n, stream);
}

void bias_add(bf16* out, const bf16* bias, int N, int C, Stream stream) {
  const bool vec = C % 8 == 0 && detail::aligned16(out) && detail::aligned16(bias);
  detail::launch_elementwise(BiasAdd{nv(out), nv(bias), size_t(C)}, size_t(N) * C, vec, stream);
}

}  // namespace taco::cuda
