// DeviceCompressedCollectives (parallel/device_compressed_collectives.h) under mpirun -np 2, on
// device buffers through HostStagedCommunicator over MPI (both ranks may share one GPU): for
// taco (e4m3 G128 dual, G64 single, G32 dual along tokens), fp8_block and fp8_tensor, on bf16
// and fp32 data, every operation gives the bytes, wire bytes, NaN-group count and error of the
// host CompressedCollectives on the same inputs, bit for bit, with one pipeline piece; with
// three, those of the host algorithm applied to each piece; and the result lies within 5e-2
// (relative L2; two FP8 roundings of ~2.6e-2 each, docs/design.md §4) of the exact one, so a
// wrong algorithm cannot pass by matching a wrong reference. The measured error comes from the
// one-pass self-check kernel for the grouped codecs and from decode + sums for fp8_tensor. Also
// CompressedSiteComm routes device tensors there with the host path's accounting. Skips without
// a CUDA device.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/policy.h"
#include "compression/spec.h"
#include "engine/runtime/arena.h"
#include "engine/runtime/device.h"
#include "parallel/compressed_collectives.h"
#include "parallel/compressed_site_comm.h"
#include "parallel/device_compressed_collectives.h"
#include "parallel/mpi_communicator.h"
#include "parallel/staged_communicator.h"
#include "tests/mpi/mpi_test_fixture.h"

namespace taco {
namespace {

using Bytes = std::vector<uint8_t>;
using Pieces = DeviceCompressedCollectives;

CodecOptions opts(CodecKind kind, int group = 0, Fp8Scales scales = Fp8Scales::single) {
  return canonical(CodecOptions{kind, Fp8Format::e4m3, group, scales, GroupAxis::hidden});
}

std::vector<CodecOptions> option_sets() {
  // The last: groups along tokens (32 rows of a column), tails in every chunk of 37 rows.
  return {opts(CodecKind::taco, 128, Fp8Scales::dual), opts(CodecKind::taco, 64),
          opts(CodecKind::fp8_block, 128), opts(CodecKind::fp8_tensor),
          canonical(CodecOptions{CodecKind::taco, Fp8Format::e4m3, 32, Fp8Scales::dual,
                                 GroupAxis::token})};
}

// Rank r's data: Gaussian, in `dtype`'s bytes.
Bytes input_of(uint64_t seed, int r, size_t n, DType dtype) {
  const std::vector<float> x = test::random_normal(n, seed + 1000003 * uint64_t(r + 1));
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

std::vector<double> values(const Bytes& b, DType dtype) {
  std::vector<double> v(b.size() / dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, b.data() + 4 * i, 4);
      v[i] = f;
    } else {
      bf16 h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      v[i] = bf16_to_float(h);
    }
  }
  return v;
}

std::string shape_name(MessageShape s) {
  std::string t = "[";
  t += std::to_string(s.rows);
  t += ", ";
  t += std::to_string(s.cols);
  t += "]";
  return t;
}

double relative_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0, s = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    s += want[i] * want[i];
  }
  return std::sqrt(e / s);
}

// Elements [at, at + n) of b.
Bytes part(const Bytes& b, int64_t at, int64_t n, DType dtype) {
  const size_t es = dtype_size(dtype);
  return Bytes(b.begin() + at * int64_t(es), b.begin() + (at + n) * int64_t(es));
}
void put(Bytes& b, int64_t at, const Bytes& src, DType dtype) {
  std::memcpy(b.data() + size_t(at) * dtype_size(dtype), src.data(), src.size());
}

void expect_same_bytes(const Bytes& got, const Bytes& want, DType dtype) {
  ASSERT_EQ(got.size(), want.size());
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(got.data() + i, want.data() + i, es) != 0) {
      ADD_FAILURE() << "element " << i / es << " of " << got.size() / es << " differs";
      return;
    }
  }
}

