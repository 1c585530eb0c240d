// Linear layers on bf16 through cuBLASLt: bf16 inputs and outputs, fp32 accumulation (math and
// shapes in kernels/matmul.h).
//
// cuBLASLt is column-major: our row-major [R, C] matrix is its [C, R]. So
//   forward  out[N, OC]    = inp[N, IC] W[OC, IC]^T   is  D[OC, N]  = op_T(W)[OC, IC] inp[IC, N]
//   dinp     dinp[N, IC]   = dout[N, OC] W[OC, IC]    is  D[IC, N]  = W[IC, OC] dout[OC, N]
//   dweight  dW[OC, IC]   += dout^T inp               is  D[IC, OC] += inp[IC, N] op_T(dout)[N, OC]
// Epilogues fused where cuBLASLt has an algorithm for them (each falls back to a separate
// kernel otherwise, or when matmul_set_fused_epilogues(false)):
//   BIAS (forward), GELU_AUX_BIAS (forward, also stores the pre-GELU value), DGELU (dinp times
//   gelu'(pre_gelu)).
// The bias gradient is by default our deterministic two-stage column sum of dout. cuBLASLt's
// BGRADB epilogue (dbias = column sums of dout, which the dweight GEMM reads anyway; a bf16
// vector that one small kernel adds into dbias) is there with matmul_set_bias_grad_epilogue(true):
// on the H200 it runs as a separate kernel of its own and costs more (9 to 42 us per GPT-2 124M
// layer GEMM over the plain GEMM, against 8 to 30 us for ours), and its bits depend on the GEMM
// algorithm, which autotuning may pick differently on each rank (tp ranks must compute the
// replicated biases' gradients bit for bit alike).
//
// Algorithms: the first call of each shape asks cuBLASLt's heuristic for up to
// kMatmulDefaultCandidates algorithms (matmul_set_autotune_candidates), times each on the call's
// own operands and keeps the fastest (its first choice is up to 25% slower on some of GPT-2's
// shapes, e.g. the dGELU GEMM); matmul_set_autotune(false) keeps the heuristic's first choice.
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace taco::cuda {
namespace {

using detail::ceil_div;
using detail::load;
using detail::nv;
using detail::nv_bf16;

std::atomic<bool> g_fused_epilogues{true};
std::atomic<bool> g_autotune{true};
std::atomic<bool> g_bias_grad_epilogue{false};
std::atomic<int> g_tuned_shapes{0};
std::atomic<int> g_candidates{kMatmulDefaultCandidates};

// One cuBLASLt call: column-major D[m, n] = op(A)[m, k] op(B)[k, n] (+ D when accumulate).
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  bool accumulate = false;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS: input [m]; BGRADB: output [n]
  void* aux = nullptr;         // GELU_AUX: pre-GELU output; DGELU: pre-GELU input; ld = ld_aux
  int64_t ld_aux = 0;
};

// A plain GEMM (no epilogue, D overwritten): the layouts of the three products in the comment on
// top of this file.
Gemm plain_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
                int64_t lda, const void* b, int64_t ldb, void* d, int64_t ldd) {
  Gemm g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.d = d;
  g.ldd = ldd;
  return g;
}

void check_shape(const char* op, int N, int IC, int OC) {
  TACO_CHECK(N >= 0 && IC > 0 && OC > 0, std::string(op) + ": bad shape N=" + std::to_string(N) +
                                             " IC=" + std::to_string(IC) +
                                             " OC=" + std::to_string(OC));
}

bool epilogue_optional(cublasLtEpilogue_t e) {
  return e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS;
}

uint32_t alignment_of(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 256;
  const uintptr_t lowest_bit = u & (~u + 1);
  return lowest_bit >= 256 ? 256u : uint32_t(lowest_bit);
}

// The choice depends on the shapes, the epilogue, the pointer alignments and (for the timing)
// whether D is accumulated into.
struct AlgoKey {
  int device;
  int64_t m, n, k, lda, ldb, ldd, ld_aux;
  int trans_a, trans_b, epilogue, accumulate;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto tie() const {
    return std::tie(device, m, n, k, lda, ldb, ldd, ld_aux, trans_a, trans_b, epilogue, accumulate,
                    align_a, align_b, align_d, align_bias, align_aux);
  }
  bool operator<(const AlgoKey& o) const { return tie() < o.tie(); }
};

