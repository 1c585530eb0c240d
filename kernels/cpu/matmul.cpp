// Linear layer forward and backward (kernels/matmul.h) on one cache-blocked GEMM.
//
// All three products are C[R, M] += A[R, K] * B[K, M] with A, B, C row-major:
//   forward   out      = bias + inp [N, IC] * weight^T [IC, OC]
//   backward  dinp    += dout [N, OC] * weight [OC, IC]
//             dweight += dout^T [OC, N] * inp [N, IC]
// weight^T and dout^T are transposed copies (O(size) work beside the O(N*IC*OC) product), so the
// inner loop always broadcasts one A value against a contiguous row of B into a register tile of
// C: it vectorizes over M without reassociating any sum. Every C element is accumulated as
// ((C + A[r,0] B[0,m]) + A[r,1] B[1,m]) + ... in k order whatever the blocking, the tile it falls
// in or the thread count, so results depend only on the shapes: bit-identical from run to run.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace taco::cpu {
namespace {

// One 16-byte SSE register of Real. GCC/Clang vector types spell the SIMD axis out (columns of C),
// so the compiler cannot vectorize along another one.
template <typename Real>
struct Vec16;
template <>
struct Vec16<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct Vec16<double> {
  typedef double type __attribute__((vector_size(16)));
};

// Register tile: kTileRows rows of C by kTileVecs vectors of columns (8 floats or 4 doubles),
// 8 accumulators: the fastest of the 1x8 ... 6x2 shapes measured on x86-64-v2.
// Cache blocks: a [kBlockK, kBlockM] panel of B stays in L2 while the A rows of one
// [kBlockR, kBlockK] block stream past it; its [kBlockK, tile] strips stay in L1.
constexpr int kTileRows = 4;
constexpr int kTileVecs = 2;
template <typename Real>
constexpr int kTileCols = kTileVecs* int(16 / sizeof(Real));
constexpr int kBlockR = 64;
constexpr int kBlockM = 64;  // a multiple of kTileCols for float (8) and double (4)
constexpr int kBlockK = 256;

// C[0:kTileRows, 0:kTileCols] += A[0:kTileRows, 0:K] * B[0:K, 0:kTileCols].
template <typename Real>
inline void gemm_tile(Real* C, int ldc, const Real* A, int lda, const Real* B, int ldb, int K) {
  using V = typename Vec16<Real>::type;
  constexpr int RR = kTileRows;
  constexpr int NV = kTileVecs;
  constexpr int L = int(16 / sizeof(Real));
  V acc[RR][NV];
  for (int r = 0; r < RR; ++r)
    for (int j = 0; j < NV; ++j) std::memcpy(&acc[r][j], C + r * ldc + j * L, sizeof(V));
  for (int k = 0; k < K; ++k) {
    V b[NV];
    for (int j = 0; j < NV; ++j) std::memcpy(&b[j], B + size_t(k) * ldb + j * L, sizeof(V));
    for (int r = 0; r < RR; ++r) {
      const Real a = A[r * lda + k];
      for (int j = 0; j < NV; ++j) acc[r][j] += a * b[j];
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int j = 0; j < NV; ++j) std::memcpy(C + r * ldc + j * L, &acc[r][j], sizeof(V));
}

// The same for a partial tile at the matrix edge (rows x cols), with the same per-element order.
template <typename Real>
void gemm_edge(Real* C, int ldc, const Real* A, int lda, const Real* B, int ldb, int K, int rows,
               int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int m = 0; m < cols; ++m) {
      Real acc = C[r * ldc + m];
      for (int k = 0; k < K; ++k) acc += A[r * lda + k] * B[size_t(k) * ldb + m];
      C[r * ldc + m] = acc;
    }
  }
}

