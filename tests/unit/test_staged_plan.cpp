// The staging layout of HostStagedCommunicator (parallel/staged_plan.h), without a GPU: each
// plan is run on the host (copies as memcpy, the pairwise wire between simulated ranks) over
// fresh random bytes, for sizes that do not divide into pieces or chunks, and must reproduce the
// collective exactly, with no byte of a rank's own chunk ever staged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "parallel/staged_plan.h"
#include "tests/support/test_util.h"

namespace taco::staging {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes random_bytes(size_t n, std::mt19937_64& rng) {
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

// A copy as the engine queues it, on host vectors standing in for device and pinned memory.
void apply(const Copy& c, Bytes& dev, Bytes& host, bool to_host) {
  for (size_t r = 0; r < c.rows; ++r) {
    const size_t d = c.dev_offset + r * c.dev_pitch, h = c.host_offset + r * c.host_pitch;
    ASSERT_LE(d + c.bytes, dev.size());
    ASSERT_LE(h + c.bytes, host.size());
    if (to_host)
      std::memcpy(host.data() + h, dev.data() + d, c.bytes);
    else
      std::memcpy(dev.data() + d, host.data() + h, c.bytes);
  }
}

// One rank's side of an exchange.
struct Side {
  std::vector<Range> send, recv;
  Bytes src, dst;            // device buffers
  Bytes host_down, host_up;  // their pinned mirrors
  Plan plan;
};

// Runs the plans of every rank: all down copies, then per piece the pairwise transfers (each
// rank's send range to q must be as long as q's receive range from it), then the up copies and
// the local device copies.
void run_exchange(std::vector<Side>& ranks) {
  const int p = int(ranks.size());
  for (int me = 0; me < p; ++me) {
    Side& s = ranks[size_t(me)];
    s.host_down.assign(s.src.size(), 0);
    s.host_up.assign(s.dst.size(), 0);
    s.plan = plan_exchange(s.send, s.recv, me, 64);
    ASSERT_EQ(s.plan.pieces.size(), ranks[0].plan.pieces.size()) << "ranks cut alike";
  }
  for (size_t j = 0; j < ranks[0].plan.pieces.size(); ++j) {
    for (Side& s : ranks)
      for (const Copy& c : s.plan.pieces[j].down) apply(c, s.src, s.host_down, true);
    for (int me = 0; me < p; ++me) {
      for (int q = 0; q < p; ++q) {
        if (q == me) continue;
        const Range out = ranks[size_t(me)].plan.pieces[j].send[size_t(q)];
        const Range in = ranks[size_t(q)].plan.pieces[j].recv[size_t(me)];
        ASSERT_EQ(out.bytes, in.bytes) << "piece " << j << " from " << me << " to " << q;
        std::memcpy(ranks[size_t(q)].host_up.data() + in.offset,
                    ranks[size_t(me)].host_down.data() + out.offset, out.bytes);
      }
    }
    for (Side& s : ranks)
      for (const Copy& c : s.plan.pieces[j].up) apply(c, s.dst, s.host_up, false);
  }
  for (Side& s : ranks)
    for (const Local& l : s.plan.local)
      std::memcpy(s.dst.data() + l.dst_offset, s.src.data() + l.src_offset, l.bytes);
}

// No down copy reads, and no up copy writes, the rank's own range.
void expect_own_not_staged(const Side& s, int me) {
  const Range own_out = s.send[size_t(me)], own_in = s.recv[size_t(me)];
  for (const Piece& piece : s.plan.pieces) {
    for (const Copy& c : piece.up)
      EXPECT_TRUE(c.dev_offset + c.bytes <= own_in.offset ||
                  c.dev_offset >= own_in.offset + own_in.bytes || own_in.bytes == 0);
    if (own_out.bytes == 0) continue;
    for (const Copy& c : piece.down) {
      const bool shared = std::any_of(s.send.begin(), s.send.end(), [&](const Range& r) {
        return &r != &s.send[size_t(me)] && r.offset == own_out.offset;
      });  // all_gather: the range every peer gets is the own one, and it must go down
      if (!shared) {
        EXPECT_TRUE(c.dev_offset + c.bytes <= own_out.offset ||
                    c.dev_offset >= own_out.offset + own_out.bytes);
      }
    }
  }
}

TEST(StagedPlan, SizeClassIsTheNextPowerOfTwo) {
  EXPECT_EQ(size_class(0), 0);
  EXPECT_EQ(size_class(1), 0);
  EXPECT_EQ(size_class(2), 1);
  EXPECT_EQ(size_class(3), 2);
  EXPECT_EQ(size_class(size_t(1) << 24), 24);
  EXPECT_EQ(size_class((size_t(1) << 24) + 1), 25);
}

TEST(StagedPlan, PieceBoundsCoverTheMessageOnAlignedCuts) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const size_t bytes = rng() % 100000, piece = 1 + rng() % 9000;
    const int k = piece_count(bytes, bytes, piece);
    const std::vector<size_t> b = piece_bounds(bytes, k);
    SCOPED_TRACE(std::to_string(bytes) + " bytes, pieces of " + std::to_string(piece));
    ASSERT_EQ(b.size(), size_t(k) + 1);
    EXPECT_EQ(b.front(), 0u);
    EXPECT_EQ(b.back(), bytes);
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      EXPECT_LE(b[j], b[j + 1]);
      if (j > 0) {
        EXPECT_TRUE(b[j] % kStageAlign == 0 || b[j] == bytes);
      }
      // As even as aligned cuts allow: within two blocks of the ideal piece.
      EXPECT_LE(b[j + 1] - b[j], bytes / size_t(k) + 2 * kStageAlign);
    }
    EXPECT_GE(size_t(k), std::min((bytes + piece - 1) / piece, (bytes + 15) / 16));
  }
}