struct AlgoEntry {
  bool supported = false;
  cublasLtMatmulAlgo_t algo{};
};

std::mutex g_algo_mutex;
std::map<AlgoKey, AlgoEntry> g_algos;

struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  TACO_CUBLAS_OK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const T& value) {
  TACO_CUBLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

std::string shape_text(const Gemm& g) {
  return "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " epilogue=" + std::to_string(int(g.epilogue));
}

// The fastest of the candidates for g, each timed on g's own operands after a warm-up call.
// D (and C) go to a temporary buffer, so an accumulating GEMM's output is untouched; an
// epilogue's other output (GELU's pre-activation) is written again by the call that follows.
// Candidates that fail to run are skipped; if none runs, or no buffer can be had, the
// heuristic's first choice stands.
cublasLtMatmulAlgo_t fastest(const Gemm& g, const Descriptors& ds,
                             const std::vector<cublasLtMatmulAlgo_t>& candidates,
                             cudaStream_t stream) {
  if (candidates.size() < 2) return candidates.front();
  void* d = nullptr;
  if (cudaMalloc(&d, size_t(g.ldd) * size_t(g.n) * sizeof(nv_bf16)) != cudaSuccess) {
    (void)cudaGetLastError();
    return candidates.front();
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  TACO_CUDA_OK(cudaEventCreate(&start));
  TACO_CUDA_OK(cudaEventCreate(&stop));
  const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
  void* workspace = detail::cublaslt_workspace(stream);
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(detail::cublaslt_handle(), ds.op, &alpha, g.a, ds.a, g.b, ds.b, &beta, d,
                          ds.d, d, ds.d, &algo, workspace, detail::kCublasLtWorkspaceBytes, stream);
  };
  constexpr int kReps = 5;
  cublasLtMatmulAlgo_t best = candidates.front();
  float best_ms = INFINITY;
  for (const cublasLtMatmulAlgo_t& algo : candidates) {
    if (run(algo) != CUBLAS_STATUS_SUCCESS) continue;
    TACO_CUDA_OK(cudaEventRecord(start, stream));
    bool ok = true;
    for (int r = 0; r < kReps && ok; ++r) ok = run(algo) == CUBLAS_STATUS_SUCCESS;
    TACO_CUDA_OK(cudaEventRecord(stop, stream));
    TACO_CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0.f;
    TACO_CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    if (ok && ms < best_ms) {
      best_ms = ms;
      best = algo;
    }
  }
  TACO_CUDA_OK(cudaEventDestroy(start));
  TACO_CUDA_OK(cudaEventDestroy(stop));
  TACO_CUDA_OK(cudaStreamSynchronize(stream));
  TACO_CUDA_OK(cudaFree(d));
  g_tuned_shapes.fetch_add(1);
  return best;
}

// Runs g; returns false (nothing written) when cuBLASLt has no algorithm for an optional
// epilogue, so the caller can fall back. Any other failure throws.
bool run_gemm(const Gemm& g, cudaStream_t stream) {
  cublasLtHandle_t handle = detail::cublaslt_handle();
  Descriptors ds;
  TACO_CUBLAS_OK(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  if (g.bias) set_desc(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux) {
    set_desc(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_aux);
  }
  TACO_CUBLAS_OK(cublasLtMatrixLayoutCreate(&ds.a, CUDA_R_16BF, g.trans_a ? g.k : g.m,
                                            g.trans_a ? g.m : g.k, g.lda));
  TACO_CUBLAS_OK(cublasLtMatrixLayoutCreate(&ds.b, CUDA_R_16BF, g.trans_b ? g.n : g.k,
                                            g.trans_b ? g.k : g.n, g.ldb));
  TACO_CUBLAS_OK(cublasLtMatrixLayoutCreate(&ds.d, CUDA_R_16BF, g.m, g.n, g.ldd));

  const AlgoKey key{detail::current_device(),
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldd,
                    g.ld_aux,
                    g.trans_a,
                    g.trans_b,
                    int(g.epilogue),
                    g.accumulate,
                    alignment_of(g.a),
                    alignment_of(g.b),
                    alignment_of(g.d),
                    alignment_of(g.bias),
                    alignment_of(g.aux)};
  AlgoEntry entry;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) {
      entry = it->second;
      cached = true;
    }
  }
  if (!cached) {
    TACO_CUBLAS_OK(cublasLtMatmulPreferenceCreate(&ds.pref));
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
             uint64_t(detail::kCublasLtWorkspaceBytes));
    // The default assumes 256-byte aligned matrices; views into larger buffers may be less.
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
    set_pref(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    cublasLtMatmulHeuristicResult_t results[kMatmulMaxCandidates]{};
    int returned = 0;
    const int wanted = g_autotune ? g_candidates.load() : 1;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, wanted, results, &returned);
    std::vector<cublasLtMatmulAlgo_t> candidates;
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(results[i].algo);
    entry.supported = !candidates.empty();
    if (!entry.supported && !epilogue_optional(g.epilogue)) {
      fail_status("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", long(status),
                  "no algorithm for bf16 GEMM " + shape_text(g), __FILE__, __LINE__);
    }
    if (entry.supported) entry.algo = fastest(g, ds, candidates, stream);
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos[key] = entry;
  }
  if (!entry.supported) return false;

  const float alpha = 1.f, beta = g.accumulate ? 1.f : 0.f;
  const cublasStatus_t status = cublasLtMatmul(
      handle, ds.op, &alpha, g.a, ds.a, g.b, ds.b, &beta, g.d, ds.d, g.d, ds.d, &entry.algo,
      detail::cublaslt_workspace(stream), detail::kCublasLtWorkspaceBytes, stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED && epilogue_optional(g.epilogue)) {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algos[key].supported = false;
    return false;
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail_status("cuBLASLt", "cublasLtMatmul", long(status),
                std::string(cublasLtGetStatusString(status)) + " for " + shape_text(g), __FILE__,
                __LINE__);
  }
  return true;
}