// `exact`: every group of the message holds one element (groups along tokens of a one-row
// message), which FP8 with a per-group scale carries exactly, so the error may be zero.
void expect_same_call(const CompressedCall& got, const CompressedCall& want, bool exact = false) {
  EXPECT_EQ(got.wire_bytes, want.wire_bytes);
  EXPECT_EQ(got.nonfinite_groups, want.nonfinite_groups);
  EXPECT_EQ(got.measured, want.measured);
  // The device sums the same squares in double in another order (kernels/roundtrip_error.h):
  // equal up to double rounding over a few thousand terms, far inside 1e-12 relative, while a
  // wrong element, offset or decode dtype moves them by > 1e-4.
  EXPECT_NEAR(got.error_sq, want.error_sq, 1e-12 * want.error_sq);
  EXPECT_NEAR(got.signal_sq, want.signal_sq, 1e-12 * want.signal_sq);
  if (want.measured) {
    if (!exact) {
      EXPECT_GT(want.error_sq, 0.0);  // a lossy codec on random data: the check measured
    }
    EXPECT_EQ(got.nonfinite_values, want.nonfinite_values);
  }
}

// A device call in pieces against the host algorithm applied to each piece: the same bytes,
// wire bytes and NaN groups, and the same error summed in another order (hence 1e-9).
void expect_same_as_pieces(const Bytes& got, const CompressedCall& call, const Bytes& want,
                           const CompressedCall& host, DType dtype) {
  expect_same_bytes(got, want, dtype);
  EXPECT_EQ(call.wire_bytes, host.wire_bytes);
  EXPECT_EQ(call.nonfinite_groups, host.nonfinite_groups);
  EXPECT_NEAR(call.error_sq, host.error_sq, 1e-9 * host.error_sq);
  EXPECT_NEAR(call.signal_sq, host.signal_sq, 1e-9 * host.signal_sq);
}

// Adds a per-piece host call into a total.
void add(CompressedCall& total, const CompressedCall& c) {
  total.measured = total.measured || c.measured;
  total.nonfinite_values += c.nonfinite_values;
  total.wire_bytes += c.wire_bytes;
  total.nonfinite_groups += c.nonfinite_groups;
  total.error_sq += c.error_sq;
  total.signal_sq += c.signal_sq;
}

// A device buffer holding `b`, read back on request.
class DeviceBytes {
 public:
  explicit DeviceBytes(const Bytes& b) : DeviceBytes(b.size()) {
    device_copy(p_, b.data(), b.size(), DeviceKind::cuda, DeviceKind::cpu);
  }
  explicit DeviceBytes(size_t n)
      : n_(n), p_(device_alloc(DeviceKind::cuda, std::max<size_t>(n, 16))) {}
  ~DeviceBytes() { device_free(DeviceKind::cuda, p_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return p_; }
  Bytes read() const {
    Bytes b(n_);
    device_copy(b.data(), p_, n_, DeviceKind::cpu, DeviceKind::cuda);
    return b;
  }

 private:
  size_t n_;
  void* p_;
};

class DeviceCollectivesTest : public test::MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
    select_device(true, world_rank_);
    mpi_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
    staged_ = std::make_unique<HostStagedCommunicator>(*mpi_);
    seed_ = shared_seed();
  }

  // Runs `check(codec, dtype)` for every codec and both dtypes.
  template <class Fn>
  void each_case(Fn check) {
    for (const CodecOptions& o : option_sets()) {
      const auto codec = make_codec(o);
      for (DType dtype : {DType::bf16, DType::f32}) {
        SCOPED_TRACE(codec->name() + " " + dtype_name(dtype) + ", seed " + std::to_string(seed_));
        check(*codec, dtype);
      }
    }
  }

  // The exact sum over ranks of every rank's input.
  std::vector<double> exact_sum(size_t n, DType dtype) const {
    std::vector<double> sum(n, 0.0);
    for (int r = 0; r < world_size_; ++r) {
      const std::vector<double> v = values(input_of(seed_, r, n, dtype), dtype);
      for (size_t i = 0; i < n; ++i) sum[i] += v[i];
    }
    return sum;
  }

  std::unique_ptr<MpiCommunicator> mpi_;
  std::unique_ptr<HostStagedCommunicator> staged_;
  uint64_t seed_ = 0;
  const WireContext where_{Site::attn_out_fwd, -1, -1};
};

