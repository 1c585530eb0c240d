// Asynchronous global -> shared copies (cp.async, sm_80 and later), shared by the attention
// kernels and the device codecs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace taco::cuda::detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// N bytes (4, 8 or 16) from global to shared memory (at 32-bit shared address smem) without passing
// through registers; with valid false nothing is read and the N bytes are zero-filled. 16-byte
// copies go through L2 only. A thread that reads back only what it copied itself needs no barrier,
// only the wait.
template <int N>
__device__ __forceinline__ void cp_async(uint32_t smem, const void* gmem, bool valid) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
                 "r"(valid ? 16 : 0)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem), "l"(gmem), "n"(N),
                 "r"(valid ? N : 0)
                 : "memory");
  }
}

// The same with a generic pointer to shared memory (converted at each call: a loop that copies
// into the same buffer again and again can hold the 32-bit address from smem_addr instead).
template <int N>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
  cp_async<N>(smem_addr(smem), gmem, valid);
}

// 16 bytes from shared memory at 32-bit address smem (volatile: not moved across the waits).
__device__ __forceinline__ uint4 load_shared_16(uint32_t smem) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem));
  return v;
}

// Four 8 x 8 matrices of 16-bit values, transposed (ldmatrix .x4 .trans, sm_75 and later): lanes
// 8i to 8i + 7 give the shared addresses of matrix i's eight 16-byte rows, and lane t receives in
// r[i] the elements of rows 2 (t % 4) and 2 (t % 4) + 1 (low half first) of matrix i's column
// t / 4.
__device__ __forceinline__ void load_matrix_x4_trans(uint32_t (&r)[4], uint32_t smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem)
               : "memory");
}

// Its inverse (stmatrix .x4 .trans on sm_90 and later): the same addresses and register layout,
// r[i] written to matrix i. Before sm_90, the same stores one element at a time (each lane asks
// the lane holding the row's address for it). The whole warp calls it.
__device__ __forceinline__ void store_matrix_x4_trans(uint32_t smem, const uint32_t (&r)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
#else
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t row = __shfl_sync(0xFFFFFFFFu, smem, 8 * i + 2 * (lane % 4) + j);
      const unsigned short half = static_cast<unsigned short>(r[i] >> (16 * j));
      asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(row + 2 * (lane / 4)), "h"(half) : "memory");
    }
  }
#endif
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace taco::cuda::detail
