// The machinery under DeviceCompressedCollectives (parallel/device_compressed_collectives.h):
// a software pipeline over two CUDA streams, the device buffers it keeps between calls, and the
// wire status words and counters its decodes report into. CUDA builds only: include it from
// *_cuda.cpp files, which a CPU-only build leaves out (taco_sources in the top CMakeLists.txt).
//
//   begin(stream, n)   a call on the caller's `stream` with n status words (zeroed on it)
//   run(pieces, stages)  stage t of piece j is issued in step j + t, the steps in order and the
//                      stages in order within a step; a stage on the other stream than the one
//                      before it waits for that stage's event. So every stage is queued after
//                      what it depends on, and in step n the caller's stream works on piece n
//                      while the communication stream moves piece n - 1. The communication
//                      stream first waits for everything queued on the caller's stream.
//                      A `beside` stage runs on a third stream after the stage before it, and
//                      the stages after it wait only for the one before it (so a logged
//                      step's self-check never holds up the wire); a stage marked
//                      `after_beside` also waits for the piece's beside stages.
//   finish()           waits for every stream (an NCCL communicator: polling its asynchronous
//                      errors, with its timeout); a non-zero status word throws the codec's
//                      one-line UserError for the rejected buffer; returns the counters.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "compression/codec.h"
#include "parallel/communicator.h"

namespace taco {

// Device memory that grows on demand and is kept between calls (every call ends synchronized,
// so nothing is in flight when it is replaced); cudaMalloc's 256-byte alignment.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  // At least `bytes` (16 or more); the contents are not kept when it grows.
  uint8_t* get(size_t bytes);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class DevicePipeline {
 public:
  // The work of one stage for piece `piece`, queued on `stream`.
  // With timing on, the caller-stream stages that are `timed` (the codec kernels) are timed
  // with device events; the self-check of a measured call is a stage of its own, untimed.
  // beside: on a third stream, off the path of the stages after it (they wait for the stage
  // before it instead), for work that nothing downstream needs, such as a measured call's
  // self-check: only a stage marked `after_beside`, and finish, wait for it. A beside stage with
  // no `run` (a call that measures nothing) is left out: no stream or event sees it.
  struct Stage {
    bool on_comm_stream;
    std::function<void(int piece, cudaStream_t stream)> run;
    bool timed = true;
    bool beside = false;
    bool after_beside = false;
  };
  // What a status word covers: `count` messages at first + i * stride, `size` bytes each, all
  // of `shape`, checked by `codec` for the site and rank of `where`.
  struct DecodeOp {
    const Codec* codec;
    const uint8_t* first;
    size_t stride;
    int count;
    size_t size;
    MessageShape shape;
    WireContext where;
  };
  struct Counters {
    int64_t encoded_nan_groups = 0;    // groups the encodes marked NaN (encoded_nan())
    int64_t decoded_nan_groups = 0;    // groups the decodes gave as NaN (decoded_nan())
    double codec_seconds = 0;          // device time of the timed stages (timing on only)
    double error_sums[3] = {0, 0, 0};  // error_sums() as the call left them
  };

  explicit DevicePipeline(Communicator& comm);
  ~DevicePipeline();
  DevicePipeline(const DevicePipeline&) = delete;
  DevicePipeline& operator=(const DevicePipeline&) = delete;

  // `timing`: time this call's codec stages (a few device events per piece; logged steps).
  void begin(cudaStream_t stream, size_t status_words, bool timing = false);
  cudaStream_t stream() const { return stream_; }
  // Device counters for the codecs' nonfinite_groups arguments.
  int64_t* encoded_nan() { return counters_; }
  int64_t* decoded_nan() { return counters_ + 1; }
  // A measured call's self-check sums (kernels/roundtrip_error.h: error^2, signal^2, non-finite
  // inputs), zeroed by begin and read by finish in the counters' one download, so a measured call
  // costs no second round trip to the device.
  double* error_sums() { return reinterpret_cast<double*>(counters_ + 2); }
  // The status word for the next decode, which checks the messages `op` names.
  uint32_t* status_for(const DecodeOp& op);
  void run(int pieces, const std::vector<Stage>& stages);
  Counters finish();

  // Wire buffers and scratch of the collectives, kept between calls; `measure` holds a measured
  // call's own encodings decoded again (where its codec has no fused check).
  DeviceBuffer send, recv, gather, scratch, measure;

 private:
  cudaEvent_t event(size_t i);
  cudaEvent_t timing_event(size_t i);
  [[noreturn]] void throw_rejected(const DecodeOp& op, uint32_t status);

  Communicator& comm_;
  cudaStream_t comm_stream_ = nullptr;
  cudaStream_t beside_stream_ = nullptr;  // the `beside` stages'
  cudaStream_t stream_ = nullptr;         // the caller's, for this call
  std::vector<cudaEvent_t> events_;
  bool timing_ = false;
  std::vector<cudaEvent_t> timing_events_;  // with timing, in (start, end) pairs
  size_t timed_pairs_ = 0;
  DeviceBuffer words_;  // the counters, the error sums, then the status words
  int64_t* counters_ = nullptr;
  uint32_t* status_ = nullptr;
  size_t status_capacity_ = 0;
  std::vector<DecodeOp> decodes_;
};

// `bytes` of device memory copied to the host once `stream` has reached this point.
std::vector<uint8_t> download_from_device(const void* device, size_t bytes, cudaStream_t stream);

}  // namespace taco
