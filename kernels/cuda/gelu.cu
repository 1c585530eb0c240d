// GELU (tanh approximation) on bf16, fp32 math (kernels/gelu.h). Elementwise, 16-byte accesses
// where the pointers allow. Used alone when cuBLASLt's GELU epilogues are not.
#include "kernels/cuda/common.cuh"
#include "kernels/gelu.h"

namespace taco::cuda {
namespace {

using detail::load;
using detail::nv;
using detail::nv_bf16;
using detail::store;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

struct GeluForward {
  nv_bf16* out;
  const nv_bf16* inp;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W];
    load<W>(x, inp + i);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float u = kSqrt2OverPi * (x[e] + kCubic * x[e] * x[e] * x[e]);
      x[e] = 0.5f * x[e] * (1.f + tanhf(u));
    }
    store<W>(out + i, x);
  }
};

// d/dx gelu = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
struct GeluBackward {
  nv_bf16* dinp;
  const nv_bf16* inp;
  const nv_bf16* dout;
  template <int W>
  __device__ void apply(size_t i) const {
    float x[W], d[W];
    load<W>(x, inp + i);
    load<W>(d, dout + i);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float u = kSqrt2OverPi * (x[e] + kCubic * x[e] * x[e] * x[e]);
      const float t = tanhf(u);
      const float grad = 0.5f * (1.f + t) + 0.5f * x[e] * (1.f - t * t) * kSqrt2OverPi *
                                                (1.f + 3.f * kCubic * x[e] * x[e]);
      d[e] *= grad;
    }
    store<W>(dinp + i, d);
  }
};

}  // namespace

void gelu_forward(bf16* out, const bf16* inp, size_t n, Stream stream) {
  const bool vec = detail::aligned16(out) && detail::aligned16(inp);
  detail::launch_elementwise(GeluForward{nv(out), nv(inp)}, n, vec, stream);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, Stream stream) {
  const bool vec = detail::aligned16(dinp) && detail::aligned16(inp) && detail::aligned16(dout);
  detail::launch_elementwise(GeluBackward{nv(dinp), nv(inp), nv(dout)}, n, vec, stream);
}

}  // namespace taco::cuda