TEST(StagedPlan, FlatPlanStagesEveryByteOnce) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const size_t bytes = 1 + rng() % 50000;
    const Plan plan = plan_flat(bytes, 1 + rng() % 5000, true, true);
    std::vector<int> down(bytes, 0), up(bytes, 0);
    for (const Piece& piece : plan.pieces) {
      for (const Copy& c : piece.down)
        for (size_t i = 0; i < c.bytes; ++i) ++down[c.dev_offset + i];
      for (const Copy& c : piece.up)
        for (size_t i = 0; i < c.bytes; ++i) ++up[c.dev_offset + i];
    }
    EXPECT_EQ(down, std::vector<int>(bytes, 1));
    EXPECT_EQ(up, std::vector<int>(bytes, 1));
  }
}

TEST(StagedPlan, EvenChunksAreAlignedAndCoverTheMessage) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int trial = 0; trial < 100; ++trial) {
    const size_t elem = size_t(1) << (rng() % 3), count = rng() % 3000;
    const int p = 1 + int(rng() % 5);
    const std::vector<Range> c = even_chunks(count, elem, p);
    size_t next = 0;
    for (const Range& r : c) {
      EXPECT_EQ(r.offset, next);
      EXPECT_TRUE(r.offset % kStageAlign == 0 || r.bytes == 0);
      EXPECT_EQ(r.bytes % elem, 0u);
      EXPECT_LE(r.bytes, c[0].bytes);  // the first chunk is the longest
      next += r.bytes;
    }
    EXPECT_EQ(next, count * elem);
  }
}

// all_to_all: chunk q of each rank's source lands in chunk `me` of rank q's destination.
TEST(StagedPlan, AllToAllExchangeReproducesTheCollective) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int p : {2, 3, 4}) {
    const size_t chunk = 1 + rng() % 700;  // not a multiple of the pieces or of 16
    std::vector<Side> ranks(static_cast<size_t>(p));
    for (int me = 0; me < p; ++me) {
      Side& s = ranks[size_t(me)];
      for (int q = 0; q < p; ++q) s.send.push_back({size_t(q) * chunk, chunk});
      s.recv = s.send;
      s.src = random_bytes(chunk * size_t(p), rng);
      s.dst.assign(chunk * size_t(p), 0);
    }
    run_exchange(ranks);
    for (int me = 0; me < p; ++me) {
      Side& s = ranks[size_t(me)];
      expect_own_not_staged(s, me);
      // The own chunk is the caller's local copy; do it here as the communicator does.
      std::memcpy(s.dst.data() + size_t(me) * chunk, s.src.data() + size_t(me) * chunk, chunk);
      for (int q = 0; q < p; ++q) {
        const Bytes& from = ranks[size_t(q)].src;
        EXPECT_TRUE(std::equal(from.begin() + long(size_t(me) * chunk),
                               from.begin() + long(size_t(me + 1) * chunk),
                               s.dst.begin() + long(size_t(q) * chunk)))
            << "p " << p << " rank " << me << " chunk from " << q;
      }
    }
  }
}

