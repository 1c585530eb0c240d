// The pipeline layout of the device compressed collectives (parallel/
// device_compressed_collectives.h), on the CPU: pieces cover a message once, in whole rows (flat
// messages: whole groups of elements), as evenly as CompressedCollectives spreads rows; sharded
// pieces take the same rows of every rank's shard, so chunk r of a piece is rank r's block;
// `compression.chunks: auto` gives pieces of at least 4 MiB, at most 8 of them, and one piece
// under 8 MiB. A build without CUDA refuses device calls with a UserError.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "engine/runtime/device.h"
#include "kernels/check.h"
#include "parallel/compressed_collectives.h"
#include "parallel/device_compressed_collectives.h"

namespace taco {
namespace {

using Pieces = DeviceCompressedCollectives;
constexpr size_t kMiB = size_t(1) << 20;

TEST(CompressedPieces, BoundsCoverEveryUnitOnceInAlignedEvenPieces) {
  for (int64_t units : {0, 1, 2, 7, 37, 48, 511, 512, 513, 5000, 65536}) {
    for (int pieces : {1, 2, 3, 4, 8, 50}) {
      for (int64_t align : {1, 8, 512}) {
        SCOPED_TRACE(std::to_string(units) + " units, " + std::to_string(pieces) + " pieces, " +
                     "align " + std::to_string(align));
        const std::vector<int64_t> b = Pieces::piece_bounds(units, pieces, align);
        const int64_t blocks = (units + align - 1) / align;
        const int64_t k = std::max<int64_t>(1, std::min<int64_t>(pieces, blocks));
        ASSERT_EQ(int64_t(b.size()), k + 1);
        EXPECT_EQ(b.front(), 0);
        EXPECT_EQ(b.back(), units);
        int64_t smallest = INT64_MAX, largest = 0;
        for (size_t j = 0; j + 1 < b.size(); ++j) {
          if (units > 0) {
            EXPECT_LT(b[j], b[j + 1]) << "piece " << j << " is empty";
          }
          if (j + 1 < b.size() - 1) {
            EXPECT_EQ(b[j + 1] % align, 0) << "bound " << j + 1 << " splits a group";
            smallest = std::min(smallest, (b[j + 1] - b[j]) / align);
            largest = std::max(largest, (b[j + 1] - b[j]) / align);
          }
        }
        if (b.size() > 2) {
          EXPECT_LE(largest - smallest, 1);
        }
      }
    }
  }
}

TEST(CompressedPieces, BoundsOfTheTestShapes) {
  EXPECT_EQ(Pieces::piece_bounds(37, 3, 1), (std::vector<int64_t>{0, 13, 25, 37}));
  EXPECT_EQ(Pieces::piece_bounds(5000, 3, 512), (std::vector<int64_t>{0, 2048, 3584, 5000}));
  EXPECT_EQ(Pieces::piece_bounds(2, 8, 1), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Pieces::piece_bounds(0, 4, 1), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(Pieces::piece_bounds(100, 1, 1), (std::vector<int64_t>{0, 100}));
}

TEST(CompressedPieces, AllReducePiecesAreRowBlocksOfTheMessage) {
  const auto rows = Pieces::split_pieces(MessageShape{37, 256}, 1, 3);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].begin, 0);
  EXPECT_EQ(rows[1].begin, 13);
  EXPECT_EQ(rows[2].begin, 25);
  EXPECT_EQ(rows[0].shape, (MessageShape{13, 256}));
  EXPECT_EQ(rows[2].shape, (MessageShape{12, 256}));
  // A flat message splits its elements in whole groups of the largest group size.
  const auto flat = Pieces::split_pieces(MessageShape{1, 5000}, 1, 3);
  ASSERT_EQ(flat.size(), 3u);
  EXPECT_EQ(flat[1].begin, 2048);
  EXPECT_EQ(flat[0].shape, (MessageShape{1, 2048}));
  EXPECT_EQ(flat[1].shape, (MessageShape{1, 1536}));
  EXPECT_EQ(flat[2].shape, (MessageShape{1, 1416}));
}

TEST(CompressedPieces, ShardedPiecesTakeTheSameRowsOfEveryShard) {
  // [48, 256] over p = 2: shards of 24 rows, three pieces of 8 rows of each.
  const int p = 2;
  const auto pieces = Pieces::split_pieces(MessageShape{48, 256}, p, 3);
  ASSERT_EQ(pieces.size(), 3u);
  for (size_t j = 0; j < pieces.size(); ++j) {
    EXPECT_EQ(pieces[j].begin, int64_t(8 * j));
    EXPECT_EQ(pieces[j].count, 8);
    EXPECT_EQ(pieces[j].shape, (MessageShape{16, 256}));
    // The host algorithm on the piece gives rank r exactly its block of 8 rows.
    const auto chunks = CompressedCollectives::split(pieces[j].shape, p);
    for (int r = 0; r < p; ++r) EXPECT_EQ(chunks.shape[size_t(r)], (MessageShape{8, 256}));
  }
  // Flat [1, 4096] over 2: shards of 2048 elements = 4 groups of 512, split 2 + 1 + 1.
  const auto flat = Pieces::split_pieces(MessageShape{1, 4096}, p, 3);
  ASSERT_EQ(flat.size(), 3u);
  EXPECT_EQ(flat[0].shape, (MessageShape{1, 2048}));
  EXPECT_EQ(flat[1].begin, 1024);
  EXPECT_EQ(flat[2].shape, (MessageShape{1, 1024}));
  // More pieces than rows per shard: one row of each shard per piece.
  EXPECT_EQ(Pieces::split_pieces(MessageShape{4, 64}, p, 8).size(), 2u);
}

TEST(CompressedPieces, AutoGivesPiecesOfAtLeastFourMiBAndAtMostEight) {
  EXPECT_EQ(Pieces::auto_pieces(0), 1);
  EXPECT_EQ(Pieces::auto_pieces(8 * kMiB - 1), 1);  // under 8 MiB: one piece
  EXPECT_EQ(Pieces::auto_pieces(8 * kMiB), 2);
  EXPECT_EQ(Pieces::auto_pieces(12 * kMiB + 5), 3);
  EXPECT_EQ(Pieces::auto_pieces(32 * kMiB), 8);
  EXPECT_EQ(Pieces::auto_pieces(size_t(1) << 30), 8);
  for (size_t bytes = 8 * kMiB; bytes < 64 * kMiB; bytes += 3 * kMiB + 12345) {
    const int k = Pieces::auto_pieces(bytes);
    EXPECT_GE(bytes / size_t(k), 4 * kMiB) << bytes;
    EXPECT_LE(k, 8);
  }
  EXPECT_EQ(Pieces::resolve_pieces(Pieces::kAutoPieces, 100 * kMiB), 8);
  EXPECT_EQ(Pieces::resolve_pieces(4, 1), 4);  // a configured count holds for any size
}

// A blocking communicator (host-staged MPI) returns only when the data has moved, so pieces of
// one call could not overlap: auto gives one piece there, and a configured count still holds.
TEST(CompressedPieces, AutoGivesOnePieceOverABlockingCommunicator) {
  EXPECT_EQ(Pieces::resolve_pieces(Pieces::kAutoPieces, 100 * kMiB, /*enqueues=*/false), 1);
  EXPECT_EQ(Pieces::resolve_pieces(Pieces::kAutoPieces, 100 * kMiB, /*enqueues=*/true), 8);
  EXPECT_EQ(Pieces::resolve_pieces(6, 100 * kMiB, /*enqueues=*/false), 6);
}

// A group of two that moves nothing: enough to reach the device calls' checks.
class IdleCommunicator final : public Communicator {
 public:
  IdleCommunicator() : Communicator("idle") {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "idle"; }
  void all_reduce(const void*, void*, size_t, DType, ReduceOp, Stream) override { fail(); }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp, Stream) override { fail(); }
  void all_gather(const void*, void*, size_t, DType, Stream) override { fail(); }
  void all_to_all(const void*, void*, size_t, DType, Stream) override { fail(); }
  void send(const void*, size_t, DType, int, int, Stream) override { fail(); }
  void recv(void*, size_t, DType, int, int, Stream) override { fail(); }
  void send_recv(const void*, size_t, int, void*, size_t, int, DType, int, Stream) override {
    fail();
  }
  void broadcast(void*, size_t, DType, int, Stream) override { fail(); }
  void barrier(Stream) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("IdleCommunicator moved data"); }
};

TEST(CompressedPieces, WithoutCudaDeviceCallsAreAUserError) {
  if (built_with_cuda()) GTEST_SKIP() << "a CUDA build: tests/mpi/mpi_device_collectives.cpp";
  IdleCommunicator idle;
  DeviceCompressedCollectives device(idle, 2);
  const auto codec = make_codec(canonical(CodecOptions{CodecKind::fp8_block, Fp8Format::e4m3, 64}));
  std::vector<float> x(64);
  try {
    device.all_reduce(*codec, x.data(), DType::f32, MessageShape{2, 32},
                      WireContext{std::nullopt, -1, 0}, false);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace taco
