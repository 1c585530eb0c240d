// The NCCL side of parallel/nccl_communicator.h (CUDA builds; nccl_communicator_nocuda.cpp
// stands in without CUDA).
#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "engine/runtime/cuda_check.h"
#include "kernels/check.h"
#include "parallel/mpi_communicator.h"

namespace taco {

namespace {

using clock_type = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::u8:
      return ncclUint8;
    default:
      return ncclNumTypes;
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const MpiCommunicator& bootstrap, std::string name, double timeout)
      : Communicator(std::move(name)),
        rank_(bootstrap.rank()),
        size_(bootstrap.size()),
        timeout_(timeout) {
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
    TACO_CHECK_MPI(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, bootstrap.comm()), this->name(),
                   "nccl bootstrap", sizeof id);
    // Non-blocking init, so a peer that never joins ends in the timeout, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig", 0);
    wait_ready("ncclCommInitRankConfig");
  }

  ~NcclCommunicator() override {
    if (barrier_word_) cudaFree(barrier_word_);
    if (values_word_) cudaFree(values_word_);
    if (!comm_) return;
    // Finalize flushes outstanding work (polled, as the communicator is non-blocking).
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto t0 = clock_type::now();
    while (state == ncclInProgress && seconds_since(t0) < timeout_)
      ncclCommGetAsyncError(comm_, &state);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  bool enqueues() const override { return true; }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Stream stream) override {
    const auto t0 = clock_type::now();
    check(ncclAllReduce(send, recv, count, type(dtype, CommOp::all_reduce), red(op), comm_, stream),
          "ncclAllReduce", count * dtype_size(dtype));
    record(CommOp::all_reduce, count * dtype_size(dtype), seconds_since(t0));
  }

  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                      Stream stream) override {
    const auto t0 = clock_type::now();
    const size_t bytes = recv_count * dtype_size(dtype) * size_t(size_);
    check(ncclReduceScatter(send, recv, recv_count, type(dtype, CommOp::reduce_scatter), red(op),
                            comm_, stream),
          "ncclReduceScatter", bytes);
    record(CommOp::reduce_scatter, bytes, seconds_since(t0));
  }

  void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                  Stream stream) override {
    const auto t0 = clock_type::now();
    const size_t bytes = send_count * dtype_size(dtype) * size_t(size_);
    check(ncclAllGather(send, recv, send_count, type(dtype, CommOp::all_gather), comm_, stream),
          "ncclAllGather", bytes);
    record(CommOp::all_gather, bytes, seconds_since(t0));
  }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream stream) override {
    const auto t0 = clock_type::now();
    const ncclDataType_t t = type(dtype, CommOp::all_to_all);
    const size_t chunk = count * dtype_size(dtype);
    check(ncclGroupStart(), "ncclGroupStart", 0);
    for (int r = 0; r < size_; ++r) {
      check(
          ncclSend(static_cast<const char*>(send) + size_t(r) * chunk, count, t, r, comm_, stream),
          "ncclSend", chunk);
      check(ncclRecv(static_cast<char*>(recv) + size_t(r) * chunk, count, t, r, comm_, stream),
            "ncclRecv", chunk);
    }
    check(ncclGroupEnd(), "ncclGroupEnd", chunk * size_t(size_));
    record(CommOp::all_to_all, chunk * size_t(size_), seconds_since(t0));
  }

  void send(const void* buf, size_t count, DType dtype, int peer, int, Stream stream) override {
    check_peer(peer, CommOp::send);
    const auto t0 = clock_type::now();
    check(ncclSend(buf, count, type(dtype, CommOp::send), peer, comm_, stream), "ncclSend",
          count * dtype_size(dtype));
    record(CommOp::send, count * dtype_size(dtype), seconds_since(t0));
  }

  void recv(void* buf, size_t count, DType dtype, int peer, int, Stream stream) override {
    check_peer(peer, CommOp::recv);
    const auto t0 = clock_type::now();
    check(ncclRecv(buf, count, type(dtype, CommOp::recv), peer, comm_, stream), "ncclRecv",
          count * dtype_size(dtype));
    record(CommOp::recv, count * dtype_size(dtype), seconds_since(t0));
  }

  void send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf,
                 size_t recv_count, int src, DType dtype, int, Stream stream) override {
    const auto t0 = clock_type::now();
    const ncclDataType_t t = type(dtype, CommOp::send_recv);
    check(ncclGroupStart(), "ncclGroupStart", 0);
    if (send_count > 0) {
      check_peer(dst, CommOp::send_recv);
      check(ncclSend(send_buf, send_count, t, dst, comm_, stream), "ncclSend",
            send_count * dtype_size(dtype));
    }
    if (recv_count > 0) {
      check_peer(src, CommOp::send_recv);
      check(ncclRecv(recv_buf, recv_count, t, src, comm_, stream), "ncclRecv",
            recv_count * dtype_size(dtype));
    }
    check(ncclGroupEnd(), "ncclGroupEnd", send_count * dtype_size(dtype));
    record(CommOp::send_recv, send_count * dtype_size(dtype), seconds_since(t0));
  }

  void broadcast(void* buf, size_t count, DType dtype, int root, Stream stream) override {
    check_peer(root, CommOp::broadcast);
    const auto t0 = clock_type::now();
    check(ncclBroadcast(buf, buf, count, type(dtype, CommOp::broadcast), root, comm_, stream),
          "ncclBroadcast", count * dtype_size(dtype));
    record(CommOp::broadcast, count * dtype_size(dtype), seconds_since(t0));
  }

  void barrier(Stream stream) override {
    // A one-element all-reduce on a private scratch word, then a wait.
    if (!barrier_word_) TACO_CHECK_CUDA(cudaMalloc(&barrier_word_, sizeof(float)));
    const auto t0 = clock_type::now();
    check(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream),
          "ncclAllReduce (barrier)", 0);
    wait(stream);
    record(CommOp::barrier, 0, seconds_since(t0));
  }

  // Host values through a private device scratch (ncclFloat64), on the default stream, waited
  // for: a few numbers per step, so the copies cost nothing next to the step.
  void all_reduce_values(double* values, size_t count, ReduceOp op) override {
    const auto t0 = clock_type::now();
    if (count > values_capacity_) {
      if (values_word_) TACO_CHECK_CUDA(cudaFree(values_word_));
      values_word_ = nullptr;
      TACO_CHECK_CUDA(cudaMalloc(&values_word_, count * sizeof(double)));
      values_capacity_ = count;
    }
    const size_t bytes = count * sizeof(double);
    if (count > 0) {
      TACO_CHECK_CUDA(cudaMemcpy(values_word_, values, bytes, cudaMemcpyHostToDevice));
      check(ncclAllReduce(values_word_, values_word_, count, ncclFloat64, red(op), comm_, nullptr),
            "ncclAllReduce (values)", bytes);
      wait(nullptr);
      TACO_CHECK_CUDA(cudaMemcpy(values, values_word_, bytes, cudaMemcpyDeviceToHost));
    }
    record(CommOp::all_reduce, bytes, seconds_since(t0));
  }

  // Polls the stream and the communicator's async error until the stream is done.
  void wait(Stream stream) {
    const auto t0 = clock_type::now();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) TACO_CHECK_CUDA(q);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail("NCCL asynchronous error " + std::string(ncclGetErrorString(async)) +
             " (a peer failed or the network broke)");
      }
      if (seconds_since(t0) > timeout_) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail("no progress for " + std::to_string(int(timeout_)) +
             " s (a peer died or hangs); aborted the communicator");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  static double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("rank " + std::to_string(rank_) + " of NCCL group " + name() + ": " + what, 1);
  }

  // A non-blocking communicator returns ncclInProgress from a call that is still being set up
  // (an init, or a group's ncclGroupEnd): the operation is enqueued, and the communicator may
  // be used again, only once its state has turned to ncclSuccess, so wait for that here.
  // Anything else but success is an error.
  void check(ncclResult_t r, const char* call, size_t bytes) {
    if (r == ncclInProgress) return wait_ready(call);
    if (r == ncclSuccess) return;
    std::string detail = ncclGetErrorString(r);
    if (comm_) {
      const char* last = ncclGetLastError(comm_);
      if (last && *last) detail += std::string(": ") + last;
    }
    fail(std::string(call) + " (" + std::to_string(bytes) + " bytes) failed: " + detail);
  }

  void wait_ready(const char* call) {
    const auto t0 = clock_type::now();
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclInProgress && seconds_since(t0) > timeout_) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail(std::string(call) + ": peers did not join within " + std::to_string(int(timeout_)) +
             " s");
      }
      // spin briefly (an enqueue takes microseconds), then poll gently (an init takes longer)
      if (state == ncclInProgress) {
        if (seconds_since(t0) < 1e-3) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
    }
    check(state, call, 0);
  }

  ncclDataType_t type(DType dtype, CommOp op) const {
    const bool reduction = op == CommOp::all_reduce || op == CommOp::reduce_scatter;
    const bool ok = reduction ? (dtype == DType::f32 || dtype == DType::bf16)
                              : (dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::u8);
    TACO_CHECK(ok, std::string(comm_op_name(op)) + " on NCCL group " + name() + ": dtype " +
                       dtype_name(dtype) + " not supported");
    return nccl_type(dtype);
  }

  static ncclRedOp_t red(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

  void check_peer(int peer, CommOp op) const {
    TACO_CHECK(peer >= 0 && peer < size_, std::string(comm_op_name(op)) + " on NCCL group " +
                                              name() + ": peer " + std::to_string(peer) +
                                              " outside 0.." + std::to_string(size_ - 1));
  }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  double timeout_ = 600;
  float* barrier_word_ = nullptr;
  double* values_word_ = nullptr;  // all_reduce_values' scratch, values_capacity_ doubles
  size_t values_capacity_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& bootstrap,
                                                     std::string name, double timeout_seconds) {
  return std::make_unique<NcclCommunicator>(bootstrap, std::move(name), timeout_seconds);
}

bool nccl_available() {
  static const bool available = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
  }();
  return available;
}

void wait_for_communicator(Communicator& comm, Stream stream) {
  if (auto* nccl = dynamic_cast<NcclCommunicator*>(&comm)) return nccl->wait(stream);
  if (nccl_available()) TACO_CHECK_CUDA(cudaStreamSynchronize(stream));  // else no GPU work
}

}  // namespace taco
