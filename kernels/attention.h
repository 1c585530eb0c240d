// Causal multi-head self-attention on a packed QKV tensor.
//   qkv [B, T, 3*C]: for each token, the C query values, then C keys, then C values, each laid out
//   as NH heads of hs = C / NH. (Under tensor parallelism C and NH are this rank's share.)
//   out[b, t, h*hs + d] = sum_{s<=t} softmax_s(q_t . k_s / sqrt(hs)) * v_s[d]
// The CPU reference keeps the probabilities att [B, NH, T, T] for backward (entries above the
// diagonal are zero). Backward adds into dqkv [B, T, 3*C].
#pragma once

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
