// ProcessGrid under mpirun: coordinates and group membership against the Megatron formula
// rank = (dp_i * pp + pp_i) * tp + tp_i, for layouts of 4 ranks (run on each block of 4 ranks of
// the world) and of 8 ranks; validation errors thrown alike on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "parallel/process_grid.h"
#include "tests/mpi/mpi_test_fixture.h"

namespace taco {
namespace {

constexpr Stream kHost = nullptr;

// World ranks (within the grid's world) of every member of `group`, in group-rank order.
std::vector<int> members(Communicator& group, int world_rank) {
  std::vector<int> all(size_t(group.size()));
  group.all_gather(&world_rank, all.data(), sizeof(int), DType::u8, kHost);
  return all;
}

// The world ranks that the formula puts in each of this rank's groups.
std::vector<int> expected_members(const GridShape& s, GridCoord c, char axis) {
  std::vector<int> out;
  const int n = axis == 't' ? s.tp : axis == 'p' ? s.pp : s.dp;
  for (int i = 0; i < n; ++i) {
    GridCoord m = c;
    (axis == 't' ? m.tp : axis == 'p' ? m.pp : m.dp) = i;
    out.push_back(grid_world_rank(s, m));
  }
  return out;
}

// Sums of world ranks over the group must be exactly the members' sum (small integers are exact
// in fp32), and the maximum the largest member.
void expect_all_reduce_over(Communicator& group, int world_rank, const std::vector<int>& want) {
  float x[2] = {float(world_rank), float(world_rank)}, sum[2], max[2];
  group.all_reduce(x, sum, 2, DType::f32, ReduceOp::sum, kHost);
  group.all_reduce(x, max, 2, DType::f32, ReduceOp::max, kHost);
  int want_sum = 0;
  for (int r : want) want_sum += r;
  EXPECT_EQ(sum[0], float(want_sum)) << "group " << group.name();
  EXPECT_EQ(max[1], float(*std::max_element(want.begin(), want.end()))) << "group " << group.name();
}

void check_layout(MPI_Comm world, const GridShape& s) {
  SCOPED_TRACE(layout_string(s));
  ProcessGrid grid(world, s);
  const int rank = grid.world_rank();
  const GridCoord c = grid.coord();
  EXPECT_EQ(grid.world_size(), s.tp * s.pp * s.dp);
  EXPECT_EQ(grid_world_rank(s, c), rank);
  EXPECT_EQ(c.tp, rank % s.tp);  // tp fastest
  EXPECT_EQ(c.dp, rank / (s.tp * s.pp));
  EXPECT_EQ(grid.layout_string(), layout_string(s));

  struct Axis {
    Communicator& comm;
    char axis;
    int coord;
  };
  for (Axis a :
       {Axis{grid.tp(), 't', c.tp}, Axis{grid.pp(), 'p', c.pp}, Axis{grid.dp(), 'd', c.dp}}) {
    SCOPED_TRACE(a.comm.name());
    const auto want = expected_members(s, c, a.axis);
    EXPECT_EQ(a.comm.rank(), a.coord);  // group rank = coordinate along the axis
    EXPECT_EQ(members(a.comm, rank), want);
    expect_all_reduce_over(a.comm, rank, want);
  }
  EXPECT_EQ(grid.tp().name(), "tp");
  EXPECT_EQ(grid.pp().name(), "pp");
  EXPECT_EQ(grid.dp().name(), "dp");

  // mp: one model replica, every (tp_i, pp_i) of this dp_i.
  std::vector<int> replica;
  for (int r = 0; r < s.tp * s.pp; ++r) replica.push_back(c.dp * s.tp * s.pp + r);
  EXPECT_EQ(members(grid.mp(), rank), replica);
  expect_all_reduce_over(grid.mp(), rank, replica);

  // Pipeline ends and neighbours.
  EXPECT_EQ(grid.is_first_stage(), c.pp == 0);
  EXPECT_EQ(grid.is_last_stage(), c.pp == s.pp - 1);
  EXPECT_EQ(grid.prev_stage(), c.pp == 0 ? -1 : c.pp - 1);
  EXPECT_EQ(grid.next_stage(), c.pp == s.pp - 1 ? -1 : c.pp + 1);

  // Embedding group: first and last stage of this pipeline (one rank when pp = 1).
  const bool end_stage = c.pp == 0 || c.pp == s.pp - 1;
  EXPECT_EQ(grid.in_embedding_group(), end_stage);
  if (end_stage) {
    std::set<int> ends = {grid_world_rank(s, {c.tp, 0, c.dp}),
                          grid_world_rank(s, {c.tp, s.pp - 1, c.dp})};
    const std::vector<int> want(ends.begin(), ends.end());
    EXPECT_EQ(members(grid.embedding(), rank), want);
    expect_all_reduce_over(grid.embedding(), rank, want);
  } else {
    EXPECT_THROW(grid.embedding(), Error);
  }
}

class ProcessGridTest : public test::MpiTest {
 protected:
  // Runs `body` on each block of n consecutive world ranks; ranks beyond the last full block
  // (and every rank when the world is smaller than n) sit out.
  template <class F>
  bool on_blocks_of(int n, F&& body) {
    if (world_size_ < n) return false;
    const int color = world_rank_ < world_size_ / n * n ? world_rank_ / n : MPI_UNDEFINED;
    MPI_Comm block = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, color, world_rank_, &block);
    if (block != MPI_COMM_NULL) {
      body(block);
      MPI_Comm_free(&block);
    }
    return true;
  }
};

TEST_F(ProcessGridTest, TpTwoDpTwoOnFourRanksFollowsMegatronOrder) {
  if (!on_blocks_of(4, [](MPI_Comm w) { check_layout(w, {2, 1, 2}); })) GTEST_SKIP() << "np < 4";
}

TEST_F(ProcessGridTest, TpTwoPpTwoOnFourRanksFollowsMegatronOrder) {
  if (!on_blocks_of(4, [](MPI_Comm w) { check_layout(w, {2, 2, 1}); })) GTEST_SKIP() << "np < 4";
}

TEST_F(ProcessGridTest, PpFourOnFourRanksHasMiddleStagesOutsideEmbeddingGroup) {
  if (!on_blocks_of(4, [](MPI_Comm w) { check_layout(w, {1, 4, 1}); })) GTEST_SKIP() << "np < 4";
}

TEST_F(ProcessGridTest, TpTwoPpTwoDpTwoOnEightRanksFollowsMegatronOrder) {
  if (!on_blocks_of(8, [](MPI_Comm w) { check_layout(w, {2, 2, 2}); })) GTEST_SKIP() << "np < 8";
}

TEST_F(ProcessGridTest, LayoutStringNamesEveryAxisAndTheWorld) {
  EXPECT_EQ(layout_string({2, 1, 1}), "tp=2 pp=1 dp=1 (world 2)");
  EXPECT_EQ(layout_string({2, 2, 2}), "tp=2 pp=2 dp=2 (world 8)");
}

// Every rank must throw the same UserError (exit code 2) without waiting for a peer; counted
// over the world so a rank that went on (and would hang the others) fails the test.
void expect_user_error_on_every_rank(MPI_Comm world, GridShape s, const GridModelSizes& m,
                                     const std::string& message) {
  int threw = 0;
  try {
    ProcessGrid grid(world, s, m);
    ADD_FAILURE() << "no throw; expected: " << message;
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), message);
    EXPECT_EQ(e.exit_code(), 2);
    threw = 1;
  }
  int ranks_threw = 0, size = 0;
  MPI_Allreduce(&threw, &ranks_threw, 1, MPI_INT, MPI_SUM, world);
  MPI_Comm_size(world, &size);
  EXPECT_EQ(ranks_threw, size);
}

