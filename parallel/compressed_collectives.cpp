#include "parallel/compressed_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "kernels/check.h"
#include "kernels/roundtrip_error.h"

namespace taco {

namespace {

// Adds the host time of its scope to `seconds` (the codec share of a call).
class CodecTime {
 public:
  explicit CodecTime(CompressedCall& call) : call_(call), t0_(std::chrono::steady_clock::now()) {}
  ~CodecTime() {
    call_.codec_timed = true;
    call_.codec_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  CompressedCall& call_;
  std::chrono::steady_clock::time_point t0_;
};

const float* as_f32(const void* p, int64_t offset) { return static_cast<const float*>(p) + offset; }
const bf16* as_bf16(const void* p, int64_t offset) { return static_cast<const bf16*>(p) + offset; }

EncodeResult encode_at(const Codec& codec, const void* x, DType dtype, int64_t offset,
                       MessageShape shape, uint8_t* out, size_t capacity) {
  return dtype == DType::f32 ? codec.encode(as_f32(x, offset), shape, out, capacity)
                             : codec.encode(as_bf16(x, offset), shape, out, capacity);
}

DecodeResult decode_at(const Codec& codec, const uint8_t* in, size_t size, MessageShape shape,
                       void* out, DType dtype, int64_t offset, const WireContext& where) {
  return dtype == DType::f32
             ? codec.decode(in, size, shape, static_cast<float*>(out) + offset, where)
             : codec.decode(in, size, shape, static_cast<bf16*>(out) + offset, where);
}

// Encodes into a slot and zeroes the rest of it, so equal inputs give identical slots.
EncodeResult encode_into_slot(const Codec& codec, const void* x, DType dtype, int64_t offset,
                              MessageShape shape, uint8_t* slot, size_t slot_bytes) {
  const EncodeResult r = encode_at(codec, x, dtype, offset, shape, slot, slot_bytes);
  std::memset(slot + r.bytes, 0, slot_bytes - r.bytes);
  return r;
}

}  // namespace

void CompressedCollectives::check_dtype(DType dtype) {
  TACO_CHECK(dtype == DType::f32 || dtype == DType::bf16,
             std::string("compressed collectives take f32 or bf16, not ") + dtype_name(dtype));
}

void CompressedCollectives::add_error(const void* x, DType dtype, int64_t offset, const float* xhat,
                                      int64_t n, CompressedCall& call) {
  call.measured = true;
  double sums[3] = {0, 0, 0};
  cpu::roundtrip_error_sums(static_cast<const uint8_t*>(x) + size_t(offset) * dtype_size(dtype),
                            dtype, xhat, DType::f32, size_t(n), sums);
  call.error_sq += sums[0];
  call.signal_sq += sums[1];
}

void CompressedCollectives::require_even_rows(MessageShape full, int parts, const char* op,
                                              const WireContext& where) {
  const int64_t split = full.rows == 1 ? full.cols : full.rows;
  if (split % parts == 0) return;
  throw UserError("rank " + std::to_string(where.rank >= 0 ? where.rank : error_rank()) +
                  ": site " + wire_site(where) + ": compressed " + op + " of [" +
                  std::to_string(full.rows) + ", " + std::to_string(full.cols) + "] over " +
                  std::to_string(parts) + " ranks: " + (full.rows == 1 ? "elements" : "rows") +
                  " must be a multiple of the group size (each rank holds 1/" +
                  std::to_string(parts) + " of them); pad the message or change the layout");
}

int64_t CompressedCollectives::chunk_rows(int64_t rows, int parts, int c) {
  return rows / parts + (c < rows % parts ? 1 : 0);
}

int64_t CompressedCollectives::chunk_begin(int64_t rows, int parts, int c) {
  return c * (rows / parts) + std::min<int64_t>(c, rows % parts);
}

// A flat message [1, n] splits its elements; any other splits its rows.
CompressedCollectives::Chunks CompressedCollectives::split(MessageShape shape, int p) {
  Chunks chunks;
  for (int c = 0; c < p; ++c) {
    if (shape.rows == 1) {
      chunks.shape.push_back(MessageShape{1, chunk_rows(shape.cols, p, c)});
      chunks.offset.push_back(chunk_begin(shape.cols, p, c));
    } else {
      chunks.shape.push_back(MessageShape{chunk_rows(shape.rows, p, c), shape.cols});
      chunks.offset.push_back(chunk_begin(shape.rows, p, c) * shape.cols);
    }
  }
  return chunks;
}

size_t CompressedCollectives::slot_size(const Codec& codec, const Chunks& chunks, DType dtype) {
  size_t slot = 0;
  for (const MessageShape& s : chunks.shape)
    slot = std::max(slot, codec.max_encoded_size(s, dtype));
  return slot;
}

int64_t CompressedCollectives::encode_chunks(const Codec& codec, const void* x, DType dtype,
                                             const Chunks& chunks, size_t slot, uint8_t* buf,
                                             const WireContext& where, CompressedCall& call,
                                             bool measure) {
  int64_t poisoned = 0;
  for (size_t c = 0; c < chunks.shape.size(); ++c) {
    const MessageShape s = chunks.shape[c];
    uint8_t* out = buf + c * slot;
    EncodeResult r;
    {
      const CodecTime timed(call);
      r = encode_into_slot(codec, x, dtype, chunks.offset[c], s, out, slot);
    }
    call.nonfinite_values += r.nonfinite_values;
    poisoned += r.nonfinite_groups;
    if (measure && s.count() > 0) {
      check_.resize(size_t(s.count()));
      codec.decode(out, r.bytes, s, check_.data(), where);
      add_error(x, dtype, chunks.offset[c], check_.data(), s.count(), call);
    }
  }
  return poisoned;
}

size_t CompressedCollectives::exchange_chunks(const Codec& codec, const void* x, DType dtype,
                                              const Chunks& chunks, const WireContext& where,
                                              CompressedCall& call, bool measure) {
  const int p = comm_.size();
  const size_t slot = slot_size(codec, chunks, dtype);
  send_.resize(size_t(p) * slot);
  recv_.resize(size_t(p) * slot);
  encode_chunks(codec, x, dtype, chunks, slot, send_.data(), where, call, measure);
  comm_.all_to_all(send_.data(), recv_.data(), slot, DType::u8, nullptr);
  return slot;
}

size_t CompressedCollectives::gather_chunks(const Codec& codec, const void* mine_data,
                                            DType in_dtype, const Chunks& chunks, void* out,
                                            DType out_dtype, const WireContext& where,
                                            CompressedCall& call, int64_t* nonfinite_values) {
  const int p = comm_.size(), me = comm_.rank();
  const size_t slot = slot_size(codec, chunks, in_dtype);
  send_.resize(size_t(p) * slot);
  EncodeResult r;
  {
    const CodecTime timed(call);
    r = encode_into_slot(codec, mine_data, in_dtype, 0, chunks.shape[size_t(me)],
                         send_.data() + size_t(me) * slot, slot);
  }
  if (nonfinite_values) *nonfinite_values += r.nonfinite_values;
  gather_decoded(codec, chunks, slot, in_dtype, out, out_dtype, where, call);
  return slot;
}

void CompressedCollectives::gather_decoded(const Codec& codec, const Chunks& chunks, size_t slot,
                                           DType in_dtype, void* out, DType out_dtype,
                                           const WireContext& where, CompressedCall& call) {
  const int p = comm_.size(), me = comm_.rank();
  comm_.all_gather(send_.data() + size_t(me) * slot, send_.data(), slot, DType::u8, nullptr);
  const CodecTime timed(call);
  for (int c = 0; c < p; ++c) {
    const MessageShape s = chunks.shape[size_t(c)];
    call.nonfinite_groups +=
        decode_at(codec, send_.data() + size_t(c) * slot, codec.max_encoded_size(s, in_dtype), s,
                  out, out_dtype, chunks.offset[size_t(c)], where)
            .nonfinite_groups;
  }
}

CompressedCall CompressedCollectives::all_reduce(const Codec& codec, void* x, DType dtype,
                                                 MessageShape shape, const WireContext& where,
                                                 bool measure) {
  check_dtype(dtype);
  const int p = comm_.size(), me = comm_.rank();
  const Chunks chunks = split(shape, p);
  const MessageShape mine = chunks.shape[size_t(me)];
  CompressedCall call;
  // Shot one: chunk c of every rank goes to rank c, which sums the decoded chunks in fp32 in rank
  // order and encodes the sum once, into its slot of shot two (Codec::decode_sum_encode).
  const size_t slot1 = exchange_chunks(codec, x, dtype, chunks, where, call, measure);
  const size_t slot2 = slot_size(codec, chunks, DType::f32);
  send_.resize(size_t(p) * slot2);
  acc_.resize(size_t(mine.count()));
  {
    const CodecTime timed(call);
    uint8_t* own = send_.data() + size_t(me) * slot2;
    codec.decode_sum_encode(recv_.data(), slot1, p, codec.max_encoded_size(mine, dtype), mine,
                            acc_.data(), own, slot2, where);
    const size_t bytes = codec.max_encoded_size(mine, DType::f32);
    std::memset(own + bytes, 0, slot2 - bytes);
  }
  // Shot two: each reduced chunk goes to everyone, and the owner too takes its chunk from the
  // decoded bytes, so every rank holds the same values. Non-finite groups are counted on the
  // result only.
  gather_decoded(codec, chunks, slot2, DType::f32, x, dtype, where, call);
  call.wire_bytes = size_t(p - 1) * (slot1 + slot2);
  return call;
}

CompressedCall CompressedCollectives::reduce_scatter(const Codec& codec, const void* in, void* out,
                                                     DType dtype, MessageShape full,
                                                     const WireContext& where, bool measure) {
  check_dtype(dtype);
  require_even_rows(full, comm_.size(), "reduce-scatter", where);
  const Chunks chunks = split(full, comm_.size());
  const size_t n = size_t(chunks.shape[size_t(comm_.rank())].count());
  CompressedCall call;
  float* acc = static_cast<float*>(out);
  if (dtype == DType::bf16) {
    acc_.resize(n);
    acc = acc_.data();
  }
  const size_t slot = exchange_chunks(codec, in, dtype, chunks, where, call, measure);
  {
    // This rank's chunk: the p decoded copies summed in fp32 in rank order.
    const MessageShape mine = chunks.shape[size_t(comm_.rank())];
    const size_t bytes = codec.max_encoded_size(mine, dtype);
    std::fill(acc, acc + n, 0.f);
    const CodecTime timed(call);
    for (int r = 0; r < comm_.size(); ++r) {
      call.nonfinite_groups +=
          codec.decode_accumulate(recv_.data() + size_t(r) * slot, bytes, mine, acc, where)
              .nonfinite_groups;
    }
  }
  if (dtype == DType::bf16) {
    bf16* o = static_cast<bf16*>(out);
    for (size_t i = 0; i < n; ++i) o[i] = float_to_bf16(acc[i]);
  }
  call.wire_bytes = size_t(comm_.size() - 1) * slot;
  return call;
}

CompressedCall CompressedCollectives::all_gather(const Codec& codec, const void* in, void* out,
                                                 DType dtype, MessageShape full,
                                                 const WireContext& where, bool measure) {
  check_dtype(dtype);
  require_even_rows(full, comm_.size(), "all-gather", where);
  const Chunks chunks = split(full, comm_.size());
  CompressedCall call;
  const size_t slot =
      gather_chunks(codec, in, dtype, chunks, out, dtype, where, call, &call.nonfinite_values);
  const MessageShape mine = chunks.shape[size_t(comm_.rank())];
  if (measure && mine.count() > 0) {
    // This rank's shard as everyone decoded it.
    const int64_t n = mine.count(), at = chunks.offset[size_t(comm_.rank())];
    check_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      check_[size_t(i)] =
          dtype == DType::f32 ? as_f32(out, at)[i] : bf16_to_float(as_bf16(out, at)[i]);
    }
    add_error(in, dtype, 0, check_.data(), n, call);
  }
  call.wire_bytes = size_t(comm_.size() - 1) * slot;
  return call;
}

CompressedCall CompressedCollectives::send(const Codec& codec, const void* x, DType dtype,
                                           MessageShape shape, int peer, int tag,
                                           const WireContext& where, bool measure) {
  check_dtype(dtype);
  CompressedCall call;
  Chunks one{{shape}, {0}};
  const size_t bytes = codec.max_encoded_size(shape, dtype);
  send_.resize(bytes);
  call.nonfinite_groups =
      encode_chunks(codec, x, dtype, one, bytes, send_.data(), where, call, measure);
  comm_.send(send_.data(), bytes, DType::u8, peer, tag, nullptr);
  call.wire_bytes = bytes;
  return call;
}

CompressedCall CompressedCollectives::recv(const Codec& codec, void* x, DType dtype,
                                           MessageShape shape, int peer, int tag,
                                           const WireContext& where) {
  check_dtype(dtype);
  CompressedCall call;
  const size_t bytes = codec.max_encoded_size(shape, dtype);
  recv_.resize(bytes);
  comm_.recv(recv_.data(), bytes, DType::u8, peer, tag, nullptr);
  const CodecTime timed(call);
  call.nonfinite_groups =
      decode_at(codec, recv_.data(), bytes, shape, x, dtype, 0, where).nonfinite_groups;
  return call;
}

CompressedCall CompressedCollectives::send_recv(const Side& out, int dst, const Side& in, int src,
                                                DType dtype, int tag, bool measure) {
  check_dtype(dtype);
  CompressedCall call;
  Chunks one{{out.shape}, {0}};
  const size_t out_bytes = out.codec->max_encoded_size(out.shape, dtype);
  const size_t in_bytes = in.codec->max_encoded_size(in.shape, dtype);
  send_.resize(out_bytes);
  recv_.resize(in_bytes);
  encode_chunks(*out.codec, out.data, dtype, one, out_bytes, send_.data(), out.where, call,
                measure);
  comm_.send_recv(send_.data(), out_bytes, dst, recv_.data(), in_bytes, src, DType::u8, tag,
                  nullptr);
  const CodecTime timed(call);
  call.nonfinite_groups =
      decode_at(*in.codec, recv_.data(), in_bytes, in.shape, in.data, dtype, 0, in.where)
          .nonfinite_groups;
  call.wire_bytes = out_bytes;
  return call;
}

}  // namespace taco
