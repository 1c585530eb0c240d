// Orthonormal Walsh-Hadamard transform of n = 2^k values, in place:
//   x <- H_n x / sqrt(n),  H_1 = [1],  H_2m = [[H_m, H_m], [H_m, -H_m]]  (Sylvester order)
// H_n is symmetric and H_n H_n = n I, so the transform is orthonormal (it keeps ||x||) and its
// own inverse. TACO applies it inside each group of G in {32, ..., 512} elements to spread an
// outlier over the group before FP8 rounding.
//
// The order of operations is fixed, so that a CUDA kernel can reproduce it bit for bit:
//   for (h = 1; h < n; h *= 2)
//     for every i with (i & h) == 0:  (x[i], x[i + h]) <- (x[i] + x[i + h], x[i] - x[i + h])
//   x[i] *= hadamard_scale(n)          (one rounding; exact when n is a power of four)
#pragma once

namespace taco {

// float(1 / sqrt(n)), correctly rounded.
float hadamard_scale(int n);

namespace cpu {

// n must be a power of two, 1 <= n <= 1 << 20.
void hadamard_transform(float* x, int n);

// The butterflies alone (x <- H_n x, without the 1 / sqrt(n)), in the same order.
void hadamard_butterflies(float* x, int n);

}  // namespace cpu
}  // namespace taco
