// The device calls of parallel/device_compressed_collectives.h (CUDA builds).
#include "parallel/device_compressed_collectives.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "engine/runtime/cuda_check.h"
#include "kernels/adamw.h"  // cuda::convert_f32_to_bf16
#include "kernels/check.h"
#include "kernels/roundtrip_error.h"
#include "parallel/device_pipeline.h"

namespace taco {

namespace {

using Chunks = CompressedCollectives::Chunks;
using Stage = DevicePipeline::Stage;

static_assert(kWireAlign % 16 == 0, "device wire slots must stay 16-byte aligned");

const uint8_t* element(const void* base, int64_t offset, DType dtype) {
  return static_cast<const uint8_t*>(base) + size_t(offset) * dtype_size(dtype);
}
uint8_t* element(void* base, int64_t offset, DType dtype) {
  return static_cast<uint8_t*>(base) + size_t(offset) * dtype_size(dtype);
}

// One piece of a call: its chunks (offsets in elements of the full message), the size of their
// slots and where its slots start in the wire buffers.
struct PiecePlan {
  DeviceCompressedCollectives::Piece piece;
  Chunks chunks;
  size_t slot = 0, at = 0;    // shot one (or the only exchange)
  size_t slot2 = 0, at2 = 0;  // all_reduce shot two
};

}  // namespace

DeviceCompressedCollectives::DeviceCompressedCollectives(Communicator& comm, int pieces)
    : comm_(comm), pieces_(pieces) {
  set_pieces(pieces);
}

DeviceCompressedCollectives::~DeviceCompressedCollectives() = default;

DevicePipeline& DeviceCompressedCollectives::begin(Stream stream, size_t status_words,
                                                   bool timing) {
  if (!device_) device_ = std::make_unique<DevicePipeline>(comm_);
  device_->begin(stream, status_words, timing);
  return *device_;
}

namespace {

// Encodes one message into a slot of `slot` bytes and zeroes the rest of the slot.
void encode_into_slot(const Codec& codec, const void* x, DType dtype, MessageShape shape,
                      uint8_t* out, size_t slot, cudaStream_t stream, int64_t* nan_groups) {
  codec.encode_async(x, dtype, shape, out, stream, nan_groups);
  const size_t bytes = codec.max_encoded_size(shape, dtype);
  if (slot > bytes) TACO_CHECK_CUDA(cudaMemsetAsync(out + bytes, 0, slot - bytes, stream));
}

// Every chunk of a piece of `x` into its slot of `buf`.
void encode_chunks(const Codec& codec, const void* x, DType dtype, const PiecePlan& plan,
                   uint8_t* buf, cudaStream_t stream, int64_t* nan_groups) {
  for (size_t c = 0; c < plan.chunks.shape.size(); ++c) {
    encode_into_slot(codec, element(x, plan.chunks.offset[c], dtype), dtype, plan.chunks.shape[c],
                     buf + c * plan.slot, plan.slot, stream, nan_groups);
  }
}

// Decodes the chunks of a piece from their slots (`slot` bytes apart, each of its exact encoded
// size for `in_dtype`) into `out`, one status word each.
void decode_chunks(DevicePipeline& d, const Codec& codec, const PiecePlan& plan, const uint8_t* buf,
                   size_t slot, DType in_dtype, void* out, DType out_dtype,
                   const WireContext& where, cudaStream_t s) {
  for (size_t c = 0; c < plan.chunks.shape.size(); ++c) {
    const MessageShape cs = plan.chunks.shape[c];
    const size_t n = codec.max_encoded_size(cs, in_dtype);
    const uint8_t* msg = buf + c * slot;
    uint32_t* status = d.status_for({&codec, msg, 0, 1, n, cs, where});
    codec.decode_async(msg, n, cs, element(out, plan.chunks.offset[c], out_dtype), out_dtype, false,
                       s, status, d.decoded_nan());
  }
}

// A call's pieces, and the bytes of its wire buffers.
struct Plans {
  std::vector<PiecePlan> pieces;
  size_t wire = 0, wire2 = 0;
  int64_t largest_mine = 0;  // elements of this rank's largest chunk
};

// The pieces of `full` (split_pieces with `shards`), each cut into `parts` chunks as
// CompressedCollectives cuts a message: with one shard (all_reduce; p2p with one part) chunk c
// is chunk c of the piece's block; with `parts` shards (reduce_scatter, all_gather) chunk c is
// rank c's block, rows [begin, begin + count) of shard c. Slots hold chunks of `dtype`, and
// with `shot_two` slot2 their fp32 sums.
Plans plan_pieces(const Codec& codec, MessageShape full, int shards, int parts, int me, int pieces,
                  bool enqueues, DType dtype, bool shot_two) {
  Plans out;
  const int64_t unit = full.rows == 1 ? 1 : full.cols, shard = full.count() / shards;
  const size_t bytes = size_t(full.count()) * dtype_size(dtype);
  const int k = DeviceCompressedCollectives::resolve_pieces(pieces, bytes, enqueues);
  for (const auto& piece : DeviceCompressedCollectives::split_pieces(full, shards, k)) {
    PiecePlan plan;
    plan.piece = piece;
    plan.chunks = CompressedCollectives::split(piece.shape, parts);
    for (int c = 0; c < parts; ++c) {
      int64_t& offset = plan.chunks.offset[size_t(c)];
      if (shards == 1) {
        offset += piece.begin * unit;
      } else {
        TACO_CHECK(plan.chunks.shape[size_t(c)].count() == piece.count * unit,
                   "chunk " + std::to_string(c) + " of a piece is not rank " + std::to_string(c) +
                       "'s block");
        offset = c * shard + piece.begin * unit;
      }
    }
    plan.slot = CompressedCollectives::slot_size(codec, plan.chunks, dtype);
    plan.at = out.wire;
    out.wire += size_t(parts) * plan.slot;
    if (shot_two) {
      plan.slot2 = CompressedCollectives::slot_size(codec, plan.chunks, DType::f32);
      plan.at2 = out.wire2;
      out.wire2 += size_t(parts) * plan.slot2;
    }
    out.largest_mine = std::max(out.largest_mine, plan.chunks.shape[size_t(me)].count());
    out.pieces.push_back(plan);
  }
  return out;
}

// With `measure`: this rank's own encodings decoded once more on the device (f32 as the host
// check decodes them, or the message's dtype where the receivers' values are what is measured)
// and their error against the input summed there (kernels/roundtrip_error.h): in registers by
// one kernel where the codec has one (Codec::decode_error_sums_async, the grouped FP8 codecs),
// else decoded into `decoded` and summed by a second. Only the three sums reach the host, at the
// end of the call, with the pipeline's counters (DevicePipeline::error_sums).
struct SelfCheck {
  double* sums = nullptr;  // device [3]: error^2, signal^2, non-finite inputs
  uint8_t* decoded = nullptr;
  DType decoded_dtype = DType::f32;
  explicit operator bool() const { return sums != nullptr; }
};

SelfCheck start_self_check(DevicePipeline& d, bool measure, int64_t elements, DType decoded_dtype) {
  SelfCheck c;
  if (!measure) return c;
  c.sums = d.error_sums();  // zeroed by DevicePipeline::begin on the call's stream
  c.decoded = d.measure.get(size_t(elements) * dtype_size(decoded_dtype));
  c.decoded_dtype = decoded_dtype;
  return c;
}

// Chunk c of a piece (offset in elements of the message `x`), encoded into `msg`, checked.
void check_chunk(DevicePipeline& d, const SelfCheck& c, const Codec& codec, const void* x,
                 DType dtype, int64_t offset, MessageShape shape, const uint8_t* msg,
                 const WireContext& where, cudaStream_t s) {
  if (!c || shape.count() == 0) return;
  const size_t n = codec.max_encoded_size(shape, dtype);
  uint32_t* status = d.status_for({&codec, msg, 0, 1, n, shape, where});
  const void* input = element(x, offset, dtype);
  if (codec.decode_error_sums_async(msg, n, shape, input, dtype, c.decoded_dtype, c.sums, s,
                                    status))
    return;  // decoded and summed in registers
  uint8_t* out = c.decoded + size_t(offset) * dtype_size(c.decoded_dtype);
  codec.decode_async(msg, n, shape, out, c.decoded_dtype, false, s, status, nullptr);
  cuda::roundtrip_error_sums(c.sums, input, dtype, out, c.decoded_dtype, size_t(shape.count()), s);
}

// Every chunk of a piece of `x` from its slot of `wire` (the piece's own slots).
void check_chunks(DevicePipeline& d, const SelfCheck& c, const Codec& codec, const void* x,
                  DType dtype, const PiecePlan& plan, const uint8_t* wire, const WireContext& where,
                  cudaStream_t s) {
  for (size_t k = 0; k < plan.chunks.shape.size(); ++k)
    check_chunk(d, c, codec, x, dtype, plan.chunks.offset[k], plan.chunks.shape[k],
                wire + k * plan.slot, where, s);
}

// The sums DevicePipeline::finish downloaded into `call`.
void finish_self_check(const SelfCheck& c, const DevicePipeline::Counters& counted,
                       CompressedCall& call) {
  if (!c) return;
  call.measured = true;
  call.error_sq = counted.error_sums[0];
  call.signal_sq = counted.error_sums[1];
  call.nonfinite_values = int64_t(counted.error_sums[2]);
}

// The self-check stage of a call, beside the pipeline: `check_piece` where the call measures,
// else a stage without work, which DevicePipeline::run leaves out.
Stage self_check_stage(const SelfCheck& check, std::function<void(int, cudaStream_t)> check_piece) {
  if (!check) check_piece = nullptr;
  return {false, std::move(check_piece), /*timed=*/false, /*beside=*/true};
}

// `stage`, waiting for the piece's self-check: it overwrites the checked input, or may (an output
// that can alias it).
Stage after_self_check(Stage stage) {
  stage.after_beside = true;
  return stage;
}

// Status words a self-check of `plans` needs: one per chunk decoded again.
size_t check_words(bool measure, const Plans& plans) {
  size_t n = 0;
  if (measure)
    for (const PiecePlan& pl : plans.pieces) n += pl.chunks.shape.size();
  return n;
}

// The first two stages of all_reduce and reduce_scatter: the chunks of each piece of `x`
// encoded into their slots of `send` (caller's stream), then all_to_all into `recv`. The stages
// keep pointers to the arguments, which must outlive the pipeline's run.
// With a self-check, each piece's encodings are checked in a stage beside the pipeline, after the
// encode: the exchange does not wait for it, and the stage that overwrites the input (or may,
// where it aliases the output) does (after_beside). That stage is not timed as codec work.
std::vector<Stage> encode_and_all_to_all(const Codec& codec, const void* x, DType dtype,
                                         const Plans& plans, uint8_t* send, uint8_t* recv,
                                         DevicePipeline& d, Communicator& comm,
                                         const SelfCheck& check, const WireContext& where) {
  const Codec* c = &codec;
  const Plans* ps = &plans;
  DevicePipeline* pipeline = &d;
  Communicator* group = &comm;
  const WireContext* at = &where;
  return {{false,
           [=](int j, cudaStream_t s) {
             const PiecePlan& pl = ps->pieces[size_t(j)];
             encode_chunks(*c, x, dtype, pl, send + pl.at, s, pipeline->encoded_nan());
           }},
          self_check_stage(check,
                           [=](int j, cudaStream_t s) {
                             const PiecePlan& pl = ps->pieces[size_t(j)];
                             check_chunks(*pipeline, check, *c, x, dtype, pl, send + pl.at, *at, s);
                           }),
          {true, [=](int j, cudaStream_t s) {
             const PiecePlan& pl = ps->pieces[size_t(j)];
             group->all_to_all(send + pl.at, recv + pl.at, pl.slot, DType::u8, s);
           }}};
}

}  // namespace

CompressedCall DeviceCompressedCollectives::all_reduce(const Codec& codec, void* x, DType dtype,
                                                       MessageShape shape, const WireContext& where,
                                                       bool measure, Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const int p = comm_.size(), me = comm_.rank();
  const Plans plans =
      plan_pieces(codec, shape, 1, p, me, pieces_, comm_.enqueues(), dtype, /*shot_two=*/true);
  const int pieces = int(plans.pieces.size());
  // Status words: one decode-sum-encode and p decodes per piece, and the self-check's.
  DevicePipeline& d =
      begin(stream, size_t(pieces) * size_t(p + 1) + check_words(measure, plans), measure);
  const SelfCheck check = start_self_check(d, measure, shape.count(), DType::f32);
  uint8_t* send = d.send.get(plans.wire);
  uint8_t* recv = d.recv.get(plans.wire);
  uint8_t* gather = d.gather.get(plans.wire2);
  float* sum = reinterpret_cast<float*>(d.scratch.get(size_t(plans.largest_mine) * sizeof(float)));
  auto plan = [&](int j) -> const PiecePlan& { return plans.pieces[size_t(j)]; };

  // Shot one: chunk c of every rank goes to rank c.
  const std::vector<Stage> shot_one =
      encode_and_all_to_all(codec, x, dtype, plans, send, recv, d, comm_, check, where);
  // Which sums them in fp32 in rank order and encodes the sum once, into its slot of shot two.
  const Stage reduce{
      false, [&](int j, cudaStream_t s) {
        const PiecePlan& pl = plan(j);
        const MessageShape mine = pl.chunks.shape[size_t(me)];
        const size_t in_bytes = codec.max_encoded_size(mine, dtype);
        uint8_t* own = gather + pl.at2 + size_t(me) * pl.slot2;
        uint32_t* status = d.status_for({&codec, recv + pl.at, pl.slot, p, in_bytes, mine, where});
        codec.decode_sum_encode_async(recv + pl.at, pl.slot, p, in_bytes, mine, own, sum, s, status,
                                      nullptr);
        const size_t out_bytes = codec.max_encoded_size(mine, DType::f32);
        if (pl.slot2 > out_bytes)
          TACO_CHECK_CUDA(cudaMemsetAsync(own + out_bytes, 0, pl.slot2 - out_bytes, s));
      }};
  // Shot two: every reduced chunk to everyone.
  const Stage all_gather{true, [&](int j, cudaStream_t s) {
                           const PiecePlan& pl = plan(j);
                           comm_.all_gather(gather + pl.at2 + size_t(me) * pl.slot2,
                                            gather + pl.at2, pl.slot2, DType::u8, s);
                         }};
  // The owner too takes its chunk from the decoded bytes, so every rank holds the same values.
  const Stage decode =
      after_self_check({false, [&](int j, cudaStream_t s) {
                          decode_chunks(d, codec, plan(j), gather + plan(j).at2, plan(j).slot2,
                                        DType::f32, x, dtype, where, s);
                        }});
  d.run(pieces, {shot_one[0], shot_one[1], shot_one[2], reduce, all_gather, decode});
  const DevicePipeline::Counters counted = d.finish();

  CompressedCall call;
  call.codec_seconds = counted.codec_seconds;
  call.codec_timed = measure;
  call.nonfinite_groups = counted.decoded_nan_groups;  // counted on the result only
  for (const PiecePlan& pl : plans.pieces) call.wire_bytes += size_t(p - 1) * (pl.slot + pl.slot2);
  finish_self_check(check, counted, call);
  return call;
}

CompressedCall DeviceCompressedCollectives::reduce_scatter(const Codec& codec, const void* in,
                                                           void* out, DType dtype,
                                                           MessageShape full,
                                                           const WireContext& where, bool measure,
                                                           Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const int p = comm_.size(), me = comm_.rank();
  CompressedCollectives::require_even_rows(full, p, "reduce-scatter", where);
  const int64_t unit = full.rows == 1 ? 1 : full.cols;  // elements per row of a piece
  const Plans plans =
      plan_pieces(codec, full, p, p, me, pieces_, comm_.enqueues(), dtype, /*shot_two=*/false);
  const int pieces = int(plans.pieces.size());
  DevicePipeline& d =
      begin(stream, size_t(pieces) * size_t(p) + check_words(measure, plans), measure);
  const SelfCheck check = start_self_check(d, measure, full.count(), DType::f32);
  uint8_t* send = d.send.get(plans.wire);
  uint8_t* recv = d.recv.get(plans.wire);
  float* staging =
      dtype == DType::bf16
          ? reinterpret_cast<float*>(d.scratch.get(size_t(plans.largest_mine) * sizeof(float)))
          : nullptr;
  auto plan = [&](int j) -> const PiecePlan& { return plans.pieces[size_t(j)]; };

  const std::vector<Stage> shot_one =
      encode_and_all_to_all(codec, in, dtype, plans, send, recv, d, comm_, check, where);
  // The p decoded copies of this rank's block summed in fp32 in rank order, straight into an
  // fp32 output; a bf16 output is rounded once from the fp32 sum.
  const Stage reduce = after_self_check(
      {false, [&](int j, cudaStream_t s) {
         const PiecePlan& pl = plan(j);
         const MessageShape mine = pl.chunks.shape[size_t(me)];
         const size_t n = size_t(mine.count()), in_bytes = codec.max_encoded_size(mine, dtype);
         uint8_t* dst = element(out, pl.piece.begin * unit, dtype);
         float* acc = staging ? staging : reinterpret_cast<float*>(dst);
         TACO_CHECK_CUDA(cudaMemsetAsync(acc, 0, n * sizeof(float), s));
         for (int r = 0; r < p; ++r) {
           const uint8_t* msg = recv + pl.at + size_t(r) * pl.slot;
           uint32_t* status = d.status_for({&codec, msg, 0, 1, in_bytes, mine, where});
           codec.decode_async(msg, in_bytes, mine, acc, DType::f32, true, s, status,
                              d.decoded_nan());
         }
         if (staging && n > 0) cuda::convert_f32_to_bf16(reinterpret_cast<bf16*>(dst), acc, n, s);
       }});
  d.run(pieces, {shot_one[0], shot_one[1], shot_one[2], reduce});
  const DevicePipeline::Counters counted = d.finish();

  CompressedCall call;
  call.codec_seconds = counted.codec_seconds;
  call.codec_timed = measure;
  call.nonfinite_groups = counted.decoded_nan_groups;
  for (const PiecePlan& pl : plans.pieces) call.wire_bytes += size_t(p - 1) * pl.slot;
  finish_self_check(check, counted, call);
  return call;
}

CompressedCall DeviceCompressedCollectives::all_gather(const Codec& codec, const void* in,
                                                       void* out, DType dtype, MessageShape full,
                                                       const WireContext& where, bool measure,
                                                       Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const int p = comm_.size(), me = comm_.rank();
  CompressedCollectives::require_even_rows(full, p, "all-gather", where);
  const int64_t unit = full.rows == 1 ? 1 : full.cols;
  const Plans plans =
      plan_pieces(codec, full, p, p, me, pieces_, comm_.enqueues(), dtype, /*shot_two=*/false);
  const int pieces = int(plans.pieces.size());
  DevicePipeline& d = begin(stream, size_t(pieces) * size_t(p + (measure ? 1 : 0)), measure);
  const int64_t shard = full.count() / p;
  // The own block is measured as every rank decodes it: in the message's dtype.
  const SelfCheck check = start_self_check(d, measure, shard, dtype);
  uint8_t* gather = d.gather.get(plans.wire);
  auto plan = [&](int j) -> const PiecePlan& { return plans.pieces[size_t(j)]; };

  // This rank's block of the piece is rows [begin, begin + count) of its shard `in`.
  const Stage encode{false, [&](int j, cudaStream_t s) {
                       const PiecePlan& pl = plan(j);
                       const MessageShape mine = pl.chunks.shape[size_t(me)];
                       uint8_t* own = gather + pl.at + size_t(me) * pl.slot;
                       encode_into_slot(codec, element(in, pl.piece.begin * unit, dtype), dtype,
                                        mine, own, pl.slot, s, d.encoded_nan());
                     }};
  const Stage self_check = self_check_stage(check, [&](int j, cudaStream_t s) {
    const PiecePlan& pl = plan(j);
    check_chunk(d, check, codec, in, dtype, pl.piece.begin * unit, pl.chunks.shape[size_t(me)],
                gather + pl.at + size_t(me) * pl.slot, where, s);
  });
  const Stage exchange{true, [&](int j, cudaStream_t s) {
                         const PiecePlan& pl = plan(j);
                         comm_.all_gather(gather + pl.at + size_t(me) * pl.slot, gather + pl.at,
                                          pl.slot, DType::u8, s);
                       }};
  const Stage decode = after_self_check({false, [&](int j, cudaStream_t s) {
                                           decode_chunks(d, codec, plan(j), gather + plan(j).at,
                                                         plan(j).slot, dtype, out, dtype, where, s);
                                         }});
  d.run(pieces, {encode, self_check, exchange, decode});
  const DevicePipeline::Counters counted = d.finish();

  CompressedCall call;
  call.codec_seconds = counted.codec_seconds;
  call.codec_timed = measure;
  call.nonfinite_groups = counted.decoded_nan_groups;
  for (const PiecePlan& pl : plans.pieces) call.wire_bytes += size_t(p - 1) * pl.slot;
  finish_self_check(check, counted, call);
  return call;
}

// Point to point: each piece is one message (a plan of one part), sent in a slot of exactly its
// encoded size.
CompressedCall DeviceCompressedCollectives::send(const Codec& codec, const void* x, DType dtype,
                                                 MessageShape shape, int peer, int tag,
                                                 const WireContext& where, bool measure,
                                                 Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const Plans plans = plan_pieces(codec, shape, 1, 1, 0, pieces_, comm_.enqueues(), dtype, false);
  DevicePipeline& d = begin(stream, check_words(measure, plans), measure);
  const SelfCheck check = start_self_check(d, measure, shape.count(), DType::f32);
  uint8_t* buf = d.send.get(plans.wire);
  auto plan = [&](int j) -> const PiecePlan& { return plans.pieces[size_t(j)]; };
  const Stage encode{false, [&](int j, cudaStream_t s) {
                       encode_chunks(codec, x, dtype, plan(j), buf + plan(j).at, s,
                                     d.encoded_nan());
                     }};
  const Stage self_check = self_check_stage(check, [&](int j, cudaStream_t s) {
    check_chunks(d, check, codec, x, dtype, plan(j), buf + plan(j).at, where, s);
  });
  const Stage transfer{true, [&](int j, cudaStream_t s) {
                         comm_.send(buf + plan(j).at, plan(j).slot, DType::u8, peer, tag, s);
                       }};
  d.run(int(plans.pieces.size()), {encode, self_check, transfer});
  const DevicePipeline::Counters counted = d.finish();

  CompressedCall call;
  call.codec_seconds = counted.codec_seconds;
  call.codec_timed = measure;
  call.nonfinite_groups = counted.encoded_nan_groups;  // the groups it sent as NaN
  call.wire_bytes = plans.wire;
  finish_self_check(check, counted, call);
  return call;
}

CompressedCall DeviceCompressedCollectives::recv(const Codec& codec, void* x, DType dtype,
                                                 MessageShape shape, int peer, int tag,
                                                 const WireContext& where, Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const Plans plans = plan_pieces(codec, shape, 1, 1, 0, pieces_, comm_.enqueues(), dtype, false);
  DevicePipeline& d = begin(stream, plans.pieces.size());
  uint8_t* buf = d.recv.get(plans.wire);
  auto plan = [&](int j) -> const PiecePlan& { return plans.pieces[size_t(j)]; };
  const Stage transfer{true, [&](int j, cudaStream_t s) {
                         comm_.recv(buf + plan(j).at, plan(j).slot, DType::u8, peer, tag, s);
                       }};
  const Stage decode{false, [&](int j, cudaStream_t s) {
                       decode_chunks(d, codec, plan(j), buf + plan(j).at, plan(j).slot, dtype, x,
                                     dtype, where, s);
                     }};
  d.run(int(plans.pieces.size()), {transfer, decode});
  CompressedCall call;
  call.nonfinite_groups = d.finish().decoded_nan_groups;
  return call;
}

CompressedCall DeviceCompressedCollectives::send_recv(const Side& out, int dst, const Side& in,
                                                      int src, DType dtype, int tag, bool measure,
                                                      Stream stream) {
  CompressedCollectives::check_dtype(dtype);
  const Plans outs =
      plan_pieces(*out.codec, out.shape, 1, 1, 0, pieces_, comm_.enqueues(), dtype, false);
  const Plans ins =
      plan_pieces(*in.codec, in.shape, 1, 1, 0, pieces_, comm_.enqueues(), dtype, false);
  // Both sides exchange max(pieces out, pieces in) times; a side that has run out of pieces
  // sends or receives nothing (count 0), and its peer, whose counts are the same mirrored, does
  // likewise.
  const size_t n_out = outs.pieces.size(), n_in = ins.pieces.size();
  DevicePipeline& d = begin(stream, n_in + check_words(measure, outs), measure);
  const SelfCheck check = start_self_check(d, measure, out.shape.count(), DType::f32);
  uint8_t* send_buf = d.send.get(outs.wire);
  uint8_t* recv_buf = d.recv.get(ins.wire);
  const Stage encode{false, [&](int j, cudaStream_t s) {
                       if (size_t(j) >= n_out) return;
                       const PiecePlan& pl = outs.pieces[size_t(j)];
                       encode_chunks(*out.codec, out.data, dtype, pl, send_buf + pl.at, s,
                                     d.encoded_nan());
                     }};
  const Stage self_check = self_check_stage(check, [&](int j, cudaStream_t s) {
    if (size_t(j) >= n_out) return;
    const PiecePlan& pl = outs.pieces[size_t(j)];
    check_chunks(d, check, *out.codec, out.data, dtype, pl, send_buf + pl.at, out.where, s);
  });
  const Stage exchange{true, [&](int j, cudaStream_t s) {
                         const bool sends = size_t(j) < n_out, receives = size_t(j) < n_in;
                         const PiecePlan* o = sends ? &outs.pieces[size_t(j)] : nullptr;
                         const PiecePlan* i = receives ? &ins.pieces[size_t(j)] : nullptr;
                         comm_.send_recv(o ? send_buf + o->at : nullptr, o ? o->slot : 0, dst,
                                         i ? recv_buf + i->at : nullptr, i ? i->slot : 0, src,
                                         DType::u8, tag, s);
                       }};
  const Stage decode =
      after_self_check({false, [&](int j, cudaStream_t s) {
                          if (size_t(j) >= n_in) return;
                          const PiecePlan& pl = ins.pieces[size_t(j)];
                          decode_chunks(d, *in.codec, pl, recv_buf + pl.at, pl.slot, dtype, in.data,
                                        dtype, in.where, s);
                        }});
  d.run(int(std::max(n_out, n_in)), {encode, self_check, exchange, decode});
  const DevicePipeline::Counters counted = d.finish();

  CompressedCall call;
  call.codec_seconds = counted.codec_seconds;
  call.codec_timed = measure;
  call.nonfinite_groups = counted.decoded_nan_groups;
  call.wire_bytes = outs.wire;
  finish_self_check(check, counted, call);
  return call;
}

}  // namespace taco
