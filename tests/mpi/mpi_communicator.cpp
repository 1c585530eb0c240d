// MpiCommunicator under mpirun: every collective and point-to-point call checked against the
// result computed locally from every rank's input (each rank regenerates all inputs from one
// fresh seed that rank 0 draws), for fp32, bf16 and bytes; the stats counters; the errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "parallel/mpi_communicator.h"
#include "tests/mpi/mpi_test_fixture.h"

namespace taco {
namespace {

constexpr Stream kHost = nullptr;

// Rank `rank`'s input for one case: n standard normal values from its own stream of `seed`.
std::vector<float> input_of(uint64_t seed, int rank, size_t n) {
  return test::random_normal(n, seed + 0x9E3779B97F4A7C15ull * uint64_t(rank + 1));
}

using test::to_bf16;
using test::to_float;

// Inputs as the ranks hold them: fp32, or rounded to bf16 (and read back as float).
std::vector<float> held_input(uint64_t seed, int rank, size_t n, DType dtype) {
  std::vector<float> x = input_of(seed, rank, n);
  return dtype == DType::bf16 ? to_float(to_bf16(x)) : x;
}

// Rounding bound of a sum over p ranks, whatever tree MPI uses: each of the p-1 pairwise
// combines adds one rounding of at most u * |partial sum| <= u * sum_r |x_r|, with unit roundoff
// u = 2^-24 for fp32 and 2^-8 + 2^-24 for bf16 (an fp32 add, then a round to 8 bits).
double sum_tolerance(DType dtype, int p, double abs_sum) {
  const double u =
      dtype == DType::bf16 ? std::ldexp(1.0, -8) + std::ldexp(1.0, -24) : std::ldexp(1.0, -24);
  return (p - 1) * u * abs_sum;
}

// Checks out[i] (as float) against sum or max over ranks of inputs[r][offset + i].
void expect_reduced(const std::vector<float>& out, const std::vector<std::vector<float>>& inputs,
                    size_t offset, ReduceOp op, DType dtype) {
  const int p = int(inputs.size());
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    double exact = op == ReduceOp::sum ? 0.0 : -std::numeric_limits<double>::infinity();
    double abs_sum = 0;
    for (const auto& x : inputs) {
      const double v = x[offset + i];
      exact = op == ReduceOp::sum ? exact + v : std::max(exact, v);
      abs_sum += std::abs(v);
    }
    const double tol = op == ReduceOp::sum ? sum_tolerance(dtype, p, abs_sum) : 0.0;  // max: exact
    if (std::abs(double(out[i]) - exact) > tol && bad++ < 5) {
      ADD_FAILURE() << "element " << offset + i << ": got " << out[i] << ", expected " << exact
                    << " +- " << tol;
    }
  }
  EXPECT_EQ(bad, 0u) << "elements outside the rounding bound";
}

template <class T>
std::vector<float> as_float(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_float(x);
  } else {
    return x;
  }
}

template <class T>
std::vector<T> as_dtype(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_bf16(x);
  } else {
    return x;
  }
}

template <class T>
DType dtype_of() {
  return std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
}

// Bitwise equality (bf16 has no operator==; NaN payloads count as equal bits).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Replicas that drift apart corrupt training silently: every rank must hold the same bits.
void expect_identical_on_all_ranks(Communicator& comm, const void* data, size_t bytes) {
  std::vector<char> mine(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  std::vector<char> root = mine;
  comm.broadcast(root.data(), bytes, DType::u8, 0, kHost);
  EXPECT_EQ(std::memcmp(root.data(), mine.data(), bytes), 0)
      << "rank " << comm.rank() << " differs from rank 0";
}

class MpiCommunicatorTest : public test::MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    comm_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
    p_ = comm_->size();
    r_ = comm_->rank();
  }
  void TearDown() override {
    comm_.reset();
    MpiTest::TearDown();
  }

  std::vector<std::vector<float>> all_inputs(uint64_t seed, size_t n, DType dtype) const {
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < p_; ++r) inputs.push_back(held_input(seed, r, n, dtype));
    return inputs;
  }

  template <class T>
  void check_all_reduce(size_t n, ReduceOp op, bool in_place) {
    const uint64_t seed = shared_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed << " n " << n << " " << reduce_op_name(op)
                                    << (in_place ? " in place" : ""));
    const DType dtype = dtype_of<T>();
    const auto inputs = all_inputs(seed, n, dtype);
    std::vector<T> send = as_dtype<T>(inputs[size_t(r_)]);
    std::vector<T> recv(n);
    if (in_place) {
      comm_->all_reduce(send.data(), send.data(), n, dtype, op, kHost);
      recv = send;
    } else {
      comm_->all_reduce(send.data(), recv.data(), n, dtype, op, kHost);
      EXPECT_TRUE(same_bits(send, as_dtype<T>(inputs[size_t(r_)]))) << "input was modified";
    }
    expect_reduced(as_float(recv), inputs, 0, op, dtype);
    expect_identical_on_all_ranks(*comm_, recv.data(), n * sizeof(T));
  }

  std::unique_ptr<MpiCommunicator> comm_;
  int p_ = 1, r_ = 0;
};

