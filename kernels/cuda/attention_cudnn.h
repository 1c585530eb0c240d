// cuDNN's fused flash attention (kernels/cuda/attention_cudnn.cpp), the engine behind
// taco::cuda::attention_forward / attention_backward where it runs the shape. Same tensors and
// meaning as kernels/attention.h's CUDA path; nothing here is visible outside kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/dtype.h"

namespace taco::cuda::detail {

// "cuDNN engine N (...)" or "own kernel (cuDNN: why not)", for logs and benchmarks.
std::string cudnn_attention_describe(bool backward, int B, int T, int C, int NH);

// Both run on cuDNN where the selected engine (kernels/attention.h) and the shape allow it and
// return true; they return false, doing nothing, where our kernels are to run instead, and throw
// UserError where cuDNN was forced but cannot run the shape. The first call per shape (and
// device) builds and caches cuDNN's plan (tens of milliseconds).
//
// out [B, T, C], lse [B, NH, T] from qkv [B, T, 3C].
bool cudnn_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                             cudaStream_t stream);

// dqkv [B, T, 3C] (written) from dout, qkv, out and lse. row_dot [B, NH, T] and dq_accum
// [B, NH, T, hs] are fp32 device scratch.
bool cudnn_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, int B, int T, int C, int NH, float* row_dot,
                              float* dq_accum, cudaStream_t stream);

}  // namespace taco::cuda::detail