TEST_F(DeviceCollectivesTest, AllReduceMatchesTheHostAlgorithmBitForBit) {
  CompressedCollectives host(*mpi_);
  DeviceCompressedCollectives device(*staged_, 1);
  // Rows not a multiple of p (uneven chunks), rows that are, and a flat message.
  for (const MessageShape shape :
       {MessageShape{37, 256}, MessageShape{48, 256}, MessageShape{1, 5000}}) {
    SCOPED_TRACE(shape_name(shape));
    const int64_t unit = shape.rows == 1 ? 1 : shape.cols;
    each_case([&](const Codec& codec, DType dtype) {
      const size_t n = size_t(shape.count());
      const Bytes x = input_of(seed_, world_rank_, n, dtype);
      Bytes want = x;
      const CompressedCall host_call =
          host.all_reduce(codec, want.data(), dtype, shape, where_, /*measure=*/true);

      device.set_pieces(1);
      DeviceBytes d(x);
      const CompressedCall call =
          device.all_reduce(codec, d.get(), dtype, shape, where_, /*measure=*/true);
      expect_same_bytes(d.read(), want, dtype);
      expect_same_call(call, host_call);
      EXPECT_LT(relative_l2(values(d.read(), dtype), exact_sum(n, dtype)), 5e-2);

      // Three pieces: the host algorithm on each row block.
      Bytes want3 = x;
      CompressedCall host3;
      for (const auto& piece : Pieces::split_pieces(shape, 1, 3)) {
        Bytes block = part(x, piece.begin * unit, piece.shape.count(), dtype);
        add(host3, host.all_reduce(codec, block.data(), dtype, piece.shape, where_, true));
        put(want3, piece.begin * unit, block, dtype);
      }
      device.set_pieces(3);
      DeviceBytes d3(x);
      const CompressedCall call3 = device.all_reduce(codec, d3.get(), dtype, shape, where_, true);
      expect_same_as_pieces(d3.read(), call3, want3, host3, dtype);
      EXPECT_GT(call3.wire_bytes, call.wire_bytes);  // more headers and padded slots
    });
  }
}

TEST_F(DeviceCollectivesTest, ReduceScatterMatchesTheHostAlgorithmBitForBit) {
  CompressedCollectives host(*mpi_);
  DeviceCompressedCollectives device(*staged_, 1);
  const int p = mpi_->size(), me = world_rank_;
  for (const MessageShape full : {MessageShape{48, 256}, MessageShape{1, 4096}}) {
    SCOPED_TRACE(shape_name(full));
    const int64_t unit = full.rows == 1 ? 1 : full.cols, shard = full.count() / p;
    each_case([&](const Codec& codec, DType dtype) {
      const Bytes x = input_of(seed_, me, size_t(full.count()), dtype);
      Bytes want(size_t(shard) * dtype_size(dtype));
      const CompressedCall host_call =
          host.reduce_scatter(codec, x.data(), want.data(), dtype, full, where_, true);

      device.set_pieces(1);
      DeviceBytes in(x), out(want.size());
      const CompressedCall call =
          device.reduce_scatter(codec, in.get(), out.get(), dtype, full, where_, true);
      expect_same_bytes(out.read(), want, dtype);
      expect_same_call(call, host_call);
      const std::vector<double> sum = exact_sum(size_t(full.count()), dtype);
      EXPECT_LT(relative_l2(
                    values(out.read(), dtype),
                    std::vector<double>(sum.begin() + me * shard, sum.begin() + (me + 1) * shard)),
                5e-2);

      // Three pieces: piece j is rows [begin, begin + count) of every rank's shard.
      Bytes want3(want.size());
      CompressedCall host3;
      for (const auto& piece : Pieces::split_pieces(full, p, 3)) {
        Bytes block;
        for (int c = 0; c < p; ++c) {
          const Bytes b = part(x, c * shard + piece.begin * unit, piece.count * unit, dtype);
          block.insert(block.end(), b.begin(), b.end());
        }
        Bytes mine(size_t(piece.count * unit) * dtype_size(dtype));
        add(host3, host.reduce_scatter(codec, block.data(), mine.data(), dtype, piece.shape, where_,
                                       true));
        put(want3, piece.begin * unit, mine, dtype);
      }
      device.set_pieces(3);
      DeviceBytes out3(want.size());
      const CompressedCall call3 =
          device.reduce_scatter(codec, in.get(), out3.get(), dtype, full, where_, true);
      expect_same_as_pieces(out3.read(), call3, want3, host3, dtype);
    });
  }
}

