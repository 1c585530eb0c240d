// The one door every collective of a training step goes through (docs/design.md §3): each call
// names its Site (compression/sites.h: Site::attn_out_fwd, Site::dp_grad, ...) and layer, is
// routed to the group's communicator's native collective, and is accounted per site: calls,
// logical bytes, bytes on the wire, seconds. CompressedSiteComm (parallel/compressed_site_comm.h)
// overrides the calls to send the sites its compression policy names through their codecs.
//
// Tensors are [rows, cols] row-major; chunked collectives split rows evenly over the group
// (sequence parallelism splits the token rows).
#pragma once

#include <array>

#include "compression/sites.h"
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

// SiteCommStats per site, indexed by Site; a site without calls holds zeros.
class SiteStatsTable {
 public:
  SiteCommStats& operator[](Site site) { return sites_[size_t(site)]; }
  const SiteCommStats& operator[](Site site) const { return sites_[size_t(site)]; }
  bool empty() const;           // no site has calls
  SiteCommStats total() const;  // every site's counters, summed in name order
  SiteStatsTable& operator+=(const SiteStatsTable& o);
  void clear() { sites_ = {}; }

 private:
  std::array<SiteCommStats, kNumAllSites> sites_{};
};

class SiteComm {
 public:
  explicit SiteComm(Communicator& comm) : comm_(comm) {}
  virtual ~SiteComm() = default;

  int size() const { return comm_.size(); }
  int rank() const { return comm_.rank(); }
  Communicator& communicator() const { return comm_; }

  // x [rows, cols] summed over the group, in place.
  virtual void all_reduce(const Tensor& x, int rows, Site site, int layer);
  // in [rows, cols] summed over the group; out [rows / size, cols] gets this rank's rows.
  virtual void reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site, int layer);
  // in [rows / size, cols] from every rank; out [rows, cols] in rank order.
  virtual void all_gather(const Tensor& in, const Tensor& out, int rows, Site site, int layer);
  // Point to point within the group (pipeline sites).
  virtual void send(const Tensor& x, int peer, Site site, int layer);
  virtual void recv(const Tensor& x, int peer, Site site, int layer);
  // Sends `out` to `dst` and receives `in` from `src` in one exchange (no ordering deadlock).
  virtual void send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in, int src,
                         Site in_site);

  // Small exact reductions that are never compressed nor accounted (the cross-entropy's
  // statistics); `site` names the call for the watchdog.
  void all_reduce_exact(const Tensor& x, ReduceOp op, Site site);

  const SiteStatsTable& stats() const { return stats_; }
  SiteCommStats total() const { return stats_.total(); }
  virtual void reset_stats() { stats_.clear(); }

 protected:
  SiteCommStats& account(Site site, size_t logical, size_t wire, double seconds);
  Communicator& comm_;
  SiteStatsTable stats_;
};

}  // namespace taco
