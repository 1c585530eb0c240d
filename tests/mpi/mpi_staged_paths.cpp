// HostStagedCommunicator's pipelined device paths (parallel/staged_communicator.h) under mpirun
// with 2 and 3 ranks on device buffers (ranks may share one GPU), against host references built
// from every rank's fresh random input:
//   - all_gather (in place and not) and all_to_all: exactly the gathered / exchanged bytes;
//   - sums, two_shot: bit for bit the fp32 sum in rank order (0 + x_0 + x_1 + ...) rounded once
//     to bf16, as the path specifies; native: bit for bit the pairwise bf16 sum at p = 2, and
//     within p - 1 bf16 roundings (|err| <= (p - 1) 2^-8 sum_q |x_q|, plus fp32 rounding) of the
//     fp64 sum at p = 3, where MPI's combine order is its own;
//   - every rank ends with the same bits;
//   - auto measures on the first call of a size class and then keeps one path.
// Sizes include ones that divide neither into chunks nor into pieces (pieces of 4 KB here, so a
// few hundred KB already run a deep pipeline). Skips without a CUDA device.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/runtime/device.h"
#include "parallel/mpi_communicator.h"
#include "parallel/staged_communicator.h"
#include "tests/mpi/mpi_test_fixture.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace taco {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kPiece = 4096;  // staging piece bytes: many pieces at test sizes

#if TACO_HAVE_CUDA

