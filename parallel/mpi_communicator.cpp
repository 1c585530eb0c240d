#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

namespace taco {

void fail_mpi(int code, std::string_view call_text, std::string_view group, std::string_view op,
              size_t bytes, const char* file, int line) {
  if (error_rank() < 0) {  // before the entry point named the rank: ask MPI
    int initialized = 0, finalized = 0, world_rank = -1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    set_error_rank(world_rank);
  }
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  const std::string call(call_text.substr(0, call_text.find('(')));
  const std::string detail = std::string(op) + " of " + std::to_string(bytes) + " bytes in group " +
                             std::string(group) + ": " + std::string(text, size_t(len));
  fail_status("MPI", call.c_str(), code, detail, file, line);
}

namespace {

// bf16 travels as 16-bit words; the user-defined ops below give them their meaning.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::bf16:
      return MPI_UINT16_T;
    case DType::u8:
      return MPI_BYTE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

// inout[i] = bf16(float(in[i]) + float(inout[i])): one fp32 add, one round to nearest even.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

// inout[i] = max(in[i], inout[i]), NaN if either is NaN (a NaN must stay visible, docs/design.md
// §6).
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    if (std::isnan(x) || x > y) b[i] = a[i];
  }
}

struct Bf16Ops {
  MPI_Op sum = MPI_OP_NULL;
  MPI_Op max = MPI_OP_NULL;
};

// Created once per process, after MPI_Init (a communicator exists); MPI_Finalize frees them.
const Bf16Ops& bf16_ops() {
  static const Bf16Ops ops = [] {
    Bf16Ops o;
    TACO_CHECK_MPI(MPI_Op_create(&bf16_sum, /*commute=*/1, &o.sum), "world", "op_create", 0);
    TACO_CHECK_MPI(MPI_Op_create(&bf16_max, /*commute=*/1, &o.max), "world", "op_create", 0);
    return o;
  }();
  return ops;
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  if (t == DType::bf16) return op == ReduceOp::sum ? bf16_ops().sum : bf16_ops().max;
  return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
}

// Largest element count one MPI call takes (its count argument is an int).
constexpr size_t kMaxCount = size_t(INT_MAX);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* at(const void* p, size_t elements, DType t) {
  return static_cast<const char*>(p) + elements * dtype_size(t);
}
char* at(void* p, size_t elements, DType t) {
  return static_cast<char*>(p) + elements * dtype_size(t);
}

// Misuse by the caller (a bug in taco, not bad input): one line naming group, call and value.
[[noreturn]] void fail_usage(const std::string& group, CommOp op, const std::string& what) {
  fail_status("taco", comm_op_name(op), 0, "group " + group + ": " + what, __FILE__, __LINE__);
}

void check_dtype(const std::string& group, CommOp op, DType t, bool reduction) {
  const bool ok =
      reduction ? (t == DType::f32 || t == DType::bf16) : mpi_type(t) != MPI_DATATYPE_NULL;
  if (!ok) {
    fail_usage(group, op,
               std::string("dtype ") + dtype_name(t) + " is not supported (" +
                   (reduction ? "fp32, bf16" : "fp32, bf16, bytes") + ")");
  }
}

void check_chunk_count(const std::string& group, CommOp op, size_t count) {
  if (count > kMaxCount) {
    fail_usage(group, op,
               "chunk of " + std::to_string(count) + " elements exceeds INT_MAX; split the call");
  }
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name) : Communicator(std::move(name)) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  TACO_CHECK(initialized, "MpiCommunicator " + this->name() + " created before MPI_Init");
  TACO_CHECK_MPI(MPI_Comm_dup(comm, &comm_), this->name(), "comm_dup", 0);
  init_from_comm();
}

MpiCommunicator::MpiCommunicator(Adopt, MPI_Comm comm, std::string name)
    : Communicator(std::move(name)), comm_(comm) {
  init_from_comm();
}

void MpiCommunicator::init_from_comm() {
  TACO_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), name(), "set_errhandler", 0);
  TACO_CHECK_MPI(MPI_Comm_rank(comm_, &rank_), name(), "comm_rank", 0);
  TACO_CHECK_MPI(MPI_Comm_size(comm_, &size_), name(), "comm_size", 0);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        std::string name) const {
  MPI_Comm out = MPI_COMM_NULL;
  TACO_CHECK_MPI(MPI_Comm_split(comm_, color, key, &out), this->name(), "comm_split", 0);
  if (out == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(Adopt{}, out, std::move(name)));
}