// Bias gradient, first stage: block (32, 8) covers 32 W columns; thread (x, y) sums rows
// blockIdx.y * 8 + y, stepping by gridDim.y * 8; the block's 8 row groups are added in order
// into partials[blockIdx.y, column].
constexpr int kBiasRowGroups = 8;
constexpr int kBiasMaxSplits = 64;

template <int W>
__global__ void bias_partials_kernel(float* partials, const nv_bf16* dout, int N, int OC) {
  __shared__ float part[kBiasRowGroups][32 * W + 1];
  const int col = (blockIdx.x * 32 + threadIdx.x) * W;
  float acc[W] = {};
  if (col < OC) {
    for (int n = blockIdx.y * kBiasRowGroups + threadIdx.y; n < N;
         n += gridDim.y * kBiasRowGroups) {
      float x[W];
      load<W>(x, dout + size_t(n) * OC + col);
#pragma unroll
      for (int e = 0; e < W; ++e) acc[e] += x[e];
    }
  }
#pragma unroll
  for (int e = 0; e < W; ++e) part[threadIdx.y][threadIdx.x * W + e] = acc[e];
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
#pragma unroll
    for (int e = 0; e < W; ++e) {
      float sum = 0.f;
#pragma unroll
      for (int y = 0; y < kBiasRowGroups; ++y) sum += part[y][threadIdx.x * W + e];
      partials[size_t(blockIdx.y) * OC + col + e] = sum;
    }
  }
}

// dbias[o] += sum_n dout[n, o], deterministic.
void bias_backward(bf16* dbias, const bf16* dout, int N, int OC, cudaStream_t stream) {
  const bool vectorized = OC % 8 == 0 && detail::aligned16(dout);
  const int W = vectorized ? 8 : 1;
  int splits = int(ceil_div(N, 64));
  splits = splits < 1 ? 1 : (splits > kBiasMaxSplits ? kBiasMaxSplits : splits);
  auto* partials =
      static_cast<float*>(detail::scratch(stream, size_t(splits) * OC * sizeof(float)));
  const dim3 grid(unsigned(ceil_div(OC, 32 * W)), unsigned(splits));
  const dim3 block(32, kBiasRowGroups);
  if (vectorized) {
    bias_partials_kernel<8><<<grid, block, 0, stream>>>(partials, nv(dout), N, OC);
  } else {
    bias_partials_kernel<1><<<grid, block, 0, stream>>>(partials, nv(dout), N, OC);
  }
  TACO_LAUNCH_OK();
  detail::column_sums_add(nv(dbias), nullptr, partials, splits, OC, stream);
}

