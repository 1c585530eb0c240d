// Residual stream and small elementwise helpers on flat arrays of n elements.
//   residual_forward:  out = a + b            (out may alias a)
//   residual_backward: da += dout, db += dout (the residual's gradient flows to both branches)
//   add_inplace:       y += x
//   scale_inplace:     y *= s
//   bias_add:          out[n, c] += bias[c] for out [N, C] (a row-parallel layer's bias, added
//                      once after its partial sums are reduced)
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco::cpu {

void residual_forward(float* out, const float* a, const float* b, size_t n);
void residual_backward(float* da, float* db, const float* dout, size_t n);
void add_inplace(float* y, const float* x, size_t n);
void scale_inplace(float* y, float s, size_t n);
void bias_add(float* out, const float* bias, int N, int C);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void residual_forward(double* out, const double* a, const double* b, size_t n);
void residual_backward(double* da, double* db, const double* dout, size_t n);
void add_inplace(double* y, const double* x, size_t n);
void scale_inplace(double* y, double s, size_t n);
void bias_add(double* out, const double* bias, int N, int C);
}  // namespace taco::cpu

// CUDA: bf16 flat arrays, queued on `stream` (kernels/cuda/residual.cu). Sums in fp32, rounded
// once. residual_forward WRITES out = a + b (out may alias a or b); add_inplace ADDS x into y.
// There is no residual_backward: on the GPU, layernorm_backward adds into the residual stream.
namespace taco::cuda {

void residual_forward(bf16* out, const bf16* a, const bf16* b, size_t n, Stream stream);
void add_inplace(bf16* y, const bf16* x, size_t n, Stream stream);
void bias_add(bf16* out, const bf16* bias, int N, int C, Stream stream);

}  // namespace taco::cuda
