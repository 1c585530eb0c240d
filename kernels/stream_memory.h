// The kernels' own device memory per stream (kernels/cuda/context.cu: cuBLASLt's workspace and
// the scratch buffer of two-stage reductions), as a CUDA graph sees it. A captured graph holds the
// addresses its kernels used; growing a stream's scratch frees the old buffer, so a graph captured
// before that point would read freed memory. The count below moves whenever such memory is
// allocated or replaced: a graph captured at one value is safe to replay while it holds.
#pragma once

#include <cstdint>

namespace taco::cuda {

uint64_t stream_memory_epoch();

}  // namespace taco::cuda
