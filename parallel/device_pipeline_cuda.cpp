// parallel/device_pipeline.h (CUDA builds only).
#include "parallel/device_pipeline.h"

#include <algorithm>
#include <cstring>

#include "engine/runtime/cuda_check.h"
#include "kernels/check.h"
#include "parallel/nccl_communicator.h"  // wait_for_communicator

namespace taco {
namespace {
// words_: two int64 counters and three double error sums, then the uint32 status words.
constexpr size_t kCounterBytes = 2 * sizeof(int64_t) + 3 * sizeof(double);
}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

uint8_t* DeviceBuffer::get(size_t bytes) {
  bytes = std::max<size_t>(bytes, 16);
  if (bytes > bytes_) {
    if (ptr_) TACO_CHECK_CUDA(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
    TACO_CHECK_CUDA(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  return static_cast<uint8_t*>(ptr_);
}

std::vector<uint8_t> download_from_device(const void* device, size_t bytes, cudaStream_t stream) {
  std::vector<uint8_t> host(bytes);
  if (bytes > 0) {
    TACO_CHECK_CUDA(cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDeviceToHost, stream));
    TACO_CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  return host;
}

DevicePipeline::DevicePipeline(Communicator& comm) : comm_(comm) {
  // Non-blocking: the communication stream must not wait on the legacy default stream, which is
  // the trainer's compute stream, except through the events below.
  TACO_CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  TACO_CHECK_CUDA(cudaStreamCreateWithFlags(&beside_stream_, cudaStreamNonBlocking));
}

DevicePipeline::~DevicePipeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timing_events_) cudaEventDestroy(e);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
  if (beside_stream_) cudaStreamDestroy(beside_stream_);
}

void DevicePipeline::begin(cudaStream_t stream, size_t status_words, bool timing) {
  stream_ = stream;
  timing_ = timing;
  timed_pairs_ = 0;
  decodes_.clear();
  status_capacity_ = status_words;
  const size_t bytes = kCounterBytes + status_words * sizeof(uint32_t);
  uint8_t* w = words_.get(bytes);
  counters_ = reinterpret_cast<int64_t*>(w);
  status_ = reinterpret_cast<uint32_t*>(w + kCounterBytes);
  TACO_CHECK_CUDA(cudaMemsetAsync(w, 0, bytes, stream_));
}

uint32_t* DevicePipeline::status_for(const DecodeOp& op) {
  TACO_CHECK(decodes_.size() < status_capacity_, "more decodes than planned status words");
  decodes_.push_back(op);
  return status_ + (decodes_.size() - 1);
}

cudaEvent_t DevicePipeline::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e;
    TACO_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  return events_[i];
}

cudaEvent_t DevicePipeline::timing_event(size_t i) {
  while (timing_events_.size() <= i) {
    cudaEvent_t e;
    TACO_CHECK_CUDA(cudaEventCreate(&e));
    timing_events_.push_back(e);
  }
  return timing_events_[i];
}

void DevicePipeline::run(int pieces, const std::vector<Stage>& stages) {
  const int T = int(stages.size());
  // The inputs, and any earlier collective on the same communicator (NCCL must not run two at
  // once), are queued on the caller's stream.
  const cudaEvent_t start = event(0);
  TACO_CHECK_CUDA(cudaEventRecord(start, stream_));
  TACO_CHECK_CUDA(cudaStreamWaitEvent(comm_stream_, start, 0));
  auto done = [&](int j, int t) { return event(1 + size_t(j) * size_t(T) + size_t(t)); };
  auto stream_of = [&](const Stage& st) {
    return st.beside ? beside_stream_ : st.on_comm_stream ? comm_stream_ : stream_;
  };
  for (int step = 0; step < pieces + T - 1; ++step) {
    for (int t = 0; t < T; ++t) {
      const int j = step - t;
      if (j < 0 || j >= pieces) continue;
      const Stage& stage = stages[size_t(t)];
      if (stage.beside && !stage.run) continue;  // no work: nothing waits for it
      const cudaStream_t s = stream_of(stage);
      int before = t - 1;  // the stage this one follows: the nearest one not beside
      while (before >= 0 && stages[size_t(before)].beside) --before;
      if (before >= 0 && stream_of(stages[size_t(before)]) != s)
        TACO_CHECK_CUDA(cudaStreamWaitEvent(s, done(j, before), 0));
      if (before < 0 && stage.beside) TACO_CHECK_CUDA(cudaStreamWaitEvent(s, start, 0));
      if (stage.after_beside) {
        for (int u = 0; u < t; ++u)
          if (stages[size_t(u)].beside && stages[size_t(u)].run)
            TACO_CHECK_CUDA(cudaStreamWaitEvent(s, done(j, u), 0));
      }
      const bool timed = timing_ && stage.timed && !stage.on_comm_stream;
      // Recorded after the wait above: the pair spans this stage's own work on the stream.
      if (timed) TACO_CHECK_CUDA(cudaEventRecord(timing_event(2 * timed_pairs_), s));
      stage.run(j, s);
      if (timed) TACO_CHECK_CUDA(cudaEventRecord(timing_event(2 * timed_pairs_++ + 1), s));
      TACO_CHECK_CUDA(cudaEventRecord(done(j, t), s));
    }
  }
}

DevicePipeline::Counters DevicePipeline::finish() {
  wait_for_communicator(comm_, comm_stream_);
  TACO_CHECK_CUDA(cudaStreamSynchronize(beside_stream_));
  TACO_CHECK_CUDA(cudaStreamSynchronize(stream_));
  const std::vector<uint8_t> w =
      download_from_device(counters_, kCounterBytes + decodes_.size() * sizeof(uint32_t), stream_);
  Counters c;
  std::memcpy(&c.encoded_nan_groups, w.data(), sizeof(int64_t));
  std::memcpy(&c.decoded_nan_groups, w.data() + sizeof(int64_t), sizeof(int64_t));
  std::memcpy(c.error_sums, w.data() + 2 * sizeof(int64_t), sizeof c.error_sums);
  for (size_t i = 0; i < timed_pairs_; ++i) {
    float ms = 0;
    TACO_CHECK_CUDA(cudaEventElapsedTime(&ms, timing_events_[2 * i], timing_events_[2 * i + 1]));
    c.codec_seconds += ms * 1e-3;
  }
  timed_pairs_ = 0;
  for (size_t i = 0; i < decodes_.size(); ++i) {
    uint32_t s;
    std::memcpy(&s, w.data() + kCounterBytes + sizeof(uint32_t) * i, sizeof s);
    if (s != 0) throw_rejected(decodes_[i], s);
  }
  return c;
}

// The host decoder's error for a buffer that `op`'s status word rejected: the first of its
// messages whose header the host check refuses, else the device's status on the last.
void DevicePipeline::throw_rejected(const DecodeOp& op, uint32_t status) {
  uint8_t header[kWireHeaderBytes];
  const size_t n = std::min(op.size, kWireHeaderBytes);
  for (int i = 0;; ++i) {
    TACO_CHECK_CUDA(
        cudaMemcpy(header, op.first + size_t(i) * op.stride, n, cudaMemcpyDeviceToHost));
    if (i + 1 == op.count)
      op.codec->throw_device_wire_error(status, header, op.size, op.shape, op.where);
    op.codec->check(header, op.size, op.shape, op.where);
  }
}

}  // namespace taco
