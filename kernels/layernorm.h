// LayerNorm over the last dimension of N rows of C:
//   mean = sum(x) / C, rstd = 1 / sqrt(sum((x - mean)^2) / C + 1e-5)
//   out  = (x - mean) * rstd * weight + bias
// Shapes: inp, out [N, C]; weight, bias [C]; mean, rstd [N] (saved for backward).
// Backward adds into dinp [N, C], dweight [C], dbias [C].
#pragma once

#include "kernels/dtype.h"

namespace taco::cpu {

constexpr float kLayerNormEps = 1e-5f;

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, int N, int C);
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, const double* mean,
                        const double* rstd, int N, int C);
}  // namespace taco::cpu

// CUDA: bf16 tensors, fp32 mean/rstd, ops queued on `stream` (kernels/cuda/layernorm.cu). C must
// be a multiple of 8 and the bf16 pointers 16-byte aligned. One warp per row, fp32 math.
//   layernorm_forward WRITES out, mean, rstd (mean and rstd may be nullptr when not needed);
//   fused_residual_layernorm_forward WRITES residual_out = a + b (rounded to bf16; may alias a or
//   b) and out = LayerNorm(residual_out), bit-identical to residual_forward + layernorm_forward;
//   layernorm_backward ADDS into dinp (it feeds the residual stream) and into dweight, dbias
//   (parameter gradients), deterministically (fixed-order two-stage sums, no float atomics;
//   the split into partial sums follows the device's SM count, so the bits are the same from run
//   to run on one kind of GPU, not across kinds).
//   Given dinp_column_sums [C], it also ADDS the column sums of the updated dinp (as stored, in
//   bf16) into it: the bias gradient of the linear layer whose output feeds the residual stream
//   at this point, without another pass over dinp.
namespace taco::cuda {

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, Stream stream);
void fused_residual_layernorm_forward(bf16* residual_out, bf16* out, float* mean, float* rstd,
                                      const bf16* a, const bf16* b, const bf16* weight,
                                      const bf16* bias, int N, int C, Stream stream);
void layernorm_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        Stream stream, bf16* dinp_column_sums = nullptr);

}  // namespace taco::cuda
