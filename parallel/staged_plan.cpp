#include "parallel/staged_plan.h"

#include <algorithm>
#include <string>

#include "kernels/check.h"

namespace taco::staging {

namespace {

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Block q of `blocks` split into p parts as evenly as possible (the first blocks % p parts one
// longer).
size_t part_begin(size_t blocks, int p, int q) {
  const size_t base = blocks / size_t(p), extra = blocks % size_t(p);
  return size_t(q) * base + std::min(size_t(q), extra);
}

// The slice [begin, end) of `r`, clipped to its length.
Range slice(const Range& r, size_t begin, size_t end) {
  const size_t b = std::min(begin, r.bytes), e = std::min(end, r.bytes);
  return {r.offset + b, e - b};
}

}  // namespace

int size_class(size_t bytes) {
  int c = 0;
  while (c < 63 && (size_t(1) << c) < bytes) ++c;
  return c;
}

int piece_count(size_t total, size_t slice, size_t piece_bytes) {
  TACO_CHECK(piece_bytes > 0, "staging piece size 0");
  const size_t want = std::max<size_t>(1, ceil_div(total, piece_bytes));
  const size_t most = std::max<size_t>(1, ceil_div(slice, kStageAlign));
  return int(std::min({want, most, size_t(1) << 20}));
}

std::vector<size_t> piece_bounds(size_t bytes, int k) {
  TACO_CHECK(k >= 1, "piece_bounds: " + std::to_string(k) + " pieces");
  const size_t blocks = ceil_div(bytes, kStageAlign);
  std::vector<size_t> b(size_t(k) + 1);
  for (int j = 0; j <= k; ++j)
    b[size_t(j)] = std::min(bytes, part_begin(blocks, k, j) * kStageAlign);
  return b;
}

std::vector<Range> even_chunks(size_t count, size_t elem, int p) {
  TACO_CHECK(
      p >= 1 && elem >= 1 && kStageAlign % elem == 0,
      "even_chunks: " + std::to_string(p) + " parts of " + std::to_string(elem) + "-byte elements");
  const size_t bytes = count * elem, blocks = ceil_div(bytes, kStageAlign);
  std::vector<Range> out(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) {
    const size_t b = std::min(bytes, part_begin(blocks, p, q) * kStageAlign);
    const size_t e = std::min(bytes, part_begin(blocks, p, q + 1) * kStageAlign);
    out[size_t(q)] = {b, e - b};
  }
  return out;
}

Plan plan_flat(size_t bytes, size_t piece_bytes, bool down, bool up) {
  Plan plan;
  if (bytes == 0) return plan;
  const std::vector<size_t> b = piece_bounds(bytes, piece_count(bytes, bytes, piece_bytes));
  for (size_t j = 0; j + 1 < b.size(); ++j) {
    Piece piece;
    piece.begin = b[j];
    piece.end = b[j + 1];
    const Copy c{b[j], b[j], b[j + 1] - b[j]};
    if (down) piece.down.push_back(c);
    if (up) piece.up.push_back(c);
    plan.pieces.push_back(piece);
  }
  return plan;
}

Plan plan_exchange(const std::vector<Range>& send, const std::vector<Range>& recv, int me,
                   size_t piece_bytes) {
  const int p = int(send.size());
  TACO_CHECK(p >= 1 && recv.size() == send.size() && me >= 0 && me < p,
             "plan_exchange: " + std::to_string(send.size()) + " send and " +
                 std::to_string(recv.size()) + " recv ranges, rank " + std::to_string(me));
  size_t longest = 0;
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    longest = std::max({longest, send[size_t(q)].bytes, recv[size_t(q)].bytes});
  }
  Plan plan;
  if (longest == 0) return plan;
  // From the longest range and p only, so every rank of the group cuts alike.
  const std::vector<size_t> b =
      piece_bounds(longest, piece_count(longest * size_t(p), longest, piece_bytes));
  for (size_t j = 0; j + 1 < b.size(); ++j) {
    Piece piece;
    piece.begin = b[j];
    piece.end = b[j + 1];
    piece.send.resize(size_t(p));
    piece.recv.resize(size_t(p));
    for (int q = 0; q < p; ++q) {
      if (q == me) continue;
      const Range s = slice(send[size_t(q)], b[j], b[j + 1]);
      const Range r = slice(recv[size_t(q)], b[j], b[j + 1]);
      piece.send[size_t(q)] = s;
      piece.recv[size_t(q)] = r;
      const bool staged = std::any_of(piece.down.begin(), piece.down.end(), [&](const Copy& c) {
        return c.dev_offset == s.offset && c.bytes == s.bytes;
      });
      if (s.bytes > 0 && !staged) piece.down.push_back({s.offset, s.offset, s.bytes});
      if (r.bytes > 0) piece.up.push_back({r.offset, r.offset, r.bytes});
    }
    plan.pieces.push_back(piece);
  }
  return plan;
}

Plan plan_packed_chunks(size_t chunk, int p, size_t piece_bytes) {
  TACO_CHECK(p >= 1, "plan_packed_chunks: " + std::to_string(p) + " chunks");
  Plan plan;
  if (chunk == 0) return plan;
  const std::vector<size_t> b =
      piece_bounds(chunk, piece_count(chunk * size_t(p), chunk, piece_bytes));
  for (size_t j = 0; j + 1 < b.size(); ++j) {
    Piece piece;
    piece.begin = b[j];
    piece.end = b[j + 1];
    const size_t len = b[j + 1] - b[j];
    piece.down.push_back({b[j], size_t(p) * b[j], len, size_t(p), chunk, len});
    piece.up.push_back({b[j], b[j], len});
    plan.pieces.push_back(piece);
  }
  return plan;
}

}  // namespace taco::staging