// A device buffer of `bytes` with upload / download.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(p_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* get() { return static_cast<uint8_t*>(p_); }
  void set(const Bytes& b, size_t offset = 0) {
    EXPECT_EQ(cudaMemcpy(get() + offset, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  Bytes read(size_t offset, size_t n) {
    Bytes b(n);
    EXPECT_EQ(cudaMemcpy(b.data(), get() + offset, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return b;
  }
  Bytes read() { return read(0, bytes_); }

 private:
  size_t bytes_;
  void* p_ = nullptr;
};

#endif

// Rank r's data: n Gaussian values in `dtype`'s bytes.
[[maybe_unused]] Bytes input_of(uint64_t seed, int r, size_t n, DType dtype) {
  const std::vector<float> x = test::random_normal(n, seed + 7919 * uint64_t(r + 1));
  Bytes b(n * dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::f32) {
      std::memcpy(b.data() + 4 * i, &x[i], 4);
    } else {
      const bf16 h = float_to_bf16(x[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

float value(const Bytes& b, size_t i, DType dtype) {
  if (dtype == DType::f32) {
    float v;
    std::memcpy(&v, b.data() + 4 * i, 4);
    return v;
  }
  bf16 h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return bf16_to_float(h);
}

void put(Bytes& b, size_t i, float v, DType dtype) {
  if (dtype == DType::f32) {
    std::memcpy(b.data() + 4 * i, &v, 4);
  } else {
    const bf16 h = float_to_bf16(v);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
}

// The two-shot path's result: fp32 sum in rank order from 0, one rounding to `dtype`.
Bytes two_shot_sum(const std::vector<Bytes>& in, size_t first, size_t n, DType dtype) {
  Bytes out(n * dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    float acc = 0.f;
    for (const Bytes& x : in) acc += value(x, first + i, dtype);
    put(out, i, acc, dtype);
  }
  return out;
}

// Within p - 1 roundings of `dtype` of the exact sum (and the pairwise result exactly at p = 2,
// where the one combine is bf16(x_0 + x_1) in any order). Returns the elements outside.
[[maybe_unused]] size_t native_sum_misses(const Bytes& got, const std::vector<Bytes>& in,
                                          size_t first, size_t n, DType dtype) {
  const int p = int(in.size());
  const double u = dtype == DType::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  size_t misses = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, mag = 0;
    for (const Bytes& x : in) {
      exact += value(x, first + i, dtype);
      mag += std::fabs(value(x, first + i, dtype));
    }
    const double g = value(got, i, dtype);
    const bool ok = p == 2 ? g == double(value(two_shot_sum(in, first + i, 1, dtype), 0, dtype))
                           : std::fabs(g - exact) <= (p - 1) * u * mag + p * 1e-7 * mag;
    misses += ok ? 0 : 1;
  }
  return misses;
}

// Every rank holds the same bytes as rank 0.
[[maybe_unused]] bool same_on_every_rank(const Bytes& b) {
  Bytes first = b;
  MPI_Bcast(first.data(), int(first.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = first == b ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

class StagedPaths : public test::MpiTest {
 protected:
  void SetUp() override {
    test::MpiTest::SetUp();
    if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
#if TACO_HAVE_CUDA
    cudaSetDevice(world_rank_ % cuda_device_count());
#endif
  }
  // Element counts: tiny (fewer than p blocks), odd, a few pieces, many pieces.
  const std::vector<size_t> sizes_ = {1, 7, 1000, 4099, 100003};
};

#if TACO_HAVE_CUDA

TEST_F(StagedPaths, AllGatherAndAllToAllMoveExactlyTheBytes) {
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  HostStagedCommunicator staged(mpi, StagedReduce::automatic, kPiece);
  const int p = mpi.size(), r = mpi.rank();
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const size_t n : sizes_) {
    for (const DType dtype : {DType::bf16, DType::u8}) {
      SCOPED_TRACE("count " + std::to_string(n) + " " + dtype_name(dtype));
      const size_t chunk = n * dtype_size(dtype);
      std::vector<Bytes> in;  // every rank's p chunks, random
      for (int q = 0; q < p; ++q) in.push_back(input_of(seed + n, q, n * size_t(p), DType::bf16));
      for (Bytes& b : in) b.resize(chunk * size_t(p));
      Bytes gathered, exchanged;
      for (int q = 0; q < p; ++q) {
        gathered.insert(gathered.end(), in[size_t(q)].begin(), in[size_t(q)].begin() + long(chunk));
        const auto from = in[size_t(q)].begin() + long(size_t(r) * chunk);
        exchanged.insert(exchanged.end(), from, from + long(chunk));
      }
      DeviceBytes send(chunk * size_t(p)), recv(chunk * size_t(p));
      // all_gather out of place (rank r sends its chunk 0), then in place.
      send.set(in[size_t(r)]);
      staged.all_gather(send.get(), recv.get(), n, dtype, nullptr);
      EXPECT_EQ(recv.read(), gathered);
      recv.set(Bytes(chunk * size_t(p), 0xee));
      recv.set(Bytes(in[size_t(r)].begin(), in[size_t(r)].begin() + long(chunk)),
               size_t(r) * chunk);
      staged.all_gather(recv.get() + size_t(r) * chunk, recv.get(), n, dtype, nullptr);
      EXPECT_EQ(recv.read(), gathered);
      // all_to_all
      recv.set(Bytes(chunk * size_t(p), 0xee));
      staged.all_to_all(send.get(), recv.get(), n, dtype, nullptr);
      EXPECT_EQ(recv.read(), exchanged);
    }
  }
  EXPECT_EQ(staged.stats()[CommOp::all_to_all].calls, int64_t(2 * sizes_.size()));
  const CommOpStats s = staged.stats().total();
  EXPECT_GE(s.staging_seconds, 0.0);
  EXPECT_LE(s.staging_seconds, s.seconds);
}

// Both forced paths, all_reduce in place and not, reduce_scatter, bf16 and fp32.
TEST_F(StagedPaths, SumsMatchTheirHostReferencesOnEveryRank) {
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  const int p = mpi.size(), r = mpi.rank();
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const StagedReduce mode : {StagedReduce::native, StagedReduce::two_shot}) {
    HostStagedCommunicator staged(mpi, mode, kPiece);
    for (const size_t n : sizes_) {
      for (const DType dtype : {DType::bf16, DType::f32}) {
        SCOPED_TRACE(std::string(staged_reduce_name(mode)) + " count " + std::to_string(n) + " " +
                     dtype_name(dtype));
        const size_t es = dtype_size(dtype), bytes = n * es;
        std::vector<Bytes> in;
        for (int q = 0; q < p; ++q) in.push_back(input_of(seed + n, q, n, dtype));
        auto check = [&](const Bytes& got, size_t first, size_t count, const char* what) {
          SCOPED_TRACE(what);
          if (mode == StagedReduce::two_shot)
            EXPECT_EQ(got, two_shot_sum(in, first, count, dtype));
          else
            EXPECT_EQ(native_sum_misses(got, in, first, count, dtype), 0u);
          EXPECT_TRUE(same_on_every_rank(got));
        };
        DeviceBytes x(bytes), y(bytes);
        x.set(in[size_t(r)]);
        staged.all_reduce(x.get(), y.get(), n, dtype, ReduceOp::sum, nullptr);
        check(y.read(), 0, n, "all_reduce out of place");
        EXPECT_EQ(x.read(), in[size_t(r)]) << "the input is left alone";
        staged.all_reduce(x.get(), x.get(), n, dtype, ReduceOp::sum, nullptr);
        check(x.read(), 0, n, "all_reduce in place");
        // reduce_scatter of n * p elements: rank r gets chunk r of the sum.
        std::vector<Bytes> wide;
        for (int q = 0; q < p; ++q) wide.push_back(input_of(seed + 3 * n, q, n * size_t(p), dtype));
        std::swap(in, wide);
        DeviceBytes full(bytes * size_t(p)), part(bytes);
        full.set(in[size_t(r)]);
        staged.reduce_scatter(full.get(), part.get(), n, dtype, ReduceOp::sum, nullptr);
        const Bytes got = part.read();
        if (mode == StagedReduce::two_shot)
          EXPECT_EQ(got, two_shot_sum(in, size_t(r) * n, n, dtype)) << "reduce_scatter";
        else
          EXPECT_EQ(native_sum_misses(got, in, size_t(r) * n, n, dtype), 0u) << "reduce_scatter";
      }
    }
    EXPECT_STREQ(staged.reduce_path(CommOp::all_reduce, DType::bf16, 1000),
                 staged_reduce_name(mode));
  }
}

// auto: the first call of a size class measures (on scratch, leaving the data alone), all ranks
// choose alike, and the result is that path's.
TEST_F(StagedPaths, AutoChoosesOnePathPerSizeClassOnEveryRank) {
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  HostStagedCommunicator staged(mpi, StagedReduce::automatic, kPiece);
  const int p = mpi.size(), r = mpi.rank();
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t n = 60001;
  const DType dtype = DType::bf16;
  const size_t bytes = n * dtype_size(dtype);
  EXPECT_STREQ(staged.reduce_path(CommOp::all_reduce, dtype, bytes), "unmeasured");
  std::vector<Bytes> in;
  for (int q = 0; q < p; ++q) in.push_back(input_of(seed, q, n, dtype));
  DeviceBytes x(bytes);
  x.set(in[size_t(r)]);
  staged.all_reduce(x.get(), x.get(), n, dtype, ReduceOp::sum, nullptr);
  const std::string path = staged.reduce_path(CommOp::all_reduce, dtype, bytes);
  ASSERT_TRUE(path == "native" || path == "two_shot") << path;
  const Bytes got = x.read();
  if (path == "two_shot")
    EXPECT_EQ(got, two_shot_sum(in, 0, n, dtype));
  else
    EXPECT_EQ(native_sum_misses(got, in, 0, n, dtype), 0u);
  EXPECT_TRUE(same_on_every_rank(got));
  int chose_two = path == "two_shot", all_two = 0, any_two = 0;
  MPI_Allreduce(&chose_two, &all_two, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&chose_two, &any_two, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(all_two, any_two) << "every rank chose the same path";
  // The same class again: no new measurement (the path stays), one call accounted each.
  staged.all_reduce(x.get(), x.get(), n - 5, dtype, ReduceOp::sum, nullptr);
  EXPECT_EQ(path, staged.reduce_path(CommOp::all_reduce, dtype, bytes - 10));
  EXPECT_EQ(staged.stats()[CommOp::all_reduce].calls, 2);
  // max stays native whatever the mode, with MPI's exact result.
  x.set(in[size_t(r)]);
  staged.all_reduce(x.get(), x.get(), n, dtype, ReduceOp::max, nullptr);
  const Bytes mx = x.read();
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float m = value(in[0], i, dtype);
    for (int q = 1; q < p; ++q) m = std::max(m, value(in[size_t(q)], i, dtype));
    wrong += value(mx, i, dtype) != m;
  }
  EXPECT_EQ(wrong, 0u);
}

#else  // !TACO_HAVE_CUDA

TEST_F(StagedPaths, NeedADevice) {}  // SetUp skips it: a build without CUDA has no device paths

#endif  // TACO_HAVE_CUDA

}  // namespace
}  // namespace taco
