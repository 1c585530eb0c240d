// Sum of squares for the global gradient norm (kernels/gradnorm.h).
//
// The range is cut into fixed blocks of kBlock elements whatever the thread count; each block is
// summed in double in index order and the block sums are added in block order, so the result
// depends only on n: bit-identical from run to run and across OMP_NUM_THREADS.
#include "kernels/gradnorm.h"

#include <algorithm>
#include <vector>

namespace taco::cpu {
namespace {

constexpr size_t kBlock = 1 << 14;

template <typename Real>
double sum_of_squares_impl(const Real* x, size_t n) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t i1 = std::min(n, (b + 1) * kBlock);
    double acc = 0;
    for (size_t i = b * kBlock; i < i1; ++i) acc += double(x[i]) * double(x[i]);
    partial[b] = acc;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

double sum_of_squares(const float* x, size_t n) { return sum_of_squares_impl(x, n); }
double sum_of_squares(const double* x, size_t n) { return sum_of_squares_impl(x, n); }

}  // namespace taco::cpu
