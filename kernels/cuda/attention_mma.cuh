// Building blocks of the flash-attention kernels (attention_forward.cu, attention_backward.cu):
// cp.async tile loads, ldmatrix fragment loads and the bf16 tensor-core MMA, for sm_80 and later.
//
// MMA m16n8k16 (row.col, bf16 in, fp32 accumulate). With lane = 4*g + t (g = lane/4, t = lane%4):
//   A 16x16: a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..]  a3 = A[g+8][2t+8..]
//   B 16x8:  b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//   C 16x8:  c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// ldmatrix.x4 loads four 8x8 bf16 matrices; lanes 8i..8i+7 give the row addresses of matrix i and
// register i receives row g, columns 2t..2t+1 of matrix i (rows 2t..2t+1, column g with .trans).
//
// Tiles of head rows live in shared memory as [rows][kSmemStride(HS)] bf16: each row is padded by
// 16 bytes, so the 8 row addresses of one ldmatrix matrix fall into 8 different bank groups.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include <string>

#include "kernels/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cp_async.cuh"

namespace taco::cuda::attention_detail {

using bf16_t = __nv_bfloat16;

constexpr int kSmemPad = 8;  // bf16 elements (16 bytes) of padding per shared-memory row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ constexpr int smem_stride(int cols) { return cols + kSmemPad; }

// Checks the shape of a call and returns the head size hs = C / NH (64 or 128).
inline int checked_head_size(const char* op, int B, int T, int C, int NH) {
  if (B < 1 || T < 1 || NH < 1 || C < 1 || C % NH != 0)
    throw ::taco::UserError(
        std::string(op) +
        " (CUDA): needs B, T >= 1 and C divisible by NH, got B=" + std::to_string(B) +
        " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH));
  const int hs = C / NH;
  if (hs != 64 && hs != 128)
    throw ::taco::UserError(
        std::string(op) + " (CUDA): head size C/NH = " + std::to_string(hs) +
        " is not supported; choose n_head so that d_model / n_head is 64 or 128");
  return hs;
}

using detail::cp_async;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::smem_addr;

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16_t* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16_t* smem) {
  detail::load_matrix_x4_trans(r, smem_addr(smem));
}

// d += a * b for one 16x8x16 tile.
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair (round to nearest even), `lo` in the low half as the MMA expects.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// 2^x on the special-function unit; 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A fragments of the accumulator tiles c[2j], c[2j+1] (16 rows x 16 columns) as bf16: the C
// layout of two adjacent n-tiles is exactly the A layout of one k-step.
__device__ __forceinline__ void accumulators_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                                  const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// Copies `ROWS` rows of one head (HS bf16 each, consecutive rows `row_stride` elements apart in
// global memory) into a [ROWS][smem_stride(HS)] tile; rows >= valid_rows become zeros.
template <int ROWS, int HS, int THREADS>
__device__ __forceinline__ void load_rows_async(bf16_t* tile, const bf16_t* rows, int valid_rows,
                                                size_t row_stride) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  constexpr int kTotal = ROWS * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + THREADS - 1) / THREADS; ++it) {
    const int i = it * THREADS + int(threadIdx.x);
    if (kTotal % THREADS == 0 || i < kTotal) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = r < valid_rows;
      const bf16_t* src = rows + (valid ? size_t(r) * row_stride + c * 8 : 0);
      cp_async<16>(tile + r * smem_stride(HS) + c * 8, src, valid);
    }
  }
}

// Copies `ROWS` consecutive floats; entries >= valid become zeros.
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_floats_async(float* dst, const float* src, int valid) {
  for (int i = int(threadIdx.x); i < ROWS; i += THREADS) {
    cp_async<4>(dst + i, src + (i < valid ? i : 0), i < valid);
  }
}

// Writes `ROWS` rows of HS bf16 from a padded shared tile to global rows `row_stride` apart,
// 16 bytes per lane, skipping rows >= valid_rows. Called by one warp for its own rows.
template <int ROWS, int HS>
__device__ __forceinline__ void store_rows_warp(bf16_t* rows, size_t row_stride, const bf16_t* tile,
                                                int valid_rows, int lane) {
  constexpr int kChunks = HS / 8;
#pragma unroll
  for (int i = lane; i < ROWS * kChunks; i += 32) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < valid_rows) {
      *reinterpret_cast<uint4*>(rows + size_t(r) * row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + r * smem_stride(HS) + c * 8);
    }
  }
}

}  // namespace taco::cuda::attention_detail
