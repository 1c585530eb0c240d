// Collectives whose payload travels encoded by a Codec (docs/design.md §5), over any Communicator,
// on host memory. Messages are [rows, cols] row-major, fp32 or bf16; p = comm.size(), me = rank.
//
//   all_reduce (two-shot)  split x into p row chunks x_c; encode each; all_to_all the encoded
//                          chunks; s_me = sum over ranks r (in rank order) of decode(chunk me
//                          of r), in fp32; encode s_me; all_gather; every rank decodes all p
//                          chunks, its own included, so all ranks end bit-identical:
//                            out_c = D(E(sum_r D(E(x_{r,c}))))
//   reduce_scatter         encode the p chunks; all_to_all; out = sum_r D(E(x_{r,me})) in fp32
//   all_gather             encode own shard; all_gather; decode every shard (own included)
//   send / recv            one encoded message
//
// Chunks: all_reduce splits rows as evenly as it can (the first rows % p chunks get one row more;
// a chunk may be empty), and a flat message [1, n] splits its elements the same way instead.
// reduce_scatter and all_gather hand each rank exactly rows / p rows, so rows % p != 0 is
// rejected with a UserError naming the site. Every encoded chunk travels in a slot of the same
// size, the exact encoded size of the largest chunk (Codec::max_encoded_size); shorter ones are
// padded with zeros, and each is decoded from its own exact length.
//
// A buffer that fails its header check (compression/wire_format.h) throws the codec's one-line
// UserError naming the rank and site. Non-finite inputs are counted, never zeroed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compression/codec.h"
#include "parallel/communicator.h"

namespace taco {

// What one compressed call did on this rank.
struct CompressedCall {
  size_t wire_bytes = 0;         // bytes this rank put on the wire (padded slots included)
  int64_t nonfinite_values = 0;  // NaN/Inf in this rank's input
  // Groups decoded to NaN or Inf into this rank's output, counted per received message (send:
  // the groups it encoded as NaN).
  int64_t nonfinite_groups = 0;
  // With `measure`: ||D(E(x)) - x||^2 and ||x||^2 of this rank's own input x through its first
  // encoding (no extra communication); measured = false otherwise.
  bool measured = false;
  double error_sq = 0, signal_sq = 0;
  // Time in the codecs: host time of encodes and decodes on the host path (every call); device
  // time of the codec kernels on the device path (measured calls only, else 0).
  double codec_seconds = 0;
  bool codec_timed = false;  // whether codec_seconds was taken
};

class CompressedCollectives {
 public:
  explicit CompressedCollectives(Communicator& comm) : comm_(comm) {}

  Communicator& communicator() const { return comm_; }

  // x [rows, cols] summed over the group in place.
  CompressedCall all_reduce(const Codec& codec, void* x, DType dtype, MessageShape shape,
                            const WireContext& where, bool measure);
  // in [rows, cols]; out [rows / p, cols] = this rank's rows of the sum.
  CompressedCall reduce_scatter(const Codec& codec, const void* in, void* out, DType dtype,
                                MessageShape full, const WireContext& where, bool measure);
  // in [rows / p, cols] from every rank; out [rows, cols] in rank order.
  CompressedCall all_gather(const Codec& codec, const void* in, void* out, DType dtype,
                            MessageShape full, const WireContext& where, bool measure);
  // Point to point with `tag`; both sides pass the same codec and shape.
  CompressedCall send(const Codec& codec, const void* x, DType dtype, MessageShape shape, int peer,
                      int tag, const WireContext& where, bool measure);
  CompressedCall recv(const Codec& codec, void* x, DType dtype, MessageShape shape, int peer,
                      int tag, const WireContext& where);
  // Sends `out` to `dst` and receives `in` from `src` in one exchange; each side has its codec.
  struct Side {
    const Codec* codec;
    void* data;
    MessageShape shape;
    WireContext where;
  };
  CompressedCall send_recv(const Side& out, int dst, const Side& in, int src, DType dtype, int tag,
                           bool measure);

  // Rows of chunk c when `rows` are split over `parts` (the first rows % parts get one more).
  static int64_t chunk_rows(int64_t rows, int parts, int c);
  static int64_t chunk_begin(int64_t rows, int parts, int c);

  // The message conventions above, shared with the device path
  // (parallel/device_compressed_collectives.h).
  // The `parts` chunk shapes of a message and each chunk's first element.
  struct Chunks {
    std::vector<MessageShape> shape;
    std::vector<int64_t> offset;
  };
  static Chunks split(MessageShape shape, int parts);
  // The slot every chunk travels in: the exact encoded size of the largest.
  static size_t slot_size(const Codec& codec, const Chunks& chunks, DType dtype);
  // f32 or bf16, else taco::Error.
  static void check_dtype(DType dtype);
  // reduce_scatter and all_gather: rows (flat: elements) must split evenly over `parts`.
  static void require_even_rows(MessageShape full, int parts, const char* op,
                                const WireContext& where);
  // Adds ||xhat - x||^2 and ||x||^2 of n elements of x (f32 or bf16, from element `offset`)
  // against fp32 xhat to `call`, in double, and marks it measured.
  static void add_error(const void* x, DType dtype, int64_t offset, const float* xhat, int64_t n,
                        CompressedCall& call);

 private:
  // Shot one of all_reduce and reduce_scatter: encodes the chunks of `x` and all_to_all, so
  // that recv_ holds the p encodings of this rank's chunk. Returns the slot size.
  size_t exchange_chunks(const Codec& codec, const void* x, DType dtype, const Chunks& chunks,
                         const WireContext& where, CompressedCall& call, bool measure);
  // all_gather: encodes this rank's chunk `mine_data` into its slot of send_, then
  // gather_decoded. Returns the slot size.
  size_t gather_chunks(const Codec& codec, const void* mine_data, DType in_dtype,
                       const Chunks& chunks, void* out, DType out_dtype, const WireContext& where,
                       CompressedCall& call, int64_t* nonfinite_values);
  // Shot two of all_reduce, the rest of all_gather: all_gather of this rank's encoded chunk (in
  // its slot of send_, `slot` bytes a slot), and every chunk (its own included) decoded into
  // `out`.
  void gather_decoded(const Codec& codec, const Chunks& chunks, size_t slot, DType in_dtype,
                      void* out, DType out_dtype, const WireContext& where, CompressedCall& call);
  // Encodes chunk c of `x` into slot c of `buf` (zero-padding the slot), adding to `call`;
  // returns the groups encoded as NaN.
  int64_t encode_chunks(const Codec& codec, const void* x, DType dtype, const Chunks& chunks,
                        size_t slot, uint8_t* buf, const WireContext& where, CompressedCall& call,
                        bool measure);

  Communicator& comm_;
  std::vector<uint8_t> send_, recv_;
  std::vector<float> acc_, check_;
};

}  // namespace taco
