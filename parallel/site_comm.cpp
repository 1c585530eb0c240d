#include "parallel/site_comm.h"

#include <chrono>
#include <cmath>

#include "kernels/check.h"
#include "parallel/fault_point.h"
#include "parallel/watchdog.h"

namespace taco {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

double SiteCommStats::relative_l2() const {
  if (error_samples == 0) return NAN;
  return signal_sq > 0 ? std::sqrt(error_sq / signal_sq) : std::sqrt(error_sq);
}

SiteCommStats& SiteCommStats::operator+=(const SiteCommStats& o) {
  calls += o.calls;
  logical_bytes += o.logical_bytes;
  wire_bytes += o.wire_bytes;
  seconds += o.seconds;
  compressed_calls += o.compressed_calls;
  saved_bytes += o.saved_bytes;
  nonfinite_groups += o.nonfinite_groups;
  error_samples += o.error_samples;
  error_sq += o.error_sq;
  signal_sq += o.signal_sq;
  codec_seconds += o.codec_seconds;
  codec_timed_calls += o.codec_timed_calls;
  return *this;
}

bool SiteStatsTable::empty() const {
  for (const SiteCommStats& s : sites_)
    if (s.calls > 0) return false;
  return true;
}

SiteCommStats SiteStatsTable::total() const {
  SiteCommStats t;
  for (Site site : sites_by_name()) t += (*this)[site];
  return t;
}

SiteStatsTable& SiteStatsTable::operator+=(const SiteStatsTable& o) {
  for (size_t i = 0; i < sites_.size(); ++i) sites_[i] += o.sites_[i];
  return *this;
}

SiteCommStats& SiteComm::account(Site site, size_t logical, size_t wire, double seconds) {
  SiteCommStats& s = stats_[site];
  s.calls += 1;
  s.logical_bytes += int64_t(logical);
  s.wire_bytes += int64_t(wire);
  s.seconds += seconds;
  return s;
}

void SiteComm::all_reduce(const Tensor& x, int /*rows*/, Site site, int layer) {
  if (size() == 1) return;
  auto t0 = Clock::now();
  WatchScope watch("all_reduce", site, layer, comm_);
  fault_point("comm");
  comm_.all_reduce(x.data, x.data, x.numel, x.dtype, ReduceOp::sum, nullptr);
  account(site, x.bytes(), bytes_sent_estimate(CommOp::all_reduce, x.bytes(), size()), since(t0));
}

void SiteComm::reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site, int layer) {
  TACO_CHECK(rows % size() == 0 && out.numel * size() == in.numel,
             std::string("reduce_scatter at ") + site_name(site) + ": rows do not split evenly");
  auto t0 = Clock::now();
  WatchScope watch("reduce_scatter", site, layer, comm_);
  fault_point("comm");
  if (size() == 1) {
    comm_.all_reduce(in.data, out.data, in.numel, in.dtype, ReduceOp::sum, nullptr);
  } else {
    comm_.reduce_scatter(in.data, out.data, out.numel, in.dtype, ReduceOp::sum, nullptr);
  }
  account(site, in.bytes(), bytes_sent_estimate(CommOp::reduce_scatter, in.bytes(), size()),
          since(t0));
}

void SiteComm::all_gather(const Tensor& in, const Tensor& out, int rows, Site site, int layer) {
  TACO_CHECK(rows % size() == 0 && in.numel * size() == out.numel,
             std::string("all_gather at ") + site_name(site) + ": rows do not split evenly");
  auto t0 = Clock::now();
  WatchScope watch("all_gather", site, layer, comm_);
  fault_point("comm");
  comm_.all_gather(in.data, out.data, in.numel, in.dtype, nullptr);
  account(site, out.bytes(), bytes_sent_estimate(CommOp::all_gather, out.bytes(), size()),
          since(t0));
}

void SiteComm::send(const Tensor& x, int peer, Site site, int layer) {
  auto t0 = Clock::now();
  WatchScope watch("send", site, layer, comm_, peer);
  fault_point("comm");
  comm_.send(x.data, x.numel, x.dtype, peer, 0, nullptr);
  account(site, x.bytes(), x.bytes(), since(t0));
}

void SiteComm::recv(const Tensor& x, int peer, Site site, int layer) {
  auto t0 = Clock::now();
  WatchScope watch("recv", site, layer, comm_, peer);
  fault_point("comm");
  comm_.recv(x.data, x.numel, x.dtype, peer, 0, nullptr);
  account(site, x.bytes(), 0, since(t0));
}

void SiteComm::send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in, int src,
                         Site in_site) {
  TACO_CHECK(out.dtype == in.dtype, "send_recv with two dtypes");
  auto t0 = Clock::now();
  WatchScope watch("send_recv", out_site, -1, comm_, dst, src);
  fault_point("comm");
  comm_.send_recv(out.data, out.numel, dst, in.data, in.numel, src, out.dtype, 0, nullptr);
  const double seconds = since(t0);
  account(out_site, out.bytes(), out.bytes(), seconds / 2);
  account(in_site, in.bytes(), 0, seconds / 2);
}

void SiteComm::all_reduce_exact(const Tensor& x, ReduceOp op, Site site) {
  if (size() == 1) return;
  WatchScope watch("all_reduce", site, -1, comm_);
  fault_point("comm");
  comm_.all_reduce(x.data, x.data, x.numel, x.dtype, op, nullptr);
}

}  // namespace taco