TEST_F(DeviceCollectivesTest, AllGatherMatchesTheHostAlgorithmBitForBit) {
  CompressedCollectives host(*mpi_);
  DeviceCompressedCollectives device(*staged_, 1);
  const int p = mpi_->size(), me = world_rank_;
  for (const MessageShape full : {MessageShape{48, 256}, MessageShape{1, 4096}}) {
    SCOPED_TRACE(shape_name(full));
    const int64_t unit = full.rows == 1 ? 1 : full.cols, shard = full.count() / p;
    each_case([&](const Codec& codec, DType dtype) {
      const Bytes x = input_of(seed_, me, size_t(shard), dtype);
      Bytes want(size_t(full.count()) * dtype_size(dtype));
      const CompressedCall host_call =
          host.all_gather(codec, x.data(), want.data(), dtype, full, where_, true);

      device.set_pieces(1);
      DeviceBytes in(x), out(want.size());
      const CompressedCall call =
          device.all_gather(codec, in.get(), out.get(), dtype, full, where_, true);
      expect_same_bytes(out.read(), want, dtype);
      expect_same_call(call, host_call, full.rows == 1 && codec.options().axis == GroupAxis::token);
      std::vector<double> exact;
      for (int r = 0; r < p; ++r) {
        const std::vector<double> v = values(input_of(seed_, r, size_t(shard), dtype), dtype);
        exact.insert(exact.end(), v.begin(), v.end());
      }
      EXPECT_LT(relative_l2(values(out.read(), dtype), exact), 5e-2);

      // Three pieces: block c of piece j lands in rows [begin, begin + count) of shard c.
      Bytes want3(want.size());
      CompressedCall host3;
      for (const auto& piece : Pieces::split_pieces(full, p, 3)) {
        const Bytes block = part(x, piece.begin * unit, piece.count * unit, dtype);
        Bytes gathered(size_t(piece.shape.count()) * dtype_size(dtype));
        add(host3, host.all_gather(codec, block.data(), gathered.data(), dtype, piece.shape, where_,
                                   true));
        for (int c = 0; c < p; ++c) {
          put(want3, c * shard + piece.begin * unit,
              part(gathered, c * piece.count * unit, piece.count * unit, dtype), dtype);
        }
      }
      device.set_pieces(3);
      DeviceBytes out3(want.size());
      const CompressedCall call3 =
          device.all_gather(codec, in.get(), out3.get(), dtype, full, where_, true);
      expect_same_as_pieces(out3.read(), call3, want3, host3, dtype);
    });
  }
}

