// Per-device and per-stream state of kernels/cuda, created lazily on first use and kept for the
// life of the process: the cuBLASLt and cuDNN handles, cuBLASLt's 32 MiB workspace, a growable
// scratch buffer for kernels that reduce in two stages, and cached device properties. Nothing here
// is visible outside kernels/cuda.
//
// Workspace and scratch are per (device, stream): ops on different streams never share them.
// The first op on a stream (and a scratch request larger than before) allocates with cudaMalloc,
// so run one step before capturing a CUDA graph.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

namespace taco::cuda::detail {

constexpr size_t kCublasLtWorkspaceBytes = size_t(32) << 20;

int current_device();
int sm_count();                 // of the current device
int max_shared_memory_optin();  // bytes per block, of the current device

// Blocks of `kernel` (launched with `threads` per block and `smem` bytes of dynamic shared memory)
// that are resident on the current device at once: one wave, the grid of a grid-stride kernel
// whose blocks should all start together. Asked of CUDA once per (device, kernel, threads, smem);
// a kernel that needs more than 48 KB of shared memory must have opted in first.
int wave_blocks(const void* kernel, int threads, size_t smem);

cublasLtHandle_t cublaslt_handle();             // of the current device
cudnnHandle_t cudnn_handle();                   // of the current device
void* cublaslt_workspace(cudaStream_t stream);  // kCublasLtWorkspaceBytes

// At least `bytes` (256-byte aligned) of device memory for this stream, valid until the next
// scratch() call on the same stream. Growing it synchronizes the stream first.
void* scratch(cudaStream_t stream, size_t bytes);

}  // namespace taco::cuda::detail
