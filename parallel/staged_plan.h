// The layout of HostStagedCommunicator's pipelined staging: which bytes of a call go down
// (device -> pinned host), over the wire and back up (host -> device), cut into pieces so that
// piece j + 1 goes down while piece j is on the wire and piece j - 1 goes up. Pure host logic
// (tests/unit/test_staged_plan.cpp); parallel/staging_engine.h runs a plan on the copy streams.
//
// Every host buffer mirrors a device buffer: a byte at offset o of the device buffer is staged at
// offset o of its host buffer (only reduce_scatter's native path packs, see plan_packed_chunks).
// Piece bounds fall on multiples of kStageAlign bytes (a multiple of every element size, and the
// alignment the copy engines like), so no element is ever cut in two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace taco::staging {

inline constexpr size_t kStageAlign = 16;
// Bytes of a message per pipeline piece, summed over its chunks (HostStagedCommunicator's
// default; set_piece_bytes changes it). 4 MB: to be confirmed by `taco-bench comm --stage-piece`.
inline constexpr size_t kDefaultPieceBytes = size_t(4) << 20;

// A byte range of a buffer.
struct Range {
  size_t offset = 0, bytes = 0;
};

// A copy between a device buffer and its host buffer: `rows` rows of `bytes` bytes, row i at
// dev_offset + i * dev_pitch on the device and host_offset + i * host_pitch on the host.
struct Copy {
  size_t dev_offset = 0, host_offset = 0, bytes = 0;
  size_t rows = 1, dev_pitch = 0, host_pitch = 0;
};

// A device-to-device copy inside one call (a rank's own chunk, which never crosses the link).
struct Local {
  size_t src_offset = 0, dst_offset = 0, bytes = 0;
};

// One pipeline piece. For exchanges, send[q] / recv[q] are the host ranges this piece sends to
// / receives from rank q (empty for this rank and for ranks it does not talk to).
struct Piece {
  std::vector<Copy> down, up;
  std::vector<Range> send, recv;
  size_t begin = 0, end = 0;  // the slice [begin, end) of every chunk (or of the message)
};

struct Plan {
  std::vector<Piece> pieces;
  std::vector<Local> local;  // queued before the first piece's copies go up
};

// The smallest c with 2^c >= bytes (0 for 0 and 1 byte): the size class a reduction's path is
// chosen for.
int size_class(size_t bytes);

// Pieces a message of `total` bytes is cut into: ceil(total / piece_bytes), at least 1, at most
// one per kStageAlign bytes of `slice` (the length each piece cuts, e.g. one chunk).
int piece_count(size_t total, size_t slice, size_t piece_bytes);

// Bounds 0 = b_0 <= b_1 <= ... <= b_k = bytes: `bytes` cut into k pieces as evenly as
// multiples of kStageAlign allow (every bound but the last is such a multiple).
std::vector<size_t> piece_bounds(size_t bytes, int k);

// `count` elements of `elem` bytes cut into p chunks as evenly as whole kStageAlign-byte blocks
// allow (the last chunks may be shorter or empty): the two-shot reduction's chunks, in bytes.
std::vector<Range> even_chunks(size_t count, size_t elem, int p);

// A flat message of `bytes` (an all-reduce, a p2p message): piece j stages [b_j, b_{j+1}) down
// (if `down`) and up (if `up`) at the same offsets.
Plan plan_flat(size_t bytes, size_t piece_bytes, bool down, bool up);

// An exchange between the ranks of a group of p, rank `me`: rank q gets send[q] of this rank's
// source buffer and this rank receives recv[q] of its destination buffer from rank q (lengths
// must agree with the peer's). Each piece takes the same slice [b_j, b_{j+1}) of every range
// (clipped to its length); the bounds cut the longest range into pieces of about piece_bytes
// over p such ranges, so ranks agree on them when the longest range (over peers, both sides) is
// the same on every rank, as with equal chunks or even_chunks. Own ranges are left out: the caller
// moves them on the device (add Locals). Ranges sent to several peers go down once.
Plan plan_exchange(const std::vector<Range>& send, const std::vector<Range>& recv, int me,
                   size_t piece_bytes);

// p chunks of `chunk` bytes, chunk q at q * chunk of the device source, for a host collective
// that needs each piece's chunks packed (MPI_Reduce_scatter): piece j's slices of the p chunks
// go down into one block [p * b_j, p * b_{j+1}) of the host source (row q at p * b_j + q * len);
// the result slice [b_j, b_{j+1}) goes up from the host destination's same offsets.
Plan plan_packed_chunks(size_t chunk, int p, size_t piece_bytes);

}  // namespace taco::staging
