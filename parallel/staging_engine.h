// StagingEngine: runs a staging plan (parallel/staged_plan.h) for HostStagedCommunicator on two
// copy streams of its own, one down (device -> pinned host) and one up (host -> device):
//
//   1. both copy streams wait for `after` (the caller's stream: its writes to the inputs);
//   2. every piece's down copies are queued at once on the down stream, an event after each
//      piece; the host waits for `after` itself (compute, not counted as staging);
//   3. for each piece j: wait for its down event, run the wire call (host MPI) on its host
//      ranges, queue its up copies on the up stream; so while the host is inside piece j's MPI
//      call the copy engines move piece j + 1 down and piece j - 1 up;
//   4. wait for the up stream: every output byte has landed when run() returns.
//
// run() returns the host seconds spent in the waits of 3 and 4: staging copies that did not
// hide behind a transfer (CommOpStats::staging_seconds). Host buffers (pinned, per slot) and
// device scratch buffers (per slot) grow on demand and are kept. A build without CUDA has the
// class, and every method that would touch a device throws taco::Error (the communicator never
// calls those there: no pointer is a device pointer).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "kernels/dtype.h"
#include "parallel/staged_plan.h"

namespace taco {

class StagingEngine {
 public:
  StagingEngine();
  ~StagingEngine();
  StagingEngine(const StagingEngine&) = delete;
  StagingEngine& operator=(const StagingEngine&) = delete;

  static constexpr int kHostSlots = 3, kDeviceSlots = 3;
  // Pinned host memory of at least `bytes` in `slot` (contents kept only until it grows).
  void* host(int slot, size_t bytes);
  // Device memory of at least `bytes` in `slot`; release() frees it (the calibration scratch).
  void* device(int slot, size_t bytes);
  void release(int slot);

  // The stream the up copies (and the reductions that follow them) run on.
  Stream up_stream();

  // Blocking copies for the paths that do not pipeline (host buffers, point to point, the
  // serial fallbacks): to_host first waits for `after` (the caller's writes to `dev`).
  void to_host(void* host, const void* dev, size_t bytes, Stream after);
  void to_device(void* dev, const void* host, size_t bytes);
  // dst = src within device memory, queued on `stream` and waited for.
  void copy_on_device(void* dst, const void* src, size_t bytes, Stream stream);
  // Sets `bytes` of device memory at p to the byte `value` (the calibration's input).
  void fill(void* p, unsigned char value, size_t bytes);

  // Runs `plan` as the header describes: down copies from dev_src to host_down, wire(j) for
  // piece j, up copies from host_up to dev_dst, plan.local as device copies dev_src -> dev_dst
  // on the up stream. Returns the seconds waited for copies.
  double run(const staging::Plan& plan, const void* dev_src, void* host_down, void* dev_dst,
             const void* host_up, Stream after, const std::function<void(size_t)>& wire);

  // One side of a chained run: a plan and its buffers, as run() takes them.
  struct Stage {
    const staging::Plan* plan = nullptr;
    const void* dev_src = nullptr;
    void* host_down = nullptr;
    void* dev_dst = nullptr;
    const void* host_up = nullptr;
    std::function<void(size_t)> wire;
  };
  // Two plans with the same number of pieces, interleaved piece by piece (the two-shot
  // all-reduce): first's piece j comes up, then `between(j, up_stream)` is queued on the up
  // stream (the reduction of slice j), then second's piece j goes down once that is done. The
  // host runs first.wire(j), then second.wire(j - 1), so the device's round trip of piece j
  // hides behind the host's next transfers. Neither plan may have locals. Returns the seconds
  // waited for copies (and for between's work where it delays a copy).
  double run_chained(const Stage& first, const Stage& second, Stream after,
                     const std::function<void(size_t, Stream)>& between);

 private:
  struct Cuda;
  std::unique_ptr<Cuda> cuda_;
};

// Is `p` in device memory? False for nullptr, for host memory, and always in a build without
// CUDA.
bool is_device_pointer(const void* p);

// Waits for the work queued on `stream`; returns at once where no CUDA device is present.
void wait_for_stream(Stream stream);

}  // namespace taco