TEST_F(MpiCommunicatorTest, AllReduceSumFp32WithinRoundingOfExactSum) {
  for (size_t n : {size_t(1), size_t(1000003)}) {
    check_all_reduce<float>(n, ReduceOp::sum, false);
    check_all_reduce<float>(n, ReduceOp::sum, true);
  }
}

TEST_F(MpiCommunicatorTest, AllReduceSumBf16WithinRoundingOfExactSum) {
  for (size_t n : {size_t(1), size_t(1000003)}) {
    check_all_reduce<bf16>(n, ReduceOp::sum, false);
    check_all_reduce<bf16>(n, ReduceOp::sum, true);
  }
}

TEST_F(MpiCommunicatorTest, AllReduceMaxIsExactForFp32AndBf16) {
  for (size_t n : {size_t(1), size_t(4099)}) {
    check_all_reduce<float>(n, ReduceOp::max, false);
    check_all_reduce<bf16>(n, ReduceOp::max, true);
  }
}

// Two ranks combine once: the bf16 sum is exactly one fp32 add rounded to nearest even.
TEST_F(MpiCommunicatorTest, Bf16SumOfTwoRanksIsFp32AddRoundedOnce) {
  if (p_ < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = comm_->split(r_ < 2 ? 0 : MPI_UNDEFINED, r_, "pair");
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  if (pair) {
    const size_t n = 100003;
    const auto a = to_bf16(input_of(seed, 0, n)), b = to_bf16(input_of(seed, 1, n));
    std::vector<bf16> x = r_ == 0 ? a : b;
    pair->all_reduce(x.data(), x.data(), n, DType::bf16, ReduceOp::sum, kHost);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      bf16 want = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
      bad += x[i].bits != want.bits;
    }
    EXPECT_EQ(bad, 0u) << "of " << n << " sums differ from bf16(float(a) + float(b))";
  }
}

TEST_F(MpiCommunicatorTest, Bf16ReductionsKeepNaNVisible) {
  std::vector<bf16> x = to_bf16(input_of(shared_seed(), r_, 8));
  if (r_ == p_ - 1) x[3] = float_to_bf16(std::numeric_limits<float>::quiet_NaN());
  std::vector<bf16> sum(8), max(8);
  comm_->all_reduce(x.data(), sum.data(), 8, DType::bf16, ReduceOp::sum, kHost);
  comm_->all_reduce(x.data(), max.data(), 8, DType::bf16, ReduceOp::max, kHost);
  EXPECT_TRUE(std::isnan(bf16_to_float(sum[3])));
  EXPECT_TRUE(std::isnan(bf16_to_float(max[3])));
  EXPECT_FALSE(std::isnan(bf16_to_float(max[2])));
}

template <class T>
void check_reduce_scatter(Communicator& comm, uint64_t seed, size_t n,
                          const std::vector<std::vector<float>>& inputs) {
  const DType dtype = dtype_of<T>();
  std::vector<T> send = as_dtype<T>(inputs[size_t(comm.rank())]);
  std::vector<T> recv(n);
  comm.reduce_scatter(send.data(), recv.data(), n, dtype, ReduceOp::sum, kHost);
  SCOPED_TRACE(testing::Message() << "seed " << seed << " chunk " << n << " " << dtype_name(dtype));
  expect_reduced(as_float(recv), inputs, size_t(comm.rank()) * n, ReduceOp::sum, dtype);
}

