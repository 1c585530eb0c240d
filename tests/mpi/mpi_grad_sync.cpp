// GradSync (parallel/grad_sync.h) and the host values (parallel/host_values.h) under mpirun
// -np 3: the data-parallel sum, ZeRO-1's reduce-scatter into each rank's ZeroShard (a buffer 3
// does not divide) and its all-gather of parameters, the sequence-parallel and tied-embedding
// sums, and the gradient norm, each against the serial sum over ranks; every call accounted at
// its site. The values are small multiples of 1/2, so every order of summation gives the same
// float and the comparison is exact.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/arena.h"
#include "parallel/grad_sync.h"
#include "parallel/host_values.h"
#include "parallel/process_grid.h"
#include "parallel/site_comm.h"
#include "parallel/zero_shard.h"

namespace taco {
namespace {

// Rank r's gradient element i.
float value(int r, size_t i) { return float(int((i * 7 + size_t(r) * 13) % 17)) * 0.5f - 4.0f; }

// The sum over `ranks` (world ranks) of value(r, i), serially.
std::vector<float> serial_sum(const std::vector<int>& ranks, size_t n) {
  std::vector<float> out(n, 0.f);
  for (int r : ranks)
    for (size_t i = 0; i < n; ++i) out[i] += value(r, i);
  return out;
}

std::vector<float> mine(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

Tensor host_tensor(std::vector<float>& v) {
  return Tensor{v.data(), DType::f32, DeviceKind::cpu, v.size()};
}

class GradSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    ASSERT_EQ(size_, 3) << "run under mpirun -np 3";
  }
  int rank_ = 0, size_ = 1;
};

TEST_F(GradSyncTest, DataParallelSumEqualsSerialSum) {
  ProcessGrid grid(MPI_COMM_WORLD, GridShape{1, 1, 3});
  SiteComm tp(grid.tp()), dp(grid.dp());
  const size_t n = 1001;
  GradSync sync(GradSyncGroups{&tp, &dp, nullptr, &grid.world(), &grid.mp()}, ZeroShard(n), false);
  std::vector<float> grads = mine(rank_, n);
  sync.reduce({}, Tensor{}, host_tensor(grads), host_tensor(grads));
  EXPECT_EQ(grads, serial_sum({0, 1, 2}, n));
  ASSERT_EQ(dp.stats()[Site::dp_grad].calls, 1);
  EXPECT_EQ(dp.stats()[Site::dp_grad].logical_bytes, int64_t(n * sizeof(float)));
  // Without ZeRO-1 the dp replicas hold the same sum: the norm sums over one replica (here a
  // group of one).
  EXPECT_EQ(sync.norm(4.0), 2.0);
}

TEST_F(GradSyncTest, ZeroReduceScattersEachShardAndGathersParameters) {
  ProcessGrid grid(MPI_COMM_WORLD, GridShape{1, 1, 3});
  SiteComm tp(grid.tp()), dp(grid.dp());
  const size_t n = 1001;  // slots of 334, the last one with 2 elements of padding
  const ZeroShard shard(n, 3, grid.coord().dp);
  GradSync sync(GradSyncGroups{&tp, &dp, nullptr, &grid.world(), &grid.mp()}, shard, true);
  Arena arena(DeviceKind::cpu);
  sync.plan(arena, DType::f32);
  arena.allocate();
  sync.bind(arena);

  std::vector<float> grads_padded = mine(rank_, n);
  grads_padded.resize(shard.padded_total(), 0.f);
  const Tensor padded = host_tensor(grads_padded);
  sync.reduce({}, Tensor{}, padded.slice(0, n), padded);
  const std::vector<float> want = serial_sum({0, 1, 2}, n);
  for (size_t i = shard.begin(); i < shard.end(); ++i)
    ASSERT_EQ(grads_padded[i], want[i]) << "element " << i << " of rank " << rank_;
  EXPECT_EQ(dp.stats()[Site::dp_grad].calls, 1);

  // Shards are disjoint: the norm sums every rank's part over the world.
  EXPECT_EQ(sync.norm(double(rank_ + 1)), std::sqrt(6.0));

  // Each rank updated only its shard; the all-gather hands every rank all of them.
  std::vector<float> params(shard.padded_total(), -1.f);
  for (size_t i = shard.begin(); i < shard.end(); ++i) params[i] = value(rank_, i);
  sync.gather_params(host_tensor(params));
  for (int r = 0; r < 3; ++r) {
    const ZeroShard theirs(n, 3, r);
    for (size_t i = theirs.begin(); i < theirs.end(); ++i)
      ASSERT_EQ(params[i], value(r, i)) << "element " << i << " from rank " << r;
  }
  EXPECT_EQ(dp.stats()[Site::dp_param].calls, 1);
}

TEST_F(GradSyncTest, SequenceParallelAndTiedEmbeddingSums) {
  {  // tp = 3: the partial sums of sequence parallelism, over tp
    ProcessGrid grid(MPI_COMM_WORLD, GridShape{3, 1, 1});
    SiteComm tp(grid.tp()), dp(grid.dp());
    GradSync sync(GradSyncGroups{&tp, &dp, nullptr, &grid.world(), &grid.mp()}, ZeroShard(96),
                  false);
    std::vector<float> flat = mine(rank_, 96);
    const Tensor all = host_tensor(flat);
    sync.reduce({{all.slice(0, 48), 1, 0}, {all.slice(48, 48), 1, 1}}, Tensor{}, all, all);
    EXPECT_EQ(flat, serial_sum({0, 1, 2}, 96));
    EXPECT_EQ(tp.stats()[Site::sp_grad].calls, 2);
  }
  {  // pp = 3: the tied embedding's copies on the first and the last stage
    ProcessGrid grid(MPI_COMM_WORLD, GridShape{1, 3, 1});
    SiteComm tp(grid.tp()), dp(grid.dp());
    std::unique_ptr<SiteComm> embedding;
    if (grid.in_embedding_group()) embedding = std::make_unique<SiteComm>(grid.embedding());
    GradSync sync(GradSyncGroups{&tp, &dp, embedding.get(), &grid.world(), &grid.mp()},
                  ZeroShard(40), false);
    std::vector<float> flat = mine(rank_, 40);
    const Tensor all = host_tensor(flat);
    sync.reduce({}, embedding ? all.slice(0, 40) : Tensor{}, all, all);
    EXPECT_EQ(flat, embedding ? serial_sum({0, 2}, 40) : mine(rank_, 40));
    if (embedding) {
      EXPECT_EQ(embedding->stats()[Site::tied_grad].calls, 1);
    }
  }
}

TEST_F(GradSyncTest, HostValuesAgreeOnEveryRank) {
  MpiCommunicator world(MPI_COMM_WORLD, "world");
  EXPECT_EQ(sum_over(world, 0.5 * (rank_ + 1), Site::loss_sum), 3.0);
  EXPECT_EQ(max_over(world, rank_ == 1 ? 15 : 0, Site::stop_signal), 15);
  std::string message;
  EXPECT_TRUE(agree(world, true, &message, Site::checkpoint));
  // Ranks 1 and 2 fail: every rank learns rank 1's message, the lowest failing one.
  message = "rank " + std::to_string(rank_) + " failed";
  EXPECT_FALSE(agree(world, rank_ == 0, &message, Site::checkpoint));
  EXPECT_EQ(message, "rank 1 failed");
  EXPECT_EQ(broadcast_string(world, rank_ == 2 ? "from two" : "", 2, Site::checkpoint), "from two");
  EXPECT_EQ(world.stats()[CommOp::all_reduce].calls, 4);
}

}  // namespace
}  // namespace taco
