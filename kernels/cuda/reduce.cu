#include "kernels/cuda/reduce.cuh"

namespace taco::cuda::detail {
namespace {

constexpr int kRowGroups = 8;

// Block (32, kRowGroups): thread (x, y) sums rows y, y + 8, ... of column 32 * blockIdx.x + x;
// then row 0 of the block adds the eight sums in order. blockIdx.y picks the output.
__global__ void column_sums_add_kernel(nv_bf16* out0, nv_bf16* out1, nv_bf16* out2,
                                       const float* partials, int rows, int cols) {
  __shared__ float part[kRowGroups][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  const float* src = partials + size_t(blockIdx.y) * rows * cols;
  nv_bf16* out = blockIdx.y == 0 ? out0 : blockIdx.y == 1 ? out1 : out2;
  float acc = 0.f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kRowGroups) acc += src[size_t(r) * cols + c];
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.f;
#pragma unroll
    for (int y = 0; y < kRowGroups; ++y) sum += part[y][threadIdx.x];
    out[c] = __float2bfloat16_rn(__bfloat162float(out[c]) + sum);
  }
}

}  // namespace

void column_sums_add(nv_bf16* out0, nv_bf16* out1, const float* partials, int rows, int cols,
                     cudaStream_t stream, nv_bf16* out2) {
  if (cols == 0) return;
  TACO_CHECK(!out2 || out1, "column_sums_add: a third output needs a second");
  const dim3 grid(unsigned(ceil_div(cols, 32)), out2 ? 3 : out1 ? 2 : 1);
  column_sums_add_kernel<<<grid, dim3(32, kRowGroups), 0, stream>>>(out0, out1, out2, partials,
                                                                    rows, cols);
  TACO_LAUNCH_OK();
}

}  // namespace taco::cuda::detail