void MpiCommunicator::check_peer(int peer, const char* what, CommOp op) const {
  if (peer < 0 || peer >= size_) {
    fail_usage(name(), op,
               std::string(what) + " " + std::to_string(peer) + " is not a rank of this group of " +
                   std::to_string(size_));
  }
}

void MpiCommunicator::check_tag(int tag, CommOp op) const {
  if (tag < 0 || tag > 32767) {  // MPI guarantees tags up to 32767 everywhere
    fail_usage(name(), op, "tag " + std::to_string(tag) + " is outside [0, 32767]");
  }
}

// A shorter message than expected is not an MPI error, but it is one here: the two sides disagree
// on the shape (a longer one already failed with MPI_ERR_TRUNCATE).
void MpiCommunicator::check_received(const MPI_Status& status, DType dtype, size_t expected,
                                     int peer, int tag, CommOp op) const {
  int got = 0;
  TACO_CHECK_MPI(MPI_Get_count(&status, mpi_type(dtype), &got), name(), comm_op_name(op), 0);
  if (size_t(got) != expected) {
    fail_usage(name(), op,
               "expected " + std::to_string(expected) + " elements from peer " +
                   std::to_string(peer) + " (tag " + std::to_string(tag) + "), got " +
                   std::to_string(got));
  }
}

void MpiCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op, Stream) {
  check_dtype(name(), CommOp::all_reduce, dtype, true);
  const auto t0 = std::chrono::steady_clock::now();
  const bool in_place = send == recv;
  for (size_t done = 0; done < count; done += kMaxCount) {
    const size_t n = std::min(kMaxCount, count - done);
    const void* src = in_place ? MPI_IN_PLACE : at(send, done, dtype);
    TACO_CHECK_MPI(MPI_Allreduce(src, at(recv, done, dtype), int(n), mpi_type(dtype),
                                 mpi_op(dtype, op), comm_),
                   name(), "all_reduce", n * dtype_size(dtype));
  }
  record(CommOp::all_reduce, count * dtype_size(dtype), seconds_since(t0));
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                     ReduceOp op, Stream) {
  check_dtype(name(), CommOp::reduce_scatter, dtype, true);
  check_chunk_count(name(), CommOp::reduce_scatter, recv_count);
  if (send == recv) fail_usage(name(), CommOp::reduce_scatter, "in place is not supported");
  const size_t bytes = size_t(size_) * recv_count * dtype_size(dtype);
  const auto t0 = std::chrono::steady_clock::now();
  if (recv_count > 0) {
    // MPI_Reduce_scatter with equal counts rather than MPI_Reduce_scatter_block: the same
    // result, but OpenMPI 4.1 runs the block variant 17-33x slower (2 ranks, 1-16 MB fp32,
    // measured on the development box; tools/bench/RESULTS.md).
    const std::vector<int> counts(static_cast<size_t>(size_), static_cast<int>(recv_count));
    TACO_CHECK_MPI(
        MPI_Reduce_scatter(send, recv, counts.data(), mpi_type(dtype), mpi_op(dtype, op), comm_),
        name(), "reduce_scatter", bytes);
  }
  record(CommOp::reduce_scatter, bytes, seconds_since(t0));
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                                 Stream) {
  check_dtype(name(), CommOp::all_gather, dtype, false);
  check_chunk_count(name(), CommOp::all_gather, send_count);
  const size_t bytes = size_t(size_) * send_count * dtype_size(dtype);
  // In place when this rank's chunk already sits at its slot of the output (NCCL's convention).
  const bool in_place = send == at(recv, size_t(rank_) * send_count, dtype);
  const auto t0 = std::chrono::steady_clock::now();
  if (send_count > 0) {
    const MPI_Datatype t = mpi_type(dtype);
    TACO_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : send, int(send_count), t, recv,
                                 int(send_count), t, comm_),
                   name(), "all_gather", bytes);
  }
  record(CommOp::all_gather, bytes, seconds_since(t0));
}

void MpiCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream) {
  check_dtype(name(), CommOp::all_to_all, dtype, false);
  check_chunk_count(name(), CommOp::all_to_all, count);
  if (send == recv) fail_usage(name(), CommOp::all_to_all, "in place is not supported");
  const size_t bytes = size_t(size_) * count * dtype_size(dtype);
  const auto t0 = std::chrono::steady_clock::now();
  if (count > 0) {
    const MPI_Datatype t = mpi_type(dtype);
    TACO_CHECK_MPI(MPI_Alltoall(send, int(count), t, recv, int(count), t, comm_), name(),
                   "all_to_all", bytes);
  }
  record(CommOp::all_to_all, bytes, seconds_since(t0));
}

void MpiCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag, Stream) {
  check_dtype(name(), CommOp::send, dtype, false);
  check_peer(peer, "peer", CommOp::send);
  check_tag(tag, CommOp::send);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < count; done += kMaxCount) {
    const size_t n = std::min(kMaxCount, count - done);
    TACO_CHECK_MPI(MPI_Send(at(buf, done, dtype), int(n), mpi_type(dtype), peer, tag, comm_),
                   name(), "send to " + std::to_string(peer), n * dtype_size(dtype));
  }
  record(CommOp::send, count * dtype_size(dtype), seconds_since(t0));
}

void MpiCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag, Stream) {
  check_dtype(name(), CommOp::recv, dtype, false);
  check_peer(peer, "peer", CommOp::recv);
  check_tag(tag, CommOp::recv);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < count; done += kMaxCount) {
    const size_t n = std::min(kMaxCount, count - done);
    const std::string op = "recv from " + std::to_string(peer);
    MPI_Status status;
    TACO_CHECK_MPI(
        MPI_Recv(at(buf, done, dtype), int(n), mpi_type(dtype), peer, tag, comm_, &status), name(),
        op, n * dtype_size(dtype));
    check_received(status, dtype, n, peer, tag, CommOp::recv);
  }
  record(CommOp::recv, count * dtype_size(dtype), seconds_since(t0));
}

void MpiCommunicator::send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf,
                                size_t recv_count, int src, DType dtype, int tag, Stream) {
  check_dtype(name(), CommOp::send_recv, dtype, false);
  check_tag(tag, CommOp::send_recv);
  check_chunk_count(name(), CommOp::send_recv, std::max(send_count, recv_count));
  if (send_count > 0) check_peer(dst, "destination", CommOp::send_recv);
  if (recv_count > 0) check_peer(src, "source", CommOp::send_recv);
  const MPI_Datatype t = mpi_type(dtype);
  const size_t es = dtype_size(dtype);
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Status status;
  TACO_CHECK_MPI(MPI_Sendrecv(send_buf, int(send_count), t, send_count > 0 ? dst : MPI_PROC_NULL,
                              tag, recv_buf, int(recv_count), t,
                              recv_count > 0 ? src : MPI_PROC_NULL, tag, comm_, &status),
                 name(), "send_recv", (send_count + recv_count) * es);
  if (recv_count > 0) check_received(status, dtype, recv_count, src, tag, CommOp::send_recv);
  record(CommOp::send_recv, send_count * es, seconds_since(t0));
}

void MpiCommunicator::broadcast(void* buf, size_t count, DType dtype, int root, Stream) {
  check_dtype(name(), CommOp::broadcast, dtype, false);
  check_peer(root, "root", CommOp::broadcast);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t done = 0; done < count; done += kMaxCount) {
    const size_t n = std::min(kMaxCount, count - done);
    TACO_CHECK_MPI(MPI_Bcast(at(buf, done, dtype), int(n), mpi_type(dtype), root, comm_), name(),
                   "broadcast", n * dtype_size(dtype));
  }
  record(CommOp::broadcast, count * dtype_size(dtype), seconds_since(t0));
}

void MpiCommunicator::barrier(Stream) {
  const auto t0 = std::chrono::steady_clock::now();
  TACO_CHECK_MPI(MPI_Barrier(comm_), name(), "barrier", 0);
  record(CommOp::barrier, 0, seconds_since(t0));
}

// MPI_DOUBLE with MPI's own SUM/MAX: the exact sum a raw MPI_Allreduce of doubles gives.
void MpiCommunicator::all_reduce_values(double* values, size_t count, ReduceOp op) {
  check_chunk_count(name(), CommOp::all_reduce, count);
  const auto t0 = std::chrono::steady_clock::now();
  if (count > 0) {
    TACO_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, values, int(count), MPI_DOUBLE,
                                 op == ReduceOp::sum ? MPI_SUM : MPI_MAX, comm_),
                   name(), "all_reduce", count * sizeof(double));
  }
  record(CommOp::all_reduce, count * sizeof(double), seconds_since(t0));
}

}  // namespace taco
