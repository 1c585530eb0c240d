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

// CUDA: bf16 tensors through cuBLASLt with fp32 accumulation, queued on `stream`
// (kernels/cuda/matmul.cu; the handle and a 32 MiB workspace per device and stream are created
// on first use). Semantics differ from the CPU ops above on purpose:
//   matmul_forward WRITES out. With pre_gelu != nullptr it is the MLP's first layer:
//     pre_gelu = inp weight^T + bias and out = gelu(pre_gelu), both written (GELU_AUX_BIAS
//     epilogue; a separate GELU kernel where cuBLASLt cannot).
//   matmul_backward WRITES dinp (activation gradient; skipped when nullptr) and ADDS into dweight
//     and dbias (parameter gradients; either may be nullptr). With pre_gelu != nullptr (the
//     pre-GELU activation [N, IC] that produced inp, i.e. this is the MLP's second layer),
//     dinp = (dout weight) * gelu'(pre_gelu): the gradient flows on through the GELU (DGELU
//     epilogue). dbias comes from a deterministic column-sum kernel (or, opt-in, from the
//     dweight GEMM's BGRADB epilogue).
// The first call of each shape times up to eight (matmul_set_autotune_candidates) of cuBLASLt's
// candidate algorithms on its own operands (without touching what it accumulates into) and
// keeps the fastest for the process.
namespace taco::cuda {

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int IC,
                    int OC, bf16* pre_gelu, Stream stream);
void matmul_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int N, int IC, int OC, const bf16* pre_gelu,
                     Stream stream);

// For tests and benchmarks: false computes GELU and dGELU with separate kernels instead of
// cuBLASLt epilogues (same math, different rounding). Process-wide; default on.
void matmul_set_fused_epilogues(bool enabled);
// false: shapes met from now on take cuBLASLt's first heuristic choice untimed (the choice then
// repeats from run to run; tuned choices may differ between runs by timing noise). Default on.
void matmul_set_autotune(bool enabled);
// How many of cuBLASLt's heuristic candidates autotuning times for each new shape (1 to
// kMatmulMaxCandidates; default kMatmulDefaultCandidates). Shapes already tuned keep their choice.
constexpr int kMatmulDefaultCandidates = 8, kMatmulMaxCandidates = 32;
void matmul_set_autotune_candidates(int candidates);
// How many shapes had more than one candidate and were timed, so far in this process.
int matmul_autotuned_shapes();
// true: the bias gradient from cuBLASLt's BGRADB epilogue of the dweight GEMM where it has an
// algorithm (our column-sum kernel otherwise). Process-wide; default off: slower on the H200,
// and its bits follow the tuned algorithm, which may differ between tp ranks.
void matmul_set_bias_grad_epilogue(bool enabled);

}  // namespace taco::cuda
