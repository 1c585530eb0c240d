#include "parallel/staged_communicator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "engine/runtime/device.h"
#include "kernels/check.h"
#include "parallel/staged_sum.h"
#include "parallel/staging_engine.h"

namespace taco {

namespace {
using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

char* at(void* p, size_t offset) { return static_cast<char*>(p) + offset; }
const char* at(const void* p, size_t offset) { return static_cast<const char*>(p) + offset; }

bool summable(DType dtype, ReduceOp op) {
  return op == ReduceOp::sum && (dtype == DType::f32 || dtype == DType::bf16);
}

// Host slots of the engine: 0 the staged input, 1 the staged output, 2 the two-shot gather.
// Device slots: 0 the two-shot reduction's p received copies, 1 and 2 the calibration scratch.
constexpr int kHostIn = 0, kHostOut = 1, kHostGather = 2;
constexpr int kDeviceSlots = 0, kScratchIn = 1, kScratchOut = 2;
}  // namespace

const char* staged_reduce_name(StagedReduce mode) {
  switch (mode) {
    case StagedReduce::automatic:
      return "auto";
    case StagedReduce::native:
      return "native";
    case StagedReduce::two_shot:
      return "two_shot";
  }
  return "?";
}

StagedReduce staged_reduce_from_name(const std::string& name, const std::string& source) {
  if (name == "auto") return StagedReduce::automatic;
  if (name == "native") return StagedReduce::native;
  if (name == "two_shot") return StagedReduce::two_shot;
  throw UserError(source + ": parallel.staged_reduce: unknown value '" + name +
                  "'; expected one of auto, native, two_shot");
}

HostStagedCommunicator::HostStagedCommunicator(Communicator& host, StagedReduce reduce,
                                               size_t piece_bytes)
    : Communicator(host.name()),
      host_(host),
      reduce_(reduce),
      piece_bytes_(piece_bytes),
      engine_(std::make_unique<StagingEngine>()) {
  set_piece_bytes(piece_bytes);
}

HostStagedCommunicator::~HostStagedCommunicator() = default;

void HostStagedCommunicator::set_piece_bytes(size_t bytes) {
  TACO_CHECK(bytes > 0, "group " + name() + ": staging piece size 0");
  piece_bytes_ = bytes;
}

const char* HostStagedCommunicator::reduce_path(CommOp op, DType dtype, size_t bytes) const {
  if (reduce_ != StagedReduce::automatic) return staged_reduce_name(reduce_);
  const auto it = two_shot_.find({op, dtype, staging::size_class(bytes)});
  if (it == two_shot_.end()) return "unmeasured";
  return it->second ? "two_shot" : "native";
}

// --- serial staging (host buffers, mixed host/device calls, point-to-point) ----------------

const void* HostStagedCommunicator::in(const void* p, size_t bytes, int slot, Stream stream) {
  if (!is_device_pointer(p)) return p;
  void* h = engine_->host(slot, bytes);
  engine_->to_host(h, p, bytes, stream);
  return h;
}

void* HostStagedCommunicator::out(void* p, size_t bytes, int slot) {
  return is_device_pointer(p) ? engine_->host(slot, bytes) : p;
}

void HostStagedCommunicator::copy_back(void* device, const void* host, size_t bytes) {
  if (device == host || bytes == 0) return;
  engine_->to_device(device, host, bytes);
}

// --- pipelined device paths ------------------------------------------------------------------

std::function<void(size_t)> HostStagedCommunicator::pairwise(const staging::Plan& plan,
                                                             const void* host_down, void* host_up) {
  return [this, &plan, host_down, host_up](size_t j) {
    const int p = size(), me = rank();
    const staging::Piece& piece = plan.pieces[j];
    // In step s send to me + s and receive from me - s, so each pair meets once per step.
    for (int s = 1; s < p; ++s) {
      const int dst = (me + s) % p, src = (me - s + p) % p;
      const staging::Range& out = piece.send[size_t(dst)];
      const staging::Range& in = piece.recv[size_t(src)];
      host_.send_recv(at(host_down, out.offset), out.bytes, dst, at(host_up, in.offset), in.bytes,
                      src, DType::u8, kStagingTag, nullptr);
    }
  };
}

double HostStagedCommunicator::exchange(const staging::Plan& plan, const void* dev_src,
                                        void* host_down, void* dev_dst, void* host_up,
                                        Stream after) {
  return engine_->run(plan, dev_src, host_down, dev_dst, host_up, after,
                      pairwise(plan, host_down, host_up));
}

double HostStagedCommunicator::device_all_to_all(const void* send, void* recv, size_t count,
                                                 DType dtype, Stream stream) {
  const int p = size(), me = rank();
  const size_t chunk = count * dtype_size(dtype), bytes = chunk * size_t(p);
  std::vector<staging::Range> ranges(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) ranges[size_t(q)] = {size_t(q) * chunk, chunk};
  staging::Plan plan = staging::plan_exchange(ranges, ranges, me, piece_bytes_);
  plan.local.push_back({size_t(me) * chunk, size_t(me) * chunk, chunk});
  return exchange(plan, send, engine_->host(kHostIn, bytes), recv, engine_->host(kHostOut, bytes),
                  stream);
}

double HostStagedCommunicator::device_all_gather(const void* send, void* recv, size_t send_count,
                                                 DType dtype, Stream stream) {
  const int p = size(), me = rank();
  const size_t chunk = send_count * dtype_size(dtype), bytes = chunk * size_t(p);
  // The source is `send` itself (offset 0), sent to every peer; in place it already sits at its
  // slot of the output, else one device copy puts it there.
  std::vector<staging::Range> from(static_cast<size_t>(p), staging::Range{0, chunk}),
      to(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) to[size_t(q)] = {size_t(q) * chunk, chunk};
  staging::Plan plan = staging::plan_exchange(from, to, me, piece_bytes_);
  if (send != at(recv, size_t(me) * chunk)) plan.local.push_back({0, size_t(me) * chunk, chunk});
  return exchange(plan, send, engine_->host(kHostIn, chunk), recv, engine_->host(kHostOut, bytes),
                  stream);
}

double HostStagedCommunicator::device_all_reduce(const void* send, void* recv, size_t count,
                                                 DType dtype, ReduceOp op, bool two_shot,
                                                 Stream stream) {
  const size_t es = dtype_size(dtype), bytes = count * es;
  if (!two_shot) {
    // Piece by piece in place on one host buffer: down, MPI_Allreduce, up.
    void* h = engine_->host(kHostIn, bytes);
    const staging::Plan plan = staging::plan_flat(bytes, piece_bytes_, true, true);
    auto wire = [&](size_t j) {
      const staging::Piece& piece = plan.pieces[j];
      void* x = at(h, piece.begin);
      host_.all_reduce(x, x, (piece.end - piece.begin) / es, dtype, op, nullptr);
    };
    return engine_->run(plan, send, h, recv, h, stream, wire);
  }
  const int p = size(), me = rank();
  const std::vector<staging::Range> chunks = staging::even_chunks(count, es, p);
  const staging::Range mine = chunks[size_t(me)];
  // Slot q of the device (and host) receive buffer holds rank q's copy of this rank's chunk.
  const size_t stride =
      (chunks[0].bytes + staging::kStageAlign - 1) / staging::kStageAlign * staging::kStageAlign;
  void* slots = engine_->device(kDeviceSlots, stride * size_t(p));
  std::vector<staging::Range> to_slots(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) to_slots[size_t(q)] = {size_t(q) * stride, mine.bytes};
  // Shot one: chunk q of the input to rank q, rank q's copy of this chunk into slot q. Shot two:
  // the reduced chunk to every peer, theirs into their places. Both cut the same bounds (the
  // same ranges, longest first), so piece j of shot two is slice j of the sum.
  const staging::Plan one = staging::plan_exchange(chunks, to_slots, me, piece_bytes_);
  const std::vector<staging::Range> reduced(static_cast<size_t>(p), mine);
  const staging::Plan two = staging::plan_exchange(reduced, chunks, me, piece_bytes_);
  StagingEngine::Stage first{
      &one, send, engine_->host(kHostIn, bytes), slots, engine_->host(kHostOut, stride * size_t(p)),
      {}};
  void* gathered = engine_->host(kHostGather, bytes);
  StagingEngine::Stage second{&two, recv, gathered, recv, gathered, {}};
  first.wire = pairwise(one, first.host_down, const_cast<void*>(first.host_up));
  second.wire = pairwise(two, gathered, gathered);
  // Between the shots, per piece: the sum of slice j of this rank's chunk into its place in
  // `recv` (in place: over the input's chunk, which shot one never reads).
  auto sum_slice = [&](size_t j, Stream up) {
    const size_t lo = std::min(one.pieces[j].begin, mine.bytes);
    const size_t hi = std::min(one.pieces[j].end, mine.bytes);
    if (hi == lo) return;
    if constexpr (built_with_cuda())
      staged_sum_async(at(send, mine.offset + lo), at(slots, lo), stride / es, p, me,
                       at(recv, mine.offset + lo), (hi - lo) / es, dtype, up);
  };
  return engine_->run_chained(first, second, stream, sum_slice);
}

double HostStagedCommunicator::device_reduce_scatter(const void* send, void* recv,
                                                     size_t recv_count, DType dtype, ReduceOp op,
                                                     bool two_shot, Stream stream) {
  const int p = size(), me = rank();
  const size_t es = dtype_size(dtype), chunk = recv_count * es, bytes = chunk * size_t(p);
  if (!two_shot) {
    // Each piece's slices of the p chunks packed for MPI_Reduce_scatter, its result slice up.
    void* hs = engine_->host(kHostIn, bytes);
    void* hr = engine_->host(kHostOut, chunk);
    const staging::Plan plan = staging::plan_packed_chunks(chunk, p, piece_bytes_);
    auto wire = [&](size_t j) {
      const staging::Piece& piece = plan.pieces[j];
      host_.reduce_scatter(at(hs, size_t(p) * piece.begin), at(hr, piece.begin),
                           (piece.end - piece.begin) / es, dtype, op, nullptr);
    };
    return engine_->run(plan, send, hs, recv, hr, stream, wire);
  }
  std::vector<staging::Range> ranges(static_cast<size_t>(p));
  for (int q = 0; q < p; ++q) ranges[size_t(q)] = {size_t(q) * chunk, chunk};
  void* slots = engine_->device(kDeviceSlots, bytes);
  const double waited =
      exchange(staging::plan_exchange(ranges, ranges, me, piece_bytes_), send,
               engine_->host(kHostIn, bytes), slots, engine_->host(kHostOut, bytes), stream);
  const Stream up = engine_->up_stream();
  if constexpr (built_with_cuda())
    staged_sum_async(at(send, size_t(me) * chunk), slots, recv_count, p, me, recv, recv_count,
                     dtype, up);
  wait_for_stream(up);  // the reduction: compute, not staging
  return waited;
}

// --- the choice of path ----------------------------------------------------------------------

bool HostStagedCommunicator::use_two_shot(CommOp op, DType dtype, size_t count, ReduceOp rop,
                                          Stream stream) {
  if (!summable(dtype, rop) || count == 0) return false;
  if (reduce_ != StagedReduce::automatic) return reduce_ == StagedReduce::two_shot;
  if (size() == 1) return false;
  const size_t bytes = count * dtype_size(dtype) * (op == CommOp::reduce_scatter ? size() : 1);
  const auto key = std::make_tuple(op, dtype, staging::size_class(bytes));
  const auto it = two_shot_.find(key);
  if (it != two_shot_.end()) return it->second;
  const bool two = calibrate(op, dtype, count, stream);
  two_shot_[key] = two;
  return two;
}

bool HostStagedCommunicator::calibrate(CommOp op, DType dtype, size_t count, Stream stream) {
  const bool reduce = op == CommOp::all_reduce;
  const size_t es = dtype_size(dtype);
  const size_t in_bytes = count * es * (reduce ? 1 : size_t(size())), out_bytes = count * es;
  void* in = engine_->device(kScratchIn, in_bytes);
  void* out = engine_->device(kScratchOut, out_bytes);
  // Any finite values: 0x3c3c is bf16 0.0115 (0x3c3c3c3c the same in fp32); out of place, so the
  // input never grows.
  engine_->fill(in, 0x3c, in_bytes);
  float ms[2] = {0, 0};
  for (int two = 0; two < 2; ++two) {
    auto call = [&] {
      if (reduce)
        device_all_reduce(in, out, count, dtype, ReduceOp::sum, two == 1, stream);
      else
        device_reduce_scatter(in, out, count, dtype, ReduceOp::sum, two == 1, stream);
    };
    call();  // warm-up: pinned buffers, scratch slots, first-touch
    host_.barrier(nullptr);
    const auto t0 = clock_type::now();
    for (int i = 0; i < kCalibrationReps; ++i) call();
    ms[two] = float(seconds_since(t0) * 1e3 / kCalibrationReps);
  }
  host_.all_reduce(ms, ms, 2, DType::f32, ReduceOp::max, nullptr);  // the slowest rank's times
  engine_->release(kScratchIn);
  engine_->release(kScratchOut);
  const bool two = ms[1] < ms[0];
  if (rank() == 0) {
    spdlog::info(
        "staged sum, group {} ({} ranks): {} {} of {} bytes (size class 2^{}): native {:.3f} ms, "
        "two_shot {:.3f} ms -> {}",
        name(), size(), comm_op_name(op), dtype_name(dtype), in_bytes,
        staging::size_class(in_bytes), ms[0], ms[1], two ? "two_shot" : "native");
  }
  return two;
}

// --- the collectives -------------------------------------------------------------------------

void HostStagedCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  double staged = 0, calibrating = 0;  // the first call of a size class measures: not counted
  if (size() == 1 && is_device_pointer(send) && is_device_pointer(recv)) {
    // A group of one: the reduction is the input; nothing crosses the link.
    TACO_CHECK(dtype == DType::f32 || dtype == DType::bf16,
               "group " + name() + ": all_reduce of dtype " + dtype_name(dtype) +
                   " is not supported (fp32, bf16)");
    engine_->copy_on_device(recv, send, bytes, stream);
  } else if (is_device_pointer(send) && is_device_pointer(recv)) {
    const auto tc = clock_type::now();
    const bool two = use_two_shot(CommOp::all_reduce, dtype, count, op, stream);
    calibrating = seconds_since(tc);
    staged = device_all_reduce(send, recv, count, dtype, op, two, stream);
  } else {
    const void* hs = in(send, bytes, kHostIn, stream);
    void* hr = send == recv ? const_cast<void*>(hs) : out(recv, bytes, kHostOut);
    host_.all_reduce(hs, hr, count, dtype, op, stream);
    copy_back(recv, hr, bytes);
  }
  record(CommOp::all_reduce, bytes, seconds_since(t0) - calibrating, staged);
}

void HostStagedCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                            DType dtype, ReduceOp op, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t out_bytes = recv_count * dtype_size(dtype), in_bytes = out_bytes * size_t(size());
  double staged = 0, calibrating = 0;
  if (is_device_pointer(send) && is_device_pointer(recv)) {
    TACO_CHECK(send != recv, "group " + name() + ": reduce_scatter in place is not supported");
    const auto tc = clock_type::now();
    const bool two = use_two_shot(CommOp::reduce_scatter, dtype, recv_count, op, stream);
    calibrating = seconds_since(tc);
    staged = device_reduce_scatter(send, recv, recv_count, dtype, op, two, stream);
  } else {
    const void* hs = in(send, in_bytes, kHostIn, stream);
    void* hr = out(recv, out_bytes, kHostOut);
    host_.reduce_scatter(hs, hr, recv_count, dtype, op, stream);
    copy_back(recv, hr, out_bytes);
  }
  record(CommOp::reduce_scatter, in_bytes, seconds_since(t0) - calibrating, staged);
}

void HostStagedCommunicator::all_gather(const void* send, void* recv, size_t send_count,
                                        DType dtype, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t in_bytes = send_count * dtype_size(dtype), out_bytes = in_bytes * size_t(size());
  double staged = 0;
  if (is_device_pointer(send) && is_device_pointer(recv)) {
    staged = device_all_gather(send, recv, send_count, dtype, stream);
  } else {
    void* hr = out(recv, out_bytes, kHostOut);
    // In place (send = recv + rank * count): stage the whole output, the input inside it.
    const bool in_place = static_cast<const char*>(send) ==
                          static_cast<const char*>(recv) + size_t(rank()) * in_bytes;
    const void* hs = nullptr;
    if (in_place && hr != recv) {
      hs = static_cast<char*>(hr) + size_t(rank()) * in_bytes;
      const void* staged_in = in(send, in_bytes, kHostIn, stream);
      std::memcpy(const_cast<void*>(hs), staged_in, in_bytes);
    } else {
      hs = in(send, in_bytes, kHostIn, stream);
    }
    host_.all_gather(hs, hr, send_count, dtype, stream);
    copy_back(recv, hr, out_bytes);
  }
  record(CommOp::all_gather, out_bytes, seconds_since(t0), staged);
}

void HostStagedCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                                        Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype) * size_t(size());
  double staged = 0;
  if (is_device_pointer(send) && is_device_pointer(recv)) {
    TACO_CHECK(send != recv, "group " + name() + ": all_to_all in place is not supported");
    staged = device_all_to_all(send, recv, count, dtype, stream);
  } else {
    const void* hs = in(send, bytes, kHostIn, stream);
    void* hr = out(recv, bytes, kHostOut);
    host_.all_to_all(hs, hr, count, dtype, stream);
    copy_back(recv, hr, bytes);
  }
  record(CommOp::all_to_all, bytes, seconds_since(t0), staged);
}

void HostStagedCommunicator::send(const void* buf, size_t count, DType dtype, int peer, int tag,
                                  Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  host_.send(in(buf, bytes, kHostIn, stream), count, dtype, peer, tag, stream);
  record(CommOp::send, bytes, seconds_since(t0));
}

void HostStagedCommunicator::recv(void* buf, size_t count, DType dtype, int peer, int tag,
                                  Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  void* h = out(buf, bytes, kHostOut);
  host_.recv(h, count, dtype, peer, tag, stream);
  copy_back(buf, h, bytes);
  record(CommOp::recv, bytes, seconds_since(t0));
}

void HostStagedCommunicator::send_recv(const void* send_buf, size_t send_count, int dst,
                                       void* recv_buf, size_t recv_count, int src, DType dtype,
                                       int tag, Stream stream) {
  const auto t0 = clock_type::now();
  const size_t sb = send_count * dtype_size(dtype), rb = recv_count * dtype_size(dtype);
  const void* hs = send_count > 0 ? in(send_buf, sb, kHostIn, stream) : send_buf;
  void* hr = recv_count > 0 ? out(recv_buf, rb, kHostOut) : recv_buf;
  host_.send_recv(hs, send_count, dst, hr, recv_count, src, dtype, tag, stream);
  if (recv_count > 0) copy_back(recv_buf, hr, rb);
  record(CommOp::send_recv, sb, seconds_since(t0));
}

void HostStagedCommunicator::broadcast(void* buf, size_t count, DType dtype, int root,
                                       Stream stream) {
  const auto t0 = clock_type::now();
  const size_t bytes = count * dtype_size(dtype);
  void* h = const_cast<void*>(in(buf, bytes, kHostIn, stream));
  host_.broadcast(h, count, dtype, root, stream);
  copy_back(buf, h, bytes);
  record(CommOp::broadcast, bytes, seconds_since(t0));
}

void HostStagedCommunicator::barrier(Stream stream) {
  const auto t0 = clock_type::now();
  wait_for_stream(stream);  // work queued before the barrier is done when it returns
  host_.barrier(stream);
  record(CommOp::barrier, 0, seconds_since(t0));
}

void HostStagedCommunicator::all_reduce_values(double* values, size_t count, ReduceOp op) {
  const auto t0 = clock_type::now();
  host_.all_reduce_values(values, count, op);
  record(CommOp::all_reduce, count * sizeof(double), seconds_since(t0));
}

}  // namespace taco