// all_gather and the two-shot reduction's two shots: uneven chunks (even_chunks of an odd
// count), one range sent to every peer, and slots of a padded stride.
TEST(StagedPlan, TwoShotExchangesMoveEveryChunkToItsOwnerAndBack) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int p : {2, 3, 4}) {
    const size_t elem = 2, count = 1 + rng() % 2000;
    const std::vector<Range> chunks = even_chunks(count, elem, p);
    const size_t stride = (chunks[0].bytes + 15) / 16 * 16;
    // Shot one: chunk q of every rank into slot `rank` of rank q's slots.
    std::vector<Side> one(static_cast<size_t>(p));
    for (int me = 0; me < p; ++me) {
      Side& s = one[size_t(me)];
      s.send = chunks;
      for (int q = 0; q < p; ++q) s.recv.push_back({size_t(q) * stride, chunks[size_t(me)].bytes});
      s.src = random_bytes(count * elem, rng);
      s.dst.assign(stride * size_t(p), 0);
    }
    run_exchange(one);
    for (int me = 0; me < p; ++me) {
      expect_own_not_staged(one[size_t(me)], me);
      const Range mine = chunks[size_t(me)];
      for (int q = 0; q < p; ++q) {
        if (q == me) continue;
        const Bytes& from = one[size_t(q)].src;
        EXPECT_TRUE(std::equal(from.begin() + long(mine.offset),
                               from.begin() + long(mine.offset + mine.bytes),
                               one[size_t(me)].dst.begin() + long(size_t(q) * stride)))
            << "shot one, p " << p << " rank " << me << " slot " << q;
      }
    }
    // Shot two: every rank's own chunk to every peer, into its place.
    std::vector<Side> two(static_cast<size_t>(p));
    for (int me = 0; me < p; ++me) {
      Side& s = two[size_t(me)];
      s.send.assign(size_t(p), chunks[size_t(me)]);
      s.recv = chunks;
      s.src = random_bytes(count * elem, rng);
      s.dst = s.src;  // in place: source and destination are one buffer
    }
    std::vector<Bytes> before;
    for (const Side& s : two) before.push_back(s.src);
    run_exchange(two);
    for (int me = 0; me < p; ++me) {
      expect_own_not_staged(two[size_t(me)], me);
      for (int q = 0; q < p; ++q) {
        const Range c = chunks[size_t(q)];
        EXPECT_TRUE(std::equal(before[size_t(q)].begin() + long(c.offset),
                               before[size_t(q)].begin() + long(c.offset + c.bytes),
                               two[size_t(me)].dst.begin() + long(c.offset)))
            << "shot two, p " << p << " rank " << me << " chunk " << q;
      }
      // The own chunk went down once per piece, not once per peer.
      for (const Piece& piece : two[size_t(me)].plan.pieces) EXPECT_LE(piece.down.size(), 1u);
    }
  }
}

// MPI_Reduce_scatter's packing: piece j's block of the host source holds the slices [b_j,
// b_{j+1}) of the p chunks, one after another.
TEST(StagedPlan, PackedChunksPutEachPiecesSlicesSideBySide) {
  std::mt19937_64 rng(test::fresh_seed());
  for (int p : {2, 3}) {
    const size_t chunk = 101 + rng() % 900;  // p * chunk > 200: several pieces
    Bytes dev = random_bytes(chunk * size_t(p), rng), host(chunk * size_t(p), 0);
    const Plan plan = plan_packed_chunks(chunk, p, 200);
    ASSERT_GT(plan.pieces.size(), 1u);
    for (const Piece& piece : plan.pieces)
      for (const Copy& c : piece.down) apply(c, dev, host, true);
    for (const Piece& piece : plan.pieces) {
      const size_t len = piece.end - piece.begin;
      for (int q = 0; q < p; ++q) {
        EXPECT_EQ(0, std::memcmp(host.data() + size_t(p) * piece.begin + size_t(q) * len,
                                 dev.data() + size_t(q) * chunk + piece.begin, len));
      }
      ASSERT_EQ(piece.up.size(), 1u);
      EXPECT_EQ(piece.up[0].dev_offset, piece.begin);
      EXPECT_EQ(piece.up[0].bytes, len);
    }
  }
}

}  // namespace
}  // namespace taco::staging
