// Second stage of the deterministic two-stage reductions (layernorm and bias gradients): blocks
// of the first stage write fp32 partial sums, and this sums them in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/common.cuh"

namespace taco::cuda::detail {

// out0[c] += sum_r partials[r, c] over rows r of partials [rows, cols] (fp32, rounded to bf16
// once). When out1 is given, the matrix after it, partials[rows + r, c], adds into out1, and
// likewise the third into out2 (which needs out1). One launch for all.
void column_sums_add(nv_bf16* out0, nv_bf16* out1, const float* partials, int rows, int cols,
                     cudaStream_t stream, nv_bf16* out2 = nullptr);

}  // namespace taco::cuda::detail
