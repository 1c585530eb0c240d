// NcclCommunicator (parallel/nccl_communicator.h) on one GPU: a group of one rank (NCCL refuses
// two ranks on one device; the multi-GPU runs are the multi-GPU issue's). Each call moves fresh
// random device data the way a group of one must: reductions and gathers return the input,
// self send/recv and broadcast copy it, and wait_for_communicator returns once the stream is
// done. Skips without a GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

extern "C" const int taco_test_joins_mpi = 1;

namespace taco {
namespace {

#if TACO_HAVE_CUDA

using test::DeviceArray;

TEST(GpuNccl, GroupOfOneMovesDataLikeTheCollectivesSay) {
  TACO_SKIP_WITHOUT_GPU();
  MpiCommunicator self(MPI_COMM_SELF, "self");
  auto nccl = make_nccl_communicator(self, "self", 60.0);
  ASSERT_EQ(nccl->size(), 1);
  EXPECT_STREQ(nccl->backend(), "nccl");
  const size_t n = 1 << 20;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::vector<float> x = test::random_normal(n, seed);
  DeviceArray<float> a(x), b(n);

  nccl->all_reduce(a.get(), b.get(), n, DType::f32, ReduceOp::sum, nullptr);
  wait_for_communicator(*nccl, nullptr);
  EXPECT_EQ(b.download(), x);
  b.poison();
  nccl->all_gather(a.get(), b.get(), n, DType::f32, nullptr);
  nccl->reduce_scatter(b.get(), b.get() + 0, n, DType::f32, ReduceOp::max, nullptr);
  wait_for_communicator(*nccl, nullptr);
  EXPECT_EQ(b.download(), x);
  b.poison();
  nccl->send_recv(a.get(), n, 0, b.get(), n, 0, DType::f32, 0, nullptr);
  wait_for_communicator(*nccl, nullptr);
  EXPECT_EQ(b.download(), x);
  nccl->broadcast(a.get(), n, DType::f32, 0, nullptr);
  nccl->barrier(nullptr);
  EXPECT_EQ(a.download(), x);
  const CommStats& st = nccl->stats();
  EXPECT_EQ(st[CommOp::all_reduce].calls, 1);
  EXPECT_EQ(st[CommOp::all_reduce].bytes, int64_t(n * sizeof(float)));
  EXPECT_EQ(st[CommOp::all_reduce].bytes_sent, 0);  // a group of one sends nothing
}

// Host values go through a device scratch and come back: in a group of one, unchanged.
TEST(GpuNccl, HostValuesComeBackReduced) {
  TACO_SKIP_WITHOUT_GPU();
  MpiCommunicator self(MPI_COMM_SELF, "self");
  auto nccl = make_nccl_communicator(self, "self", 60.0);
  double values[3] = {1.5, -2.25, 1e-300};
  nccl->all_reduce_values(values, 3, ReduceOp::sum);
  EXPECT_EQ(values[0], 1.5);
  EXPECT_EQ(values[1], -2.25);
  EXPECT_EQ(values[2], 1e-300);
  double more[5] = {1, 2, 3, 4, 5};  // a larger count than the scratch held
  nccl->all_reduce_values(more, 5, ReduceOp::max);
  EXPECT_EQ(more[4], 5.0);
  EXPECT_EQ(nccl->stats()[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(nccl->stats()[CommOp::all_reduce].bytes, int64_t(8 * sizeof(double)));
}

#else

TEST(GpuNccl, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace taco
