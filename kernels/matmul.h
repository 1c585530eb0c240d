// Linear layer, weights stored as PyTorch's nn.Linear does (out_features x in_features):
//   out[n, o] = sum_i inp[n, i] * weight[o, i] + bias[o]
// Shapes: inp [N, IC], weight [OC, IC], bias [OC] or nullptr, out [N, OC].
// The tied LM head is this op with weight = wte [V, C] and no bias.
//
// Backward adds into its outputs:
//   dinp[n, i]    += sum_o dout[n, o] * weight[o, i]     (skipped when dinp == nullptr)
//   dweight[o, i] += sum_n dout[n, o] * inp[n, i]
//   dbias[o]      += sum_n dout[n, o]                     (skipped when dbias == nullptr)
// The CPU version is cache-blocked and parallel over OpenMP threads; its summation order depends
// only on the shapes, so results are bit-identical from run to run.
#pragma once

#include "kernels/dtype.h"

namespace taco::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N,
                    int IC, int OC);
void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, int N, int IC, int OC);
}  // namespace taco::cpu
