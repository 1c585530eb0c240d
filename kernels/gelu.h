// GELU, tanh approximation (GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// Shapes: flat arrays of n elements. Backward adds dout * gelu'(inp) into dinp.
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco::cpu {

void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void gelu_forward(double* out, const double* inp, size_t n);
void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n);
}  // namespace taco::cpu

// CUDA: bf16 flat arrays, fp32 math, queued on `stream` (kernels/cuda/gelu.cu).
//   gelu_forward WRITES out; gelu_backward WRITES dinp = dout * gelu'(inp) (an activation
//   gradient; dinp may alias dout).
namespace taco::cuda {

void gelu_forward(bf16* out, const bf16* inp, size_t n, Stream stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, size_t n, Stream stream);

}  // namespace taco::cuda
