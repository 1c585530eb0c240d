// The compressed collectives of parallel/compressed_collectives.h on DEVICE buffers: the same
// operations, message conventions and bytes, with the codecs' device methods
// (Codec::encode_async, decode_async, decode_sum_encode_async) on the caller's stream and the
// transfers on a communication stream of this object, pipelined over pieces of the message.
//
//   all_reduce      per piece: encode the p chunks; all_to_all; ONE decode_sum_encode_async over
//                   the p received slots gives this rank's re-encoded (fp32) chunk; all_gather;
//                   decode every chunk, own included
//   reduce_scatter  per piece: encode the p chunks; all_to_all; decode-accumulate the p slots in
//                   fp32 in rank order (bf16 output: rounded once from the sum, as the host does)
//   all_gather      per piece: encode own block; all_gather; decode every block
//   send/recv/send_recv  per piece: one encoded message
// Given the same inputs, the output, wire_bytes and nonfinite_groups are bit-identical to
// CompressedCollectives applied to each piece (the error sums alike, in another order); with
// one piece, everything including the error is CompressedCollectives on the whole message.
//
// Pipeline pieces (split_pieces): a message is cut along rows, a flat [1, n] message along
// elements in multiples of kFlatPieceAlign (whole groups of any group size); each piece is a
// complete compressed collective of its block. all_reduce and p2p cut the message itself: piece
// j is rows [b_j, b_{j+1}). reduce_scatter and all_gather keep every rank's shard contiguous in
// the full message (rank r holds rows [r R, (r+1) R), R = rows / p) and cut all shards alike:
// piece j is rows [b_j, b_{j+1}) of EVERY shard, i.e. the [p (b_{j+1} - b_j), cols] message
// whose chunk r is rank r's block, so rank r's output of piece j is rows [b_j, b_{j+1}) of its
// shard. The bounds split the R rows (all_reduce: all rows) as evenly as whole rows allow.
//
// Streams (parallel/device_pipeline.h): stage s of piece j is issued in step j + s, the stages
// alternating between the caller's stream (encode, decode-sum-encode, decode) and the
// communication stream (all_to_all, all_gather, send/recv), joined by events; so the encode of
// piece j + 1 runs while piece j is on the wire (NCCL). A host-staged MPI communicator returns
// when its data has moved, so there the pieces would run one after another: compression.chunks:
// auto gives it one piece, and it pipelines the transfer inside each call (its staging pieces).
// Every call first makes the communication stream wait for the caller's stream, and ends by
// synchronizing both; then it reads the wire status words (a rejected buffer throws the codec's
// one-line UserError naming the site and rank, as the host decoder would) and the counters.
//
// Measuring (`measure`): this rank's own encodings are decoded once more on the device and their
// error against the input summed there (kernels/roundtrip_error.h), piece by piece right after
// the encode; only three doubles reach the host. The figures are the host path's up to the order
// of the double sums. CompressedCall differences from the host path: nonfinite_values (NaN/Inf in
// the input) is counted only with `measure`, by that same kernel.
//
// Wire buffers, status words and counters are device memory owned by this object (grown as
// needed; slots are multiples of 16 bytes). A build without CUDA has the class, and every call
// throws UserError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "compression/codec.h"
#include "parallel/communicator.h"
#include "parallel/compressed_collectives.h"

namespace taco {

class DevicePipeline;

class DeviceCompressedCollectives {
 public:
  using Side = CompressedCollectives::Side;

  // Pipeline pieces per call: >= 1, or kAutoPieces (compression.chunks: auto).
  static constexpr int kAutoPieces = 0;
  // auto: pieces of at least kAutoPieceBytes logical bytes, at most kMaxAutoPieces, and one piece
  // for messages under 2 * kAutoPieceBytes.
  static constexpr size_t kAutoPieceBytes = size_t(4) << 20;
  static constexpr int kMaxAutoPieces = 8;
  // Pieces of a flat message hold multiples of this many elements (the largest group size).
  static constexpr int64_t kFlatPieceAlign = 512;

  explicit DeviceCompressedCollectives(Communicator& comm, int pieces = 1);
  ~DeviceCompressedCollectives();
  DeviceCompressedCollectives(const DeviceCompressedCollectives&) = delete;
  DeviceCompressedCollectives& operator=(const DeviceCompressedCollectives&) = delete;

  Communicator& communicator() const { return comm_; }
  int pieces() const { return pieces_; }
  void set_pieces(int pieces);

  // As CompressedCollectives, on device buffers; the codec work is queued on `stream`, which
  // must be the stream the inputs were written on and the outputs are read on.
  CompressedCall all_reduce(const Codec& codec, void* x, DType dtype, MessageShape shape,
                            const WireContext& where, bool measure, Stream stream = nullptr);
  CompressedCall reduce_scatter(const Codec& codec, const void* in, void* out, DType dtype,
                                MessageShape full, const WireContext& where, bool measure,
                                Stream stream = nullptr);
  CompressedCall all_gather(const Codec& codec, const void* in, void* out, DType dtype,
                            MessageShape full, const WireContext& where, bool measure,
                            Stream stream = nullptr);
  CompressedCall send(const Codec& codec, const void* x, DType dtype, MessageShape shape, int peer,
                      int tag, const WireContext& where, bool measure, Stream stream = nullptr);
  CompressedCall recv(const Codec& codec, void* x, DType dtype, MessageShape shape, int peer,
                      int tag, const WireContext& where, Stream stream = nullptr);
  CompressedCall send_recv(const Side& out, int dst, const Side& in, int src, DType dtype, int tag,
                           bool measure, Stream stream = nullptr);

  // --- the pipeline layout (host code) ---

  // The pieces for a message of `logical_bytes` (its size in its own dtype).
  static int auto_pieces(size_t logical_bytes);
  // `pieces` as configured; kAutoPieces is auto_pieces over a communicator that enqueues
  // (Communicator::enqueues: NCCL), and one piece over a blocking one (host-staged MPI), whose
  // calls return only once the data has moved: there the pieces could not overlap each other,
  // and the communicator pipelines the transfer of the whole message itself (staging pieces).
  static int resolve_pieces(int pieces, size_t logical_bytes, bool enqueues = true);
  // Bounds 0 = b_0 < b_1 < ... < b_k = units of k = min(pieces, ceil(units / align)) pieces
  // (at least 1; {0, 0} for no units): every piece but the last holds a multiple of `align`
  // units, and the multiples are spread as evenly as CompressedCollectives spreads rows.
  static std::vector<int64_t> piece_bounds(int64_t units, int pieces, int64_t align);

  struct Piece {
    int64_t begin = 0;   // first row (flat message: element) of the piece within each shard
    int64_t count = 0;   // rows (elements) of the piece in each shard
    MessageShape shape;  // the piece as its own collective sees it: [shards * count, cols]
  };
  // The pieces of `full` cut into `shards` equal shards (1 for all_reduce and p2p, p for
  // reduce_scatter and all_gather, whose rows or elements must divide evenly).
  static std::vector<Piece> split_pieces(MessageShape full, int shards, int pieces);

 private:
  // The streams, buffers and status words of a call on `stream` (parallel/device_pipeline.h),
  // made on first use (CUDA builds only).
  // `timing` (measured calls): the codec stages are timed on the device.
  DevicePipeline& begin(Stream stream, size_t status_words, bool timing = false);

  Communicator& comm_;
  int pieces_;
  std::unique_ptr<DevicePipeline> device_;
};

}  // namespace taco
