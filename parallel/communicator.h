// Communicator: the collectives and point-to-point calls of one process group (docs/design.md
// §2-§3).
//
// Backends: MpiCommunicator (host memory; parallel/mpi_communicator.h), later an NCCL one for
// device memory and a device-staged MPI path. Everything above (compressed collectives, TP
// mappings, pipeline schedules, DP gradient sync) talks to this interface only.
//
// Conventions, the same as NCCL's so both backends read alike:
//   - counts are elements of `dtype`, never bytes; "equal chunks" collectives take the count of
//     ONE rank's chunk, and the full buffer holds size() chunks in group-rank order;
//   - a call with send == recv is in place (all_reduce: any; all_gather: send must be
//     recv + rank() * count; reduce_scatter and all_to_all: not supported in place);
//   - every call takes the stream it is ordered on. Host-memory MPI ignores it; NCCL enqueues
//     on it and returns before the data has moved.
//   - peers and roots are ranks in THIS group (0 .. size()-1), not world ranks.
// Dtypes: f32 and bf16 for reductions (bf16 is summed in fp32 and rounded back to nearest even
// after every pairwise combine); f32, bf16 and u8 (raw bytes) for data movement.
// Errors: a failing backend call throws taco::Error (exit code 1) naming rank, call, bytes and
// group; misuse (bad dtype, peer out of range) throws taco::Error through TACO_CHECK.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace taco {

enum class ReduceOp : uint8_t { sum, max };

enum class CommOp : uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_to_all,
  send,
  recv,
  send_recv,
  broadcast,
  barrier,
};
inline constexpr size_t kCommOpCount = size_t(CommOp::barrier) + 1;

inline const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::send_recv:
      return "send_recv";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::barrier:
      return "barrier";
  }
  return "?";
}

inline const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

// What one kind of call cost since the last reset.
//   bytes:      the logical message size, as nccl-tests' "size" column: the whole buffer of an
//               all_reduce/broadcast/p2p message, all size() chunks of a reduce_scatter input,
//               all_gather output or all_to_all buffer; the sent half of a send_recv;
//   bytes_sent: what this rank puts on the wire under a bandwidth-optimal algorithm, i.e.
//               bytes * the nccl-tests bus factor: all_reduce 2(p-1)/p; reduce_scatter,
//               all_gather, all_to_all (p-1)/p; broadcast 1 (pipelined chain); send all of
//               it; recv nothing. Summed over a group's ranks it is the group's traffic, and it
//               is 0 in a group of one;
//   seconds:    host wall time inside the calls (for MPI this includes waiting for late
//               peers; for NCCL only the enqueue, the backend documents what it measures);
//   staging_seconds: the part of `seconds` a host-staged backend spent waiting for its
//               device <-> host copies (the copies that did not hide behind a transfer), so a
//               step splits into wire / staging / codec / compute; 0 for MPI on host memory
//               and for NCCL (HostStagedCommunicator documents what it counts).
struct CommOpStats {
  int64_t calls = 0;
  int64_t bytes = 0;
  int64_t bytes_sent = 0;
  double seconds = 0;
  double staging_seconds = 0;

  CommOpStats& operator+=(const CommOpStats& o) {
    calls += o.calls;
    bytes += o.bytes;
    bytes_sent += o.bytes_sent;
    seconds += o.seconds;
    staging_seconds += o.staging_seconds;
    return *this;
  }
};

struct CommStats {
  std::array<CommOpStats, kCommOpCount> per_op{};

  const CommOpStats& operator[](CommOp op) const { return per_op[size_t(op)]; }
  CommOpStats total() const {  // summed over every kind of call
    CommOpStats t;
    for (const auto& s : per_op) t += s;
    return t;
  }
  void reset() { per_op = {}; }
};

// Bytes this rank sends for a call of `op` with logical size `bytes` in a group of `size`
// ranks, under a bandwidth-optimal algorithm (see CommOpStats::bytes_sent).
inline int64_t bytes_sent_estimate(CommOp op, size_t bytes, int size) {
  const int64_t b = int64_t(bytes), p = size;
  if (p <= 1) return 0;
  switch (op) {
    case CommOp::all_reduce:
      return 2 * (p - 1) * b / p;
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all:
      return (p - 1) * b / p;
    case CommOp::send:
    case CommOp::send_recv:
    case CommOp::broadcast:
      return b;
    case CommOp::recv:
    case CommOp::barrier:
      return 0;
  }
  return 0;
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name for messages and reports: "world", "tp", "pp", "dp", "embedding", ...
  const std::string& name() const { return name_; }
  // The backend, for messages and reports: "mpi", "nccl".
  virtual const char* backend() const = 0;
  // True when a call only enqueues its work on the stream and returns at once (NCCL); false
  // when it returns after the data has moved (MPI, host staging). Callers pipeline pieces of a
  // message over an enqueueing communicator; a blocking one pipelines inside its own calls.
  virtual bool enqueues() const { return false; }

  // recv[i] = op over ranks of send[i], i < count, on every rank.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Stream stream) = 0;
  // send: size() * recv_count elements, chunk r for rank r; recv: recv_count elements,
  // recv = op over ranks of their chunk rank().
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op, Stream stream) = 0;
  // send: send_count elements; recv: size() * send_count elements, chunk r from rank r.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                          Stream stream) = 0;
  // send and recv: size() * count elements; chunk r of send goes to rank r, chunk r of recv
  // comes from rank r.
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype,
                          Stream stream) = 0;
  // Point-to-point with a tag in [0, 32767] (NCCL ignores tags: order the calls instead).
  virtual void send(const void* buf, size_t count, DType dtype, int peer, int tag,
                    Stream stream) = 0;
  virtual void recv(void* buf, size_t count, DType dtype, int peer, int tag, Stream stream) = 0;
  // Sends to one peer and receives from another (possibly the same) without deadlocking, the
  // way a ring step or a 1F1B "send forward, receive backward" needs. Either side may be
  // skipped with count 0.
  virtual void send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf,
                         size_t recv_count, int src, DType dtype, int tag, Stream stream) = 0;
  // buf (count elements) of rank `root` is copied to every rank.
  virtual void broadcast(void* buf, size_t count, DType dtype, int root, Stream stream) = 0;
  virtual void barrier(Stream stream) = 0;
  // values[i] = op over ranks of values[i], i < count, in place, in double, for the few exact
  // host numbers a step agrees on (loss sums, squared norms, flags, error codes and ranks: an
  // int is exact in a double). Host memory on every backend, whatever buffers its other calls
  // move, and blocking: the result is there on return. Counted as an all_reduce of f64 values.
  // Backends that do not implement it throw taco::Error.
  virtual void all_reduce_values(double* values, size_t count, ReduceOp op);

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_.reset(); }

 protected:
  explicit Communicator(std::string name) : name_(std::move(name)) {}

  // Adds one call of `op` moving `bytes` (logical size, see CommOpStats) to the counters.
  void record(CommOp op, size_t bytes, double seconds, double staging_seconds = 0) {
    CommOpStats& s = stats_.per_op[size_t(op)];
    s.calls += 1;
    s.bytes += int64_t(bytes);
    s.bytes_sent += bytes_sent_estimate(op, bytes, size());
    s.seconds += seconds;
    s.staging_seconds += staging_seconds;
  }

 private:
  std::string name_;
  CommStats stats_;
};

}  // namespace taco
