// HostStagedCommunicator (parallel/staged_communicator.h) under mpirun -np 2: the collectives
// and point-to-point calls give the same bits as the MPI communicator it wraps, on host buffers
// (passed straight through) and, where a GPU exists, on device buffers staged through pinned host
// memory (both ranks on one GPU: how tp=2 runs on a single device). Fresh random data per run.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <vector>

#include "engine/runtime/device.h"
#include "parallel/mpi_communicator.h"
#include "parallel/staged_communicator.h"
#include "tests/support/test_util.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace taco {
namespace {

// A buffer in host or device memory with host-side upload and download.
class Buffer {
 public:
  Buffer(size_t n, bool device) : n_(n), device_(device) {
#if TACO_HAVE_CUDA
    if (device_) {
      EXPECT_EQ(cudaMalloc(&p_, n * sizeof(float)), cudaSuccess);
      return;
    }
#endif
    host_.assign(n, 0.f);
    p_ = host_.data();
  }
  ~Buffer() {
#if TACO_HAVE_CUDA
    if (device_) cudaFree(p_);
#endif
  }
  float* get() { return static_cast<float*>(p_); }
  // The first `count` elements.
  std::vector<float> head(size_t count) const {
    std::vector<float> v = read();
    v.resize(count);
    return v;
  }
  void set(const std::vector<float>& v) {
#if TACO_HAVE_CUDA
    if (device_) {
      EXPECT_EQ(cudaMemcpy(p_, v.data(), n_ * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      return;
    }
#endif
    std::memcpy(p_, v.data(), n_ * sizeof(float));
  }
  std::vector<float> read() const {
    std::vector<float> v(n_);
#if TACO_HAVE_CUDA
    if (device_) {
      EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      return v;
    }
#endif
    std::memcpy(v.data(), p_, n_ * sizeof(float));
    return v;
  }

 private:
  size_t n_;
  bool device_;
  void* p_ = nullptr;
  std::vector<float> host_;
};

void check_same_as_mpi(bool device) {
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  HostStagedCommunicator staged(mpi);
  const int p = mpi.size(), r = mpi.rank();
  const size_t n = 3000;
  uint64_t seed = test::fresh_seed();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  SCOPED_TRACE("seed " + std::to_string(seed) + (device ? " device" : " host"));
  const std::vector<float> x = test::random_normal(n * p, seed + r);

  // Reference results on host buffers through MPI itself.
  std::vector<float> ar(n * p), rs(n), ag(n * p * p), sr(n * p), bc = x;
  mpi.all_reduce(x.data(), ar.data(), n * p, DType::f32, ReduceOp::sum, nullptr);
  mpi.reduce_scatter(x.data(), rs.data(), n, DType::f32, ReduceOp::sum, nullptr);
  mpi.all_gather(x.data(), ag.data(), n * p, DType::f32, nullptr);
  const int peer = (r + 1) % p, from = (r + p - 1) % p;
  mpi.send_recv(x.data(), n * p, peer, sr.data(), n * p, from, DType::f32, 3, nullptr);
  mpi.broadcast(bc.data(), n * p, DType::f32, 1 % p, nullptr);

  Buffer in(n * p, device), out(n * p * p, device);
  in.set(x);
  staged.all_reduce(in.get(), out.get(), n * p, DType::f32, ReduceOp::sum, nullptr);
  EXPECT_EQ(out.head(n * p), ar);
  staged.all_reduce(in.get(), in.get(), n * p, DType::f32, ReduceOp::sum, nullptr);  // in place
  EXPECT_EQ(in.read(), ar);
  in.set(x);
  staged.reduce_scatter(in.get(), out.get(), n, DType::f32, ReduceOp::sum, nullptr);
  EXPECT_EQ(out.head(n), rs);
  staged.all_gather(in.get(), out.get(), n * p, DType::f32, nullptr);
  EXPECT_EQ(out.read(), ag);
  staged.send_recv(in.get(), n * p, peer, out.get(), n * p, from, DType::f32, 3, nullptr);
  EXPECT_EQ(out.head(n * p), sr);
  staged.broadcast(in.get(), n * p, DType::f32, 1 % p, nullptr);
  EXPECT_EQ(in.read(), bc);
  staged.barrier(nullptr);
  EXPECT_EQ(staged.stats()[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(staged.stats()[CommOp::all_reduce].bytes, int64_t(2 * n * p * sizeof(float)));
}

TEST(StagedCommunicator, HostBuffersPassThroughWithMpisResults) { check_same_as_mpi(false); }

TEST(StagedCommunicator, DeviceBuffersAreStagedWithMpisResults) {
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  check_same_as_mpi(true);
}

// Host values (loss sums, norms, flags) pass straight to the host communicator: MPI's exact
// double sum and max, counted once as an all_reduce of the staged communicator.
TEST(StagedCommunicator, HostValuesAreTheHostCommunicatorsReduction) {
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  HostStagedCommunicator staged(mpi);
  const int p = mpi.size(), r = mpi.rank();
  double values[3] = {0.5 * (r + 1), -double(r), 1e-300};
  staged.all_reduce_values(values, 3, ReduceOp::sum);
  EXPECT_EQ(values[0], 0.25 * p * (p + 1));
  EXPECT_EQ(values[1], -0.5 * p * (p - 1));
  EXPECT_EQ(values[2], 1e-300 * p);
  double top = r;
  staged.all_reduce_values(&top, 1, ReduceOp::max);
  EXPECT_EQ(top, double(p - 1));
  EXPECT_EQ(staged.stats()[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(staged.stats()[CommOp::all_reduce].bytes, int64_t(4 * sizeof(double)));
  EXPECT_EQ(mpi.stats()[CommOp::all_reduce].calls, 2);
}

}  // namespace
}  // namespace taco
