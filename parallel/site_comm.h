// The one door every collective of a training step goes through (docs/design.md §3): each call
// names its site ("attn.out.fwd", "dp.grad", ...) and layer, is routed to the group's
// communicator's native collective, and is accounted per site: calls, logical bytes, bytes on the
// wire, seconds. CompressedSiteComm (parallel/compressed_site_comm.h) overrides the calls to send
// the sites its compression policy names through their codecs.
//
// Tensors are [rows, cols] row-major; chunked collectives split rows evenly over the group
// (sequence parallelism splits the token rows).
#pragma once

#include <map>
#include <string>

#include "engine/runtime/tensor.h"
#include "parallel/communicator.h"

namespace taco {

// What one site cost since the last reset. The error fields come from compressed calls only
// (parallel/compressed_site_comm.h): ||x^ - x||^2 and ||x||^2 summed over the sampled calls,
// where x is this rank's message and x^ what one encode/decode of it gives back.
struct SiteCommStats {
  int64_t calls = 0;
  int64_t logical_bytes = 0;  // the uncompressed message, as nccl-tests counts size
  int64_t wire_bytes = 0;     // what this rank put on the wire
  double seconds = 0;
  int64_t compressed_calls = 0;  // calls that went through a codec
  int64_t saved_bytes = 0;       // what the native collective would have sent, minus wire_bytes
  int64_t nonfinite_groups = 0;  // groups sent or received as NaN or Inf
  int64_t error_samples = 0;
  double error_sq = 0, signal_sq = 0;
  double codec_seconds = 0;       // CompressedCall::codec_seconds summed
  int64_t codec_timed_calls = 0;  // calls whose codec time was taken

  // sqrt(error_sq / signal_sq) pooled over the samples; NaN before any sample.
  double relative_l2() const;
  SiteCommStats& operator+=(const SiteCommStats& o);
};

class SiteComm {
 public:
  explicit SiteComm(Communicator& comm) : comm_(comm) {}
  virtual ~SiteComm() = default;

  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }
  Communicator& communicator() const { return comm_; }

  // x [rows, cols] summed over the group, in place.
  virtual void all_reduce(const Tensor& x, int rows, const char* site, int layer);
  // in [rows, cols] summed over the group; out [rows / size, cols] gets this rank's rows.
  virtual void reduce_scatter(const Tensor& in, const Tensor& out, int rows, const char* site,
                              int layer);
  // in [rows / size, cols] from every rank; out [rows, cols] in rank order.
  virtual void all_gather(const Tensor& in, const Tensor& out, int rows, const char* site,
                          int layer);
  // Point to point within the group (pipeline sites).
  virtual void send(const Tensor& x, int peer, const char* site, int layer);
  virtual void recv(const Tensor& x, int peer, const char* site, int layer);
  // Sends `out` to `dst` and receives `in` from `src` in one exchange (no ordering deadlock).
  virtual void send_recv(const Tensor& out, int dst, const char* out_site, const Tensor& in,
                         int src, const char* in_site);

  // Small exact reductions that are never compressed (cross-entropy statistics, loss sums).
  void all_reduce_exact(const Tensor& x, ReduceOp op);

  const std::map<std::string, SiteCommStats>& stats() const { return stats_; }
  SiteCommStats total() const;
  void reset_stats() { stats_.clear(); }

 protected:
  SiteCommStats& account(const char* site, size_t logical, size_t wire, double seconds);
  Communicator& comm_;
  std::map<std::string, SiteCommStats> stats_;
};

}  // namespace taco