TEST_F(MpiCommunicatorTest, ReduceScatterSumGivesEachRankItsChunkOfTheSum) {
  for (size_t n : {size_t(1), size_t(333)}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const uint64_t seed = shared_seed();
      const auto inputs = all_inputs(seed, n * size_t(p_), dtype);
      if (dtype == DType::f32) check_reduce_scatter<float>(*comm_, seed, n, inputs);
      if (dtype == DType::bf16) check_reduce_scatter<bf16>(*comm_, seed, n, inputs);
    }
  }
}

// all_gather, all_to_all and broadcast only move data: the result must be bit-exact.
TEST_F(MpiCommunicatorTest, AllGatherConcatenatesChunksInRankOrder) {
  for (size_t n : {size_t(1), size_t(1001)}) {
    const uint64_t seed = shared_seed();
    SCOPED_TRACE(testing::Message() << "seed " << seed << " n " << n);
    const auto inputs = all_inputs(seed, n, DType::f32);
    std::vector<float> expected;
    for (const auto& x : inputs) expected.insert(expected.end(), x.begin(), x.end());

    std::vector<float> out(n * size_t(p_));
    comm_->all_gather(inputs[size_t(r_)].data(), out.data(), n, DType::f32, kHost);
    EXPECT_TRUE(same_bits(out, expected));

    std::vector<float> in_place(n * size_t(p_), 0.f);  // own chunk already in its slot
    std::copy(inputs[size_t(r_)].begin(), inputs[size_t(r_)].end(), in_place.begin() + r_ * n);
    comm_->all_gather(in_place.data() + r_ * n, in_place.data(), n, DType::f32, kHost);
    EXPECT_TRUE(same_bits(in_place, expected));

    const auto mine16 = to_bf16(inputs[size_t(r_)]);
    std::vector<bf16> out16(n * size_t(p_));
    comm_->all_gather(mine16.data(), out16.data(), n, DType::bf16, kHost);
    EXPECT_TRUE(same_bits(out16, to_bf16(expected)));

    // Raw bytes (an encoded wire buffer): 4n bytes per rank, odd sizes allowed.
    std::vector<uint8_t> bytes(4 * n * size_t(p_));
    comm_->all_gather(inputs[size_t(r_)].data(), bytes.data(), 4 * n, DType::u8, kHost);
    EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), bytes.size()), 0);
  }
}

TEST_F(MpiCommunicatorTest, AllToAllSendsChunkRToRankR) {
  const size_t n = 257;  // per-destination chunk
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto inputs = all_inputs(seed, n * size_t(p_), DType::f32);
  // Chunk s of what rank r receives is chunk r of what rank s sent.
  std::vector<float> expected;
  for (int s = 0; s < p_; ++s) {
    const auto& x = inputs[size_t(s)];
    expected.insert(expected.end(), x.begin() + r_ * n, x.begin() + (r_ + 1) * n);
  }
  std::vector<float> out(n * size_t(p_));
  comm_->all_to_all(inputs[size_t(r_)].data(), out.data(), n, DType::f32, kHost);
  EXPECT_TRUE(same_bits(out, expected));

  std::vector<bf16> out16(n * size_t(p_));
  comm_->all_to_all(to_bf16(inputs[size_t(r_)]).data(), out16.data(), n, DType::bf16, kHost);
  EXPECT_TRUE(same_bits(out16, to_bf16(expected)));

  std::vector<uint8_t> bytes(4 * n * size_t(p_));
  comm_->all_to_all(inputs[size_t(r_)].data(), bytes.data(), 4 * n, DType::u8, kHost);
  EXPECT_EQ(std::memcmp(bytes.data(), expected.data(), bytes.size()), 0);
}

TEST_F(MpiCommunicatorTest, BroadcastCopiesTheRootsBufferFromEveryRoot) {
  const size_t n = 100003;
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (int root = 0; root < p_; ++root) {
    std::vector<float> x = input_of(seed, r_, n);
    comm_->broadcast(x.data(), n, DType::f32, root, kHost);
    EXPECT_TRUE(same_bits(x, input_of(seed, root, n))) << "root " << root;

    std::vector<uint8_t> b(13, uint8_t(r_));
    comm_->broadcast(b.data(), b.size(), DType::u8, root, kHost);
    EXPECT_EQ(b, std::vector<uint8_t>(13, uint8_t(root))) << "root " << root;
  }
}

