// ZeroShard (parallel/zero_shard.h): the dp ranks' shards of a flat buffer cover it exactly once,
// in rank order, for sizes that dp divides and sizes it does not; the padded slots are equal and
// hold every shard; ZeRO off is the whole buffer.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/zero_shard.h"

namespace taco {
namespace {

TEST(ZeroShard, ShardsCoverTheBufferExactlyOnce) {
  for (size_t total : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(64), size_t(1000),
                       size_t(1001), size_t(124'441)}) {
    for (int dp : {1, 2, 3, 4, 5, 7, 8, 16}) {
      SCOPED_TRACE("total " + std::to_string(total) + ", dp " + std::to_string(dp));
      std::vector<int> owners(total, 0);
      size_t next = 0;  // shards follow each other in rank order
      for (int r = 0; r < dp; ++r) {
        const ZeroShard s(total, dp, r);
        EXPECT_EQ(s.total(), total);
        EXPECT_EQ(s.ranks(), dp);
        EXPECT_EQ(s.slot(), (total + size_t(dp) - 1) / size_t(dp));
        EXPECT_EQ(s.padded_total(), s.slot() * size_t(dp));
        EXPECT_GE(s.padded_total(), total);
        EXPECT_LT(s.padded_total() - total, size_t(dp));  // padding: fewer than dp elements
        EXPECT_EQ(s.slot_offset(), size_t(r) * s.slot());
        // The real elements lie inside the rank's padded slot.
        EXPECT_LE(s.begin(), s.end());
        EXPECT_LE(s.end(), total);
        EXPECT_LE(s.size(), s.slot());
        if (s.size() > 0) {
          EXPECT_EQ(s.begin(), s.slot_offset());
          EXPECT_LE(s.end(), s.slot_offset() + s.slot());
        }
        EXPECT_EQ(s.begin(), next);
        next = s.end();
        for (size_t i = s.begin(); i < s.end(); ++i) owners[i] += 1;
      }
      EXPECT_EQ(next, total);
      for (size_t i = 0; i < total; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;
    }
  }
}

TEST(ZeroShard, OnlyTheLastSlotsHoldPadding) {
  // 10 elements over 4 ranks: slots of 3, the last rank owns 1 real element and 2 of padding.
  const ZeroShard last(10, 4, 3);
  EXPECT_EQ(last.slot(), 3u);
  EXPECT_EQ(last.begin(), 9u);
  EXPECT_EQ(last.end(), 10u);
  // 9 elements over 4 ranks: slots of 3 fill three ranks; the fourth owns padding only.
  const ZeroShard empty(9, 4, 3);
  EXPECT_EQ(empty.slot(), 3u);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.begin(), 9u);
  EXPECT_EQ(empty.padded_total(), 12u);
}

TEST(ZeroShard, WholeBufferWithoutZero) {
  const ZeroShard whole(1001);
  EXPECT_EQ(whole.ranks(), 1);
  EXPECT_EQ(whole.rank(), 0);
  EXPECT_EQ(whole.begin(), 0u);
  EXPECT_EQ(whole.end(), 1001u);
  EXPECT_EQ(whole.slot(), 1001u);
  EXPECT_EQ(whole.padded_total(), 1001u);
  EXPECT_EQ(ZeroShard(1001, 1, 0).end(), 1001u);
}

}  // namespace
}  // namespace taco
