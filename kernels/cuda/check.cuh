// Status checks for the CUDA runtime and cuBLASLt inside kernels/cuda, all through
// taco::fail_status, so a failure reads "rank R: LIB call failed (code): text [file:line]".
// (kernels/ may not include engine/; these mirror engine/runtime/cuda_check.h under their own
// names so both headers can meet in one translation unit.)
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/check.h"

#define TACO_CUDA_OK(call)                                                            \
  do {                                                                                \
    cudaError_t taco_cuda_status_ = (call);                                           \
    if (taco_cuda_status_ != cudaSuccess)                                             \
      ::taco::fail_status("CUDA", #call, long(taco_cuda_status_),                     \
                          cudaGetErrorString(taco_cuda_status_), __FILE__, __LINE__); \
  } while (0)

#define TACO_CUBLAS_OK(call)                                                                 \
  do {                                                                                       \
    cublasStatus_t taco_cublas_status_ = (call);                                             \
    if (taco_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                        \
      ::taco::fail_status("cuBLASLt", #call, long(taco_cublas_status_),                      \
                          cublasLtGetStatusString(taco_cublas_status_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad launch configuration surfaces here, not at the next sync.
#define TACO_LAUNCH_OK() TACO_CUDA_OK(cudaGetLastError())