// A message large enough to need a rendezvous (no eager buffering), so a wrong send/recv
// pairing would hang instead of passing by luck.
TEST_F(MpiCommunicatorTest, RingExchangeWithSendRecvAndSendRecvCombined) {
  const size_t n = 100003;
  const uint64_t seed = shared_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int next = (r_ + 1) % p_, prev = (r_ + p_ - 1) % p_;
  const auto mine = input_of(seed, r_, n);
  if (p_ > 1) {  // a blocking send to oneself waits forever, as MPI specifies
    std::vector<float> got(n);
    if (r_ % 2 == 0) {  // even ranks send first, odd ranks receive first: no cycle of waits
      comm_->send(mine.data(), n, DType::f32, next, 11, kHost);
      comm_->recv(got.data(), n, DType::f32, prev, 11, kHost);
    } else {
      comm_->recv(got.data(), n, DType::f32, prev, 11, kHost);
      comm_->send(mine.data(), n, DType::f32, next, 11, kHost);
    }
    EXPECT_TRUE(same_bits(got, input_of(seed, prev, n)));
  }

  // The other direction in one call, as a pipeline stage does.
  std::vector<bf16> got16(n);
  comm_->send_recv(to_bf16(mine).data(), n, prev, got16.data(), n, next, DType::bf16, 12, kHost);
  EXPECT_TRUE(same_bits(got16, to_bf16(input_of(seed, next, n))));

  // One-sided use: the first rank only sends, the last only receives.
  std::vector<float> half(n, 0.f);
  const bool first = r_ == 0, last = r_ == p_ - 1;
  comm_->send_recv(mine.data(), last ? 0 : n, r_ + 1, half.data(), first ? 0 : n, r_ - 1,
                   DType::f32, 13, kHost);
  EXPECT_TRUE(same_bits(half, first ? std::vector<float>(n, 0.f) : input_of(seed, r_ - 1, n)));
}

// Tags select the message: two small (eagerly buffered) messages received in reverse order.
TEST_F(MpiCommunicatorTest, ReceiveMatchesByTag) {
  if (p_ < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = comm_->split(r_ < 2 ? 0 : MPI_UNDEFINED, r_, "pair");
  if (!pair) return;
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  if (pair->rank() == 0) {
    pair->send(a, 4, DType::f32, 1, 100, kHost);
    pair->send(b, 4, DType::f32, 1, 200, kHost);
  } else {
    float x[4], y[4];
    pair->recv(y, 4, DType::f32, 0, 200, kHost);
    pair->recv(x, 4, DType::f32, 0, 100, kHost);
    EXPECT_TRUE(std::equal(x, x + 4, a));
    EXPECT_TRUE(std::equal(y, y + 4, b));
  }
}

TEST_F(MpiCommunicatorTest, StatsCountCallsBytesAndTime) {
  const size_t n = 1000;
  std::vector<float> x(n * size_t(p_), 1.f), y(n * size_t(p_));
  comm_->all_reduce(x.data(), y.data(), n, DType::f32, ReduceOp::sum, kHost);  // before reset
  comm_->reset_stats();
  EXPECT_EQ(comm_->stats().total().calls, 0);

  comm_->all_reduce(x.data(), y.data(), n, DType::f32, ReduceOp::sum, kHost);
  comm_->all_reduce(x.data(), y.data(), 2 * n, DType::bf16, ReduceOp::sum, kHost);
  comm_->all_gather(x.data(), y.data(), n, DType::f32, kHost);
  comm_->send_recv(x.data(), n, (r_ + 1) % p_, y.data(), n, (r_ + p_ - 1) % p_, DType::f32, 1,
                   kHost);
  comm_->barrier(kHost);

  const CommStats& s = comm_->stats();
  const int64_t b = int64_t(4 * n), p = p_;
  EXPECT_EQ(s[CommOp::all_reduce].calls, 2);
  EXPECT_EQ(s[CommOp::all_reduce].bytes, 2 * b);  // n fp32 + 2n bf16
  EXPECT_EQ(s[CommOp::all_reduce].bytes_sent, 2 * (2 * (p - 1) * b / p));
  EXPECT_EQ(s[CommOp::all_gather].calls, 1);
  EXPECT_EQ(s[CommOp::all_gather].bytes, p * b);  // the whole gathered buffer
  EXPECT_EQ(s[CommOp::all_gather].bytes_sent, (p - 1) * b);
  EXPECT_EQ(s[CommOp::send_recv].bytes_sent, p > 1 ? b : 0);
  EXPECT_EQ(s[CommOp::barrier].calls, 1);
  EXPECT_EQ(s[CommOp::reduce_scatter].calls, 0);
  EXPECT_EQ(s.total().calls, 5);
  EXPECT_EQ(s.total().bytes_sent, s[CommOp::all_reduce].bytes_sent +
                                      s[CommOp::all_gather].bytes_sent +
                                      s[CommOp::send_recv].bytes_sent);
  EXPECT_GT(s[CommOp::all_reduce].seconds, 0.0);
  EXPECT_LT(s.total().seconds, 60.0);

  comm_->reset_stats();
  EXPECT_EQ(comm_->stats().total().calls, 0);
  EXPECT_EQ(comm_->stats().total().bytes, 0);
  EXPECT_EQ(comm_->stats().total().seconds, 0.0);
}

int fake_mpi_call(int status) { return status; }

TEST_F(MpiCommunicatorTest, FailedMpiCallThrowsOneLineNamingRankCallBytesAndGroup) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(MPI_ERR_COUNT, text, &len);
  try {
    TACO_CHECK_MPI(fake_mpi_call(MPI_ERR_COUNT), "tp", "all_reduce", 4000);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    const std::string want = "rank " + std::to_string(world_rank_) +
                             ": MPI fake_mpi_call failed (" + std::to_string(MPI_ERR_COUNT) +
                             "): all_reduce of 4000 bytes in group tp: " + std::string(text, len);
    EXPECT_EQ(std::string(e.what()).substr(0, want.size()), want);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_EQ(e.exit_code(), 1);
  }
}

