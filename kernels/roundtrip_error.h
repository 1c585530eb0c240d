// The error of one round trip through a codec, as the per-site statistics report it: x is a
// message of n values, xhat what decode(encode(x)) gave back (compression/stats.h). In double:
//   sums[0] += sum_i (xhat_i - x_i)^2     the error's squared norm
//   sums[1] += sum_i x_i^2                the signal's squared norm
//   sums[2] += #{i : x_i is NaN or Inf}   the non-finite inputs
// x and xhat are each f32 or bf16. A non-finite input makes the first two sums non-finite too,
// which the statistics keep visible. The CPU version is the reference; the CUDA one computes the
// same sums on the device (in another order: equal up to double rounding) so that measuring a
// message never copies it to the host.
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco::cpu {

// OpenMP over blocks of elements, each summed in order; the blocks are added in order.
void roundtrip_error_sums(const void* x, DType x_dtype, const void* xhat, DType xhat_dtype,
                          size_t n, double sums[3]);

}  // namespace taco::cpu

namespace taco::cuda {

// `sums`: three doubles in device memory, added into on `stream`. Two stages of fixed shape
// (per-block partials, then one block adds them in order), so the result is bit-identical from
// run to run.
void roundtrip_error_sums(double* sums, const void* x, DType x_dtype, const void* xhat,
                          DType xhat_dtype, size_t n, Stream stream);

}  // namespace taco::cuda
