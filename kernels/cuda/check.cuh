// Status checks for the CUDA runtime, cuBLASLt and cuDNN inside kernels/cuda, all through
// taco::fail_status, so a failure reads "rank R: LIB call failed (code): text [file:line]".
// (kernels/ may not include engine/; these mirror engine/runtime/cuda_check.h under their own
// names so both headers can meet in one translation unit.)
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

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

namespace taco::cuda::detail {
// cuDNN's name for `status` and, where it has one, its last error message on this thread.
inline std::string cudnn_status_text(cudnnStatus_t status) {
  std::string text = cudnnGetErrorString(status);
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0]) text += std::string(": ") + detail;
  return text;
}
}  // namespace taco::cuda::detail

#define TACO_CUDNN_OK(call)                                                                      \
  do {                                                                                           \
    cudnnStatus_t taco_cudnn_status_ = (call);                                                   \
    if (taco_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                              \
      ::taco::fail_status("cuDNN", #call, long(taco_cudnn_status_),                              \
                          ::taco::cuda::detail::cudnn_status_text(taco_cudnn_status_), __FILE__, \
                          __LINE__);                                                             \
  } while (0)

// After a kernel launch: a bad launch configuration surfaces here, not at the next sync.
#define TACO_LAUNCH_OK() TACO_CUDA_OK(cudaGetLastError())