// A real failure returned by MPI (not an abort): a message longer than the receive buffer.
TEST_F(MpiCommunicatorTest, TruncatedReceiveThrowsInsteadOfAborting) {
  if (p_ < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pair = comm_->split(r_ < 2 ? 0 : MPI_UNDEFINED, r_, "pair");
  if (!pair) return;
  float x[10] = {};
  if (pair->rank() == 0) {
    pair->send(x, 10, DType::f32, 1, 5, kHost);
    pair->send(x, 3, DType::f32, 1, 6, kHost);
  } else {
    try {
      pair->recv(x, 5, DType::f32, 0, 5, kHost);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      const std::string what = e.what();
      for (const char* part : {"MPI_Recv", "recv from 0 of 20 bytes in group pair", "TRUNCATE"}) {
        EXPECT_NE(what.find(part), std::string::npos) << what;
      }
      EXPECT_EQ(e.exit_code(), 1);
    }
    // Shorter than expected is also a shape disagreement.
    try {
      pair->recv(x, 5, DType::f32, 0, 6, kHost);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected 5 elements from peer 0 (tag 6), got 3"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(MpiCommunicatorTest, MisuseThrowsNamingGroupAndValue) {
  uint8_t b[4] = {};
  auto expect_error = [](auto&& call, const std::string& part) {
    try {
      call();
      ADD_FAILURE() << "no throw; expected: " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), 1);
    }
  };
  expect_error([&] { comm_->all_reduce(b, b, 4, DType::u8, ReduceOp::sum, kHost); },
               "group world: dtype bytes is not supported (fp32, bf16)");
  expect_error([&] { comm_->all_gather(b, b + 1, 1, DType::i32, kHost); },
               "dtype int32 is not supported");
  expect_error(
      [&] { comm_->send(b, 4, DType::u8, p_, 0, kHost); },
      "peer " + std::to_string(p_) + " is not a rank of this group of " + std::to_string(p_));
  expect_error([&] { comm_->broadcast(b, 4, DType::u8, -1, kHost); }, "root -1 is not a rank");
  expect_error([&] { comm_->send(b, 4, DType::u8, 0, 40000, kHost); },
               "tag 40000 is outside [0, 32767]");
}

}  // namespace
}  // namespace taco
