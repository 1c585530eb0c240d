// Status checks for CUDA runtime, cuBLAS(Lt), cuDNN and NCCL calls, all through
// taco::fail_status so every failure reads "rank R: LIB call failed (code): text [file:line]".
// Include only from .cu files or CUDA-only .cpp files.
#pragma once

#include <cuda_runtime.h>

#include "kernels/check.h"

#define TACO_CHECK_CUDA(call)                                                                  \
  do {                                                                                         \
    cudaError_t taco_status_ = (call);                                                         \
    if (taco_status_ != cudaSuccess)                                                           \
      ::taco::fail_status("CUDA", #call, long(taco_status_), cudaGetErrorString(taco_status_), \
                          __FILE__, __LINE__);                                                 \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define TACO_CHECK_LAUNCH() TACO_CHECK_CUDA(cudaGetLastError())
