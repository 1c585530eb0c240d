// ZeroShard: ZeRO-1's split of one rank's flat parameter/gradient buffer over its dp group, the
// one place that arithmetic lives (the trainer's reduce-scatter and all-gather, AdamW's range,
// the checkpoint code that places or writes optimizer shards).
//
// The buffer of `total` elements is padded to ranks * slot elements, slot = ceil(total / ranks),
// so a reduce-scatter and an all-gather split it into equal chunks; dp rank r owns the padded
// slot [r * slot, (r + 1) * slot) and, of the real elements, [begin, end) = that slot clipped
// to [0, total). The padding (at most ranks - 1 elements, all in the last slots) stays zero and
// is never updated; a rank whose slot lies wholly in the padding owns no elements (begin == end).
// ZeRO off, or dp = 1: one rank owns the whole buffer and there is no padding.
#pragma once

#include <algorithm>
#include <cstddef>

namespace taco {

class ZeroShard {
 public:
  // The whole buffer on one owner (ZeRO off).
  explicit ZeroShard(size_t total = 0) : ZeroShard(total, 1, 0) {}
  // dp rank `rank` of `ranks` (ranks >= 1, 0 <= rank < ranks).
  ZeroShard(size_t total, int ranks, int rank)
      : total_(total),
        ranks_(std::max(1, ranks)),
        rank_(rank),
        slot_((total + size_t(ranks_) - 1) / size_t(ranks_)),
        begin_(std::min(total, size_t(rank) * slot_)),
        end_(std::min(total, begin_ + slot_)) {}

  size_t total() const { return total_; }  // real elements of the flat buffer
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  // Elements of every rank's padded slot: the chunk of the reduce-scatter and all-gather.
  size_t slot() const { return slot_; }
  // The padded buffer's length: ranks() * slot() (>= total()).
  size_t padded_total() const { return size_t(ranks_) * slot_; }
  // Where this rank's slot starts in the padded buffer.
  size_t slot_offset() const { return size_t(rank_) * slot_; }
  // This rank's real elements [begin(), end()) of the flat buffer.
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  size_t size() const { return end_ - begin_; }

 private:
  size_t total_;
  int ranks_;
  int rank_;
  size_t slot_;
  size_t begin_, end_;
};

}  // namespace taco
