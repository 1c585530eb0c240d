#include "parallel/staged_communicator.h"

#include <chrono>
#include <cstring>

#include "kernels/check.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/runtime/cuda_check.h"
#endif

namespace taco {

namespace {
using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}
}  // namespace

bool is_device_pointer(const void* p) {
#if TACO_HAVE_CUDA
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on older runtimes reports an error: clear it
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
#else
  (void)p;
  return false;
#endif
}

// Two pinned host buffers (input and output of a call), grown on demand and kept.
struct HostStagedCommunicator::Buffers {
  void* ptr[2] = {nullptr, nullptr};
  size_t bytes[2] = {0, 0};
  void* get(int slot, size_t n) {
#if TACO_HAVE_CUDA
    if (n > bytes[slot]) {
      if (ptr[slot]) cudaFreeHost(ptr[slot]);
      ptr[slot] = nullptr;
      bytes[slot] = 0;
      TACO_CHECK_CUDA(cudaMallocHost(&ptr[slot], n));
      bytes[slot] = n;
    }
    return ptr[slot];
#else
    (void)slot;
    (void)n;
    throw Error("host staging in a build without CUDA", 1);
#endif
  }
  ~Buffers() {
#if TACO_HAVE_CUDA
    for (void* p : ptr)
      if (p) cudaFreeHost(p);
#endif
  }
};

HostStagedCommunicator::HostStagedCommunicator(Communicator& host)
    : Communicator(host.name()), host_(host), buffers_(std::make_unique<Buffers>()) {}

HostStagedCommunicator::~HostStagedCommunicator() = default;

const void* HostStagedCommunicator::in(const void* p, size_t bytes, int slot, Stream stream) {
  if (!is_device_pointer(p)) return p;
#if TACO_HAVE_CUDA
  void* h = buffers_->get(slot, bytes);
  TACO_CHECK_CUDA(cudaStreamSynchronize(stream));
  TACO_CHECK_CUDA(cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost));
  return h;
#else
  (void)bytes, (void)slot, (void)stream;
  return p;
#endif
}

void* HostStagedCommunicator::out(void* p, size_t bytes, int slot) {
  return is_device_pointer(p) ? buffers_->get(slot, bytes) : p;
}

void HostStagedCommunicator::copy_back(void* device, const void* host, size_t bytes) {
  if (device == host || bytes == 0) return;
#if TACO_HAVE_CUDA
  TACO_CHECK_CUDA(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
#else
  std::memcpy(device, host, bytes);
#endif
}

void HostStagedCommunicator::account(CommOp op, size_t bytes, double seconds) {
  record(op, bytes, seconds);
}

void HostStagedCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  const void* hs = in(send, bytes, 0, stream);
  void* hr = send == recv ? const_cast<void*>(hs) : out(recv, bytes, 1);  // in place: in hs
  host_.all_reduce(hs, hr, count, dtype, op, stream);
  copy_back(recv, hr, bytes);
  account(CommOp::all_reduce, bytes, seconds_since(t0));
}

void HostStagedCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                            DType dtype, ReduceOp op, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t out_bytes = recv_count * dtype_size(dtype), in_bytes = out_bytes * size_t(size());
  const void* hs = in(send, in_bytes, 0, stream);
  void* hr = out(recv, out_bytes, 1);
  host_.reduce_scatter(hs, hr, recv_count, dtype, op, stream);
  copy_back(recv, hr, out_bytes);
  account(CommOp::reduce_scatter, in_bytes, seconds_since(t0));
}

void HostStagedCommunicator::all_gather(const void* send, void* recv, size_t send_count,
                                        DType dtype, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t in_bytes = send_count * dtype_size(dtype), out_bytes = in_bytes * size_t(size());
  void* hr = out(recv, out_bytes, 1);
  // In place (send = recv + rank * count): stage the whole output, the input inside it.
  const bool in_place =
      static_cast<const char*>(send) == static_cast<const char*>(recv) + size_t(rank()) * in_bytes;
  const void* hs = nullptr;
  if (in_place && hr != recv) {
    hs = static_cast<char*>(hr) + size_t(rank()) * in_bytes;
    const void* staged = in(send, in_bytes, 0, stream);
    std::memcpy(const_cast<void*>(hs), staged, in_bytes);
  } else {
    hs = in(send, in_bytes, 0, stream);
  }
  host_.all_gather(hs, hr, send_count, dtype, stream);
  copy_back(recv, hr, out_bytes);
  account(CommOp::all_gather, out_bytes, seconds_since(t0));
}

void HostStagedCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                        Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype) * size_t(size());
  const void* hs = in(send, bytes, 0, stream);
  void* hr = out(recv, bytes, 1);
  host_.all_to_all(hs, hr, count, dtype, stream);
  copy_back(recv, hr, bytes);
  account(CommOp::all_to_all, bytes, seconds_since(t0));
}

void HostStagedCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag,
                                  Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  host_.send(in(buf, bytes, 0, stream), count, dtype, peer, tag, stream);
  account(CommOp::send, bytes, seconds_since(t0));
}

void HostStagedCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag,
                                  Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  void* h = out(buf, bytes, 1);
  host_.recv(h, count, dtype, peer, tag, stream);
  copy_back(buf, h, bytes);
  account(CommOp::recv, bytes, seconds_since(t0));
}

void HostStagedCommunicator::send_recv(const void* send_buf, size_t send_count, int dst,
                                       void* recv_buf, size_t recv_count, int src, DType dtype,
                                       int tag, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t sb = send_count * dtype_size(dtype), rb = recv_count * dtype_size(dtype);
  const void* hs = send_count > 0 ? in(send_buf, sb, 0, stream) : send_buf;
  void* hr = recv_count > 0 ? out(recv_buf, rb, 1) : recv_buf;
  host_.send_recv(hs, send_count, dst, hr, recv_count, src, dtype, tag, stream);
  if (recv_count > 0) copy_back(recv_buf, hr, rb);
  account(CommOp::send_recv, sb, seconds_since(t0));
}

void HostStagedCommunicator::broadcast(void* buf, size_t count, DType dtype, int root,
                                       Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  void* h = const_cast<void*>(in(buf, bytes, 0, stream));
  host_.broadcast(h, count, dtype, root, stream);
  copy_back(buf, h, bytes);
  account(CommOp::broadcast, bytes, seconds_since(t0));
}

void HostStagedCommunicator::barrier(Stream stream) {
  const auto t0 = clock_type::now();
#if TACO_HAVE_CUDA
  // Work queued before the barrier is done when it returns (no device: nothing to wait for).
  static const bool has_device = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  }();
  if (has_device) TACO_CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGetLastError();
#endif
  host_.barrier(stream);
  account(CommOp::barrier, 0, seconds_since(t0));
}

}  // namespace taco