TEST_F(ProcessGridTest, WorldSizeMismatchIsAUserErrorOnEveryRank) {
  const bool ran = on_blocks_of(3, [](MPI_Comm w) {
    expect_user_error_on_every_rank(
        w, {2, 1, 1}, {},
        "world size 3 != dp*pp*tp = 1*1*2; launch with mpirun -np 2 or change parallel.tp");
  });
  if (!ran) GTEST_SKIP() << "np < 3";
  // When a dp would fit, the message says which.
  expect_user_error_on_every_rank(
      MPI_COMM_WORLD, {1, 1, world_size_ + 1}, {},
      "world size " + std::to_string(world_size_) +
          " != dp*pp*tp = " + std::to_string(world_size_ + 1) + "*1*1; launch with mpirun -np " +
          std::to_string(world_size_ + 1) +
          " or change parallel.dp (parallel.dp = " + std::to_string(world_size_) + " fits)");
}

TEST_F(ProcessGridTest, ModelSizesTheLayoutDoesNotDivideAreUserErrorsOnEveryRank) {
  const bool ran = on_blocks_of(4, [](MPI_Comm w) {
    GridModelSizes m{.n_head = 6, .d_model = 96, .n_layer = 6, .vocab_size = 256};
    expect_user_error_on_every_rank(
        w, {4, 1, 1}, m,
        "model.n_head = 6 is not divisible by parallel.tp = 4 (each tensor-parallel rank holds "
        "n_head/tp heads); choose parallel.tp dividing 6 or change model.n_head");
    m.n_head = 8;
    m.d_model = 90;
    expect_user_error_on_every_rank(
        w, {4, 1, 1}, m,
        "model.d_model = 90 is not divisible by parallel.tp = 4 (each tensor-parallel rank holds "
        "d_model/tp columns); choose parallel.tp dividing 90 or change model.d_model");
    m.d_model = 96;
    m.n_layer = 5;
    expect_user_error_on_every_rank(
        w, {2, 2, 1}, m,
        "model.n_layer = 5 is not divisible by parallel.pp = 2 (each pipeline stage holds "
        "n_layer/pp blocks); choose parallel.pp dividing 5 or change model.n_layer");
    m.n_layer = 4;
    m.vocab_size = 50257;  // GPT-2's: padded to 50432 at tp = 2 (parallel/vocab_split.h)
    m.seq_len = 1023;
    m.sequence_parallel = true;
    expect_user_error_on_every_rank(
        w, {2, 1, 2}, m,
        "model.seq_len = 1023 is not divisible by parallel.tp = 2 (with "
        "parallel.sequence_parallel each tp rank holds seq_len/tp tokens); choose parallel.tp "
        "dividing 1023 or change model.seq_len");
    m.sequence_parallel = false;  // an odd seq_len is fine without SP
    ProcessGrid grid(w, {2, 1, 2}, m);
    EXPECT_EQ(grid.layout_string(), "tp=2 pp=1 dp=2 (world 4)");
  });
  if (!ran) GTEST_SKIP() << "np < 4";
}

TEST_F(ProcessGridTest, AxisBelowOneIsAUserError) {
  expect_user_error_on_every_rank(MPI_COMM_WORLD, {1, 0, world_size_}, {},
                                  "parallel.pp = 0 must be at least 1");
}

}  // namespace
}  // namespace taco
