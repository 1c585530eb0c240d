// The device reduction of the host-staged two-shot all-reduce and reduce-scatter
// (HostStagedCommunicator): this rank's chunk summed over the p ranks' copies of it.
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco {

// out[i] = (((0 + x_0[i]) + x_1[i]) + ... + x_{p-1}[i]) in fp32, in rank order, for i < n, where
// x_q = own for q == me and x_q = slots + q * slot_stride (elements) otherwise; bf16 inputs are
// widened exactly and the sum is rounded to bf16 (nearest even) once, at the end. dtype: f32 or
// bf16. `out` may be `own` (in place). 16-byte loads and stores where own, slots, out and the
// stride are 16-byte aligned, else element by element; grid-stride. Queued on `stream`. Defined in
// CUDA builds only (parallel/cuda/staged_sum.cu).
void staged_sum_async(const void* own, const void* slots, size_t slot_stride, int p, int me,
                      void* out, size_t n, DType dtype, Stream stream);

}  // namespace taco