void require(bool ran, const Gemm& g) {
  TACO_CHECK(ran, "cuBLASLt could not run the bf16 GEMM " + shape_text(g));
}

}  // namespace

void matmul_set_fused_epilogues(bool enabled) { g_fused_epilogues = enabled; }

void matmul_set_autotune(bool enabled) { g_autotune = enabled; }

void matmul_set_autotune_candidates(int candidates) {
  TACO_CHECK(candidates >= 1 && candidates <= kMatmulMaxCandidates,
             "matmul_set_autotune_candidates: 1 to " + std::to_string(kMatmulMaxCandidates));
  g_candidates = candidates;
}

void matmul_set_bias_grad_epilogue(bool enabled) { g_bias_grad_epilogue = enabled; }

int matmul_autotuned_shapes() { return g_tuned_shapes.load(); }

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N, int IC,
                    int OC, bf16* pre_gelu, Stream stream) {
  check_shape("matmul_forward", N, IC, OC);
  if (N == 0) return;
  // D[OC, N] = op_T(W)[OC, IC] inp[IC, N]; D is out, or pre_gelu when GELU runs separately.
  Gemm g = plain_gemm(true, false, OC, N, IC, weight, IC, inp, IC, out, OC);
  g.bias = bias;
  const cublasLtEpilogue_t plain = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (pre_gelu) {
    // cuBLASLt wants the aux leading dimension divisible by 8.
    if (g_fused_epilogues && OC % 8 == 0) {
      g.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      g.aux = pre_gelu;
      g.ld_aux = OC;
      if (run_gemm(g, stream)) return;
    }
    g.d = pre_gelu;
    g.epilogue = plain;
    g.aux = nullptr;
    g.ld_aux = 0;
    require(run_gemm(g, stream), g);
    gelu_forward(out, pre_gelu, size_t(N) * OC, stream);
    return;
  }
  g.epilogue = plain;
  require(run_gemm(g, stream), g);
}

void matmul_backward(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int N, int IC, int OC, const bf16* pre_gelu,
                     Stream stream) {
  check_shape("matmul_backward", N, IC, OC);
  if (N == 0) return;
  if (dinp) {
    // D[IC, N] = W[IC, OC] dout[OC, N]
    Gemm g = plain_gemm(false, false, IC, N, OC, weight, IC, dout, OC, dinp, IC);
    bool done = false;
    if (pre_gelu && g_fused_epilogues && IC % 8 == 0) {
      g.epilogue = CUBLASLT_EPILOGUE_DGELU;
      g.aux = const_cast<bf16*>(pre_gelu);  // read-only for DGELU
      g.ld_aux = IC;
      done = run_gemm(g, stream);
    }
    if (!done) {
      g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      g.aux = nullptr;
      g.ld_aux = 0;
      require(run_gemm(g, stream), g);
      if (pre_gelu) gelu_backward(dinp, pre_gelu, dinp, size_t(N) * IC, stream);
    }
  }
  if (dweight) {
    // D[IC, OC] += inp[IC, N] op_T(dout)[N, OC]
    Gemm g = plain_gemm(false, true, IC, OC, N, inp, IC, dout, OC, dweight, IC);
    g.accumulate = true;
    if (dbias && g_bias_grad_epilogue) {
      auto* column_sums = static_cast<bf16*>(detail::scratch(stream, size_t(OC) * sizeof(bf16)));
      g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
      g.bias = column_sums;
      if (run_gemm(g, stream)) {
        residual_forward(dbias, dbias, column_sums, size_t(OC), stream);
        return;
      }
      g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      g.bias = nullptr;
    }
    require(run_gemm(g, stream), g);
  }
  if (dbias) bias_backward(dbias, dout, N, OC, stream);
}

}  // namespace taco::cuda