TEST_F(DeviceCollectivesTest, PointToPointMatchesTheHostAlgorithmBitForBit) {
  CompressedCollectives host(*mpi_);
  DeviceCompressedCollectives device(*staged_, 1);
  const int me = world_rank_, peer = 1 - world_rank_;
  const MessageShape shape{1, 6000};
  const size_t n = size_t(shape.count());
  each_case([&](const Codec& codec, DType dtype) {
    const Bytes x = input_of(seed_, me, n, dtype);
    const std::vector<double> from_peer = values(input_of(seed_, peer, n, dtype), dtype);
    for (int pieces : {1, 3}) {
      SCOPED_TRACE(std::to_string(pieces) + " piece(s)");
      device.set_pieces(pieces);
      // send / recv, rank 0 to rank 1: the host sends each piece as its own message.
      Bytes want(x.size());
      CompressedCall host_call;
      for (const auto& piece : Pieces::split_pieces(shape, 1, pieces)) {
        if (me == 0) {
          add(host_call, host.send(codec, x.data() + piece.begin * dtype_size(dtype), dtype,
                                   piece.shape, 1, 5, where_, false));
        } else {
          Bytes got(size_t(piece.shape.count()) * dtype_size(dtype));
          add(host_call, host.recv(codec, got.data(), dtype, piece.shape, 0, 5, where_));
          put(want, piece.begin, got, dtype);
        }
      }
      DeviceBytes in(x), out(x.size());
      const CompressedCall call =
          me == 0 ? device.send(codec, in.get(), dtype, shape, 1, 5, where_, false)
                  : device.recv(codec, out.get(), dtype, shape, 0, 5, where_);
      expect_same_call(call, host_call);
      if (me == 1) {
        expect_same_bytes(out.read(), want, dtype);
        EXPECT_LT(relative_l2(values(out.read(), dtype), from_peer), 5e-2);
      }

      // send_recv with the peer, both ways at once.
      Bytes want2(x.size());
      CompressedCall host2;
      for (const auto& piece : Pieces::split_pieces(shape, 1, pieces)) {
        Bytes mine = part(x, piece.begin, piece.shape.count(), dtype);
        Bytes got(mine.size());
        add(host2,
            host.send_recv({&codec, mine.data(), piece.shape, where_}, peer,
                           {&codec, got.data(), piece.shape, where_}, peer, dtype, 6, pieces == 1));
        put(want2, piece.begin, got, dtype);
      }
      DeviceBytes out2(x.size());
      const CompressedCall call2 =
          device.send_recv({&codec, in.get(), shape, where_}, peer,
                           {&codec, out2.get(), shape, where_}, peer, dtype, 6, pieces == 1);
      expect_same_bytes(out2.read(), want2, dtype);
      expect_same_call(call2, host2);
      EXPECT_LT(relative_l2(values(out2.read(), dtype), from_peer), 5e-2);
    }
  });
}

// The trainer's door: a device tensor over a device communicator takes the device path, with
// the host path's result and per-site accounting.
TEST_F(DeviceCollectivesTest, SiteCommSendsDeviceTensorsThroughTheDevicePath) {
  CompressionSection section;
  section.default_spec = CodecSpec{CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual};
  section.chunks = 2;
  const CompressionPolicy policy(section, 1, 512, "test");
  const MessageShape shape{64, 256};
  const size_t n = size_t(shape.count());
  const Bytes x = input_of(seed_, world_rank_, n, DType::bf16);

  // The host door on host memory, pieces applied by hand.
  CompressedCollectives host(*mpi_);
  const auto codec =
      make_codec(canonical(policy.resolve(0, Site::attn_out_fwd, int64_t(x.size()))));
  Bytes want = x;
  size_t wire = 0;
  for (const auto& piece : Pieces::split_pieces(shape, 1, 2)) {
    Bytes block = part(want, piece.begin * shape.cols, piece.shape.count(), DType::bf16);
    wire +=
        host.all_reduce(*codec, block.data(), DType::bf16, piece.shape, where_, false).wire_bytes;
    put(want, piece.begin * shape.cols, block, DType::bf16);
  }

  CompressedSiteComm door(*staged_, policy);
  DeviceBytes d(x);
  door.all_reduce(Tensor{d.get(), DType::bf16, DeviceKind::cuda, n}, int(shape.rows),
                  Site::attn_out_fwd, 0);
  expect_same_bytes(d.read(), want, DType::bf16);
  const SiteCommStats& s = door.stats()[Site::attn_out_fwd];
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.compressed_calls, 1);
  EXPECT_EQ(s.logical_bytes, int64_t(x.size()));
  EXPECT_EQ(s.wire_bytes, int64_t(wire));
  EXPECT_EQ(s.saved_bytes,
            bytes_sent_estimate(CommOp::all_reduce, x.size(), mpi_->size()) - int64_t(wire));
}

}  // namespace
}  // namespace taco
