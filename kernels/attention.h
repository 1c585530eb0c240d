// Causal multi-head self-attention on a packed QKV tensor.
//   qkv [B, T, 3*C]: for each token, the C query values, then C keys, then C values, each laid out
//   as NH heads of hs = C / NH. (Under tensor parallelism C and NH are this rank's share.)
//   out[b, t, h*hs + d] = sum_{s<=t} softmax_s(q_t . k_s / sqrt(hs)) * v_s[d]
// The CPU reference keeps the probabilities att [B, NH, T, T] for backward (entries above the
// diagonal are zero). Backward adds into dqkv [B, T, 3*C].
#pragma once

#include <string>

#include "kernels/dtype.h"

namespace taco::cpu {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH);

// The same ops in double precision: the tests check gradients against finite differences in
// double, and the fp32 ops against these.
void attention_forward(double* out, double* att, const double* qkv, int B, int T, int C, int NH);
void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                        int B, int T, int C, int NH);
}  // namespace taco::cpu

// The CUDA path: fused causal flash attention on bf16, head size hs = C / NH of 64 or 128.
// Instead of att it saves lse [B, NH, T] fp32, the natural log-sum-exp of each query's scaled
// scores: lse[b, h, t] = ln sum_{s<=t} exp(q_t . k_s / sqrt(hs)). All pointers are device
// memory, 16-byte aligned; everything runs asynchronously on `stream`.
//
// Two engines compute it: cuDNN's fused SDPA (built through cuDNN's backend graph API) and our
// own FlashAttention-2 style kernels (mma.sync). Both save the same lse, so either forward pairs
// with either backward.
namespace taco::cuda {

// kAuto (the default): cuDNN where it has an engine for the shape (T a multiple of 128, cuDNN
// >= 9), our kernels otherwise. kOwn / kCudnn force one; kCudnn fails with cuDNN's reason where
// it cannot run the shape. Process-wide.
enum class AttentionEngine { kAuto, kOwn, kCudnn };
void attention_select_engine(AttentionEngine engine);
AttentionEngine attention_selected_engine();

// Which engine runs this shape's forward / backward now and why, e.g. "cuDNN engine 8 (...)" or
// "own kernel (cuDNN: ...)". Builds cuDNN's plans for the shape if needed (needs a GPU).
std::string attention_engine_description(bool backward, int B, int T, int C, int NH);

// out [B, T, C] and lse [B, NH, T] are written, qkv [B, T, 3*C] is read.
void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                       Stream stream);

// Device scratch that attention_backward needs: D = rowsum(dout * out) [B, NH, T] fp32 and the
// fp32 dq accumulator [B, T, C]. Allocate it once (e.g. from the arena) for the largest shape.
size_t attention_backward_scratch_bytes(int B, int T, int C, int NH);

// WRITES (does not add into) dqkv [B, T, 3*C] from dout [B, T, C] and the forward's qkv, out and
// lse. `scratch` holds attention_backward_scratch_bytes(B, T, C, NH) bytes (contents ignored).
// dq is summed with fp32 atomics, so its last bits may differ from run to run; dk and dv are
// deterministic.
void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                        const float* lse, int B, int T, int C, int NH, void* scratch,
                        Stream stream);

// For tests and benchmarks: the backward kernel's tile shapes for a head size (64 or 128), by
// index, and the one attention_backward uses (process-wide; index 0, the measured fastest on an
// H200, by default).
int attention_backward_variants(int head_size);
const char* attention_backward_variant_name(int head_size, int index);
void attention_backward_select(int head_size, int index);

}  // namespace taco::cuda