// C[R, M] += A[R, K] * B[K, M], all row-major and densely packed. Threads share out the
// [kBlockR, kBlockM] blocks of C; each block is owned by one thread, so no sum is split.
template <typename Real>
void gemm_accumulate(Real* C, const Real* A, const Real* B, int R, int K, int M) {
  constexpr int RR = kTileRows;
  constexpr int MW = kTileCols<Real>;
  const int blocks_r = (R + kBlockR - 1) / kBlockR;
  const int blocks_m = (M + kBlockM - 1) / kBlockM;
#pragma omp parallel for collapse(2) schedule(static)
  for (int br = 0; br < blocks_r; ++br) {
    for (int bm = 0; bm < blocks_m; ++bm) {
      const int r0 = br * kBlockR, r1 = std::min(R, r0 + kBlockR);
      const int m0 = bm * kBlockM, m1 = std::min(M, m0 + kBlockM);
      for (int k0 = 0; k0 < K; k0 += kBlockK) {
        const int kk = std::min(K - k0, kBlockK);
        for (int m = m0; m < m1; m += MW) {
          const int cols = std::min(MW, m1 - m);
          for (int r = r0; r < r1; r += RR) {
            const int rows = std::min(RR, r1 - r);
            Real* c = C + size_t(r) * M + m;
            const Real* a = A + size_t(r) * K + k0;
            const Real* b = B + size_t(k0) * M + m;
            if (rows == RR && cols == MW) {
              gemm_tile(c, M, a, K, b, M, kk);
            } else {
              gemm_edge(c, M, a, K, b, M, kk, rows, cols);
            }
          }
        }
      }
    }
  }
}

// dst[cols, rows] = src[rows, cols]^T, in 32x32 blocks so both sides stay in cache.
template <typename Real>
std::unique_ptr<Real[]> transposed(const Real* src, int rows, int cols) {
  constexpr int kB = 32;
  std::unique_ptr<Real[]> dst(new Real[size_t(rows) * cols]);
  Real* d = dst.get();
  const int blocks_r = (rows + kB - 1) / kB;
  const int blocks_c = (cols + kB - 1) / kB;
#pragma omp parallel for collapse(2) schedule(static)
  for (int br = 0; br < blocks_r; ++br) {
    for (int bc = 0; bc < blocks_c; ++bc) {
      const int r1 = std::min(rows, (br + 1) * kB), c1 = std::min(cols, (bc + 1) * kB);
      for (int r = br * kB; r < r1; ++r)
        for (int c = bc * kB; c < c1; ++c) d[size_t(c) * rows + r] = src[size_t(r) * cols + c];
    }
  }
  return dst;
}

template <typename Real>
void matmul_forward_impl(Real* out, const Real* inp, const Real* weight, const Real* bias, int N,
                         int IC, int OC) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    Real* o = out + size_t(n) * OC;
    for (int j = 0; j < OC; ++j) o[j] = bias ? bias[j] : Real(0);
  }
  auto weight_t = transposed(weight, OC, IC);  // [IC, OC]
  gemm_accumulate(out, inp, weight_t.get(), N, IC, OC);
}

template <typename Real>
void matmul_backward_impl(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                          const Real* weight, int N, int IC, int OC) {
  if (dinp) gemm_accumulate(dinp, dout, weight, N, OC, IC);
  auto dout_t = transposed(dout, N, OC);  // [OC, N]
  gemm_accumulate(dweight, dout_t.get(), inp, OC, N, IC);
  if (dbias) {
    // dbias[o] += sum_n dout[n, o]: row o of dout^T is contiguous, summed in n order.
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      const Real* row = dout_t.get() + size_t(o) * N;
      Real acc = dbias[o];
      for (int n = 0; n < N; ++n) acc += row[n];
      dbias[o] = acc;
    }
  }
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int IC, int OC) {
  matmul_forward_impl(out, inp, weight, bias, N, IC, OC);
}
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  matmul_backward_impl(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
void matmul_forward(double* out, const double* inp, const double* weight, const double* bias, int N,
                    int IC, int OC) {
  matmul_forward_impl(out, inp, weight, bias, N, IC, OC);
}
void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, int N, int IC, int OC) {
  matmul_backward_impl(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

}  // namespace taco::cpu
