// Per-site compression statistics: bytes before and after, and the relative L2 error
// ||x^ - x|| / ||x|| measured on sampled messages. Mergeable across steps and ranks; written
// into metrics.jsonl as a JSON object keyed by site.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/sites.h"
#include "kernels/dtype.h"

namespace taco {

struct SiteStats {
  int64_t messages = 0;
  int64_t logical_bytes = 0;  // what the messages take uncompressed, in their own dtype
  int64_t wire_bytes = 0;     // what the codec sent: header + payload + scales
  int64_t nonfinite_groups = 0;
  int64_t error_samples = 0;   // messages whose error was measured
  double error_sq = 0;         // sum over samples of ||x^ - x||^2
  double signal_sq = 0;        // sum over samples of ||x||^2
  double max_relative_l2 = 0;  // the worst sampled message

  void add_message(int64_t logical, int64_t wire, int64_t nonfinite = 0);
  // One sampled message: x the input, xhat what the receiver decoded (n elements).
  void add_error_sample(const float* x, const float* xhat, int64_t n);
  void add_error_sample(const bf16* x, const bf16* xhat, int64_t n);
  void merge(const SiteStats& other);

  double ratio() const;        // logical / wire; 0 before any message
  double relative_l2() const;  // sqrt(error_sq / signal_sq) pooled over samples; 0 without
  double saved_bytes() const { return double(logical_bytes - wire_bytes); }

  // A flat form for MPI: the first kPackedSums entries add, the last is a maximum.
  static constexpr int kPackedSums = 7;
  std::array<double, kPackedSums + 1> pack() const;
  static SiteStats unpack(const std::array<double, kPackedSums + 1>& packed);
};

// Error sums per channel (column) over any number of [rows, cols] tensors (tokens x hidden):
//   global        ||x^ - x|| / ||x||                                   (all elements pooled)
//   mean_channel  mean over channels c with ||x_c|| > 0 of ||x^_c - x_c|| / ||x_c||
// The mean over channels sees what the global figure hides: small channels whose error grows
// while a few large ones dominate the norm (docs/design.md §4).
class ChannelErrors {
 public:
  void add(const float* x, const float* xhat, int64_t rows, int64_t cols);
  double global() const;
  double mean_channel() const;  // 0 when no channel has signal
  // ||x^ - x|| / ||x|| pooled over the channels where `pick[c]` is true.
  double pooled(const std::vector<bool>& pick) const;
  bool has_signal() const { return signal_sq_ > 0; }
  double error_sq() const { return error_sq_; }

 private:
  std::vector<double> channel_error_sq_, channel_signal_sq_;
  double error_sq_ = 0, signal_sq_ = 0;
};

class CompressionStats {
 public:
  SiteStats& operator[](Site site) { return sites_[size_t(site)]; }
  const SiteStats& operator[](Site site) const { return sites_[size_t(site)]; }

  // Whether the next message at `site` should have its error measured: every `every`-th
  // message, starting with the first (0 = never).
  bool sample_due(Site site, int every) const {
    return every > 0 && (*this)[site].messages % every == 0;
  }

  void merge(const CompressionStats& other);
  void reset() { sites_ = {}; }
  SiteStats total() const;  // all sites together

  // {"attn.out.fwd":{"messages":..,"logical_bytes":..,"wire_bytes":..,"ratio":..,
  //   "rel_l2":..,"max_rel_l2":..,"error_samples":..,"nonfinite_groups":..},...,"total":{..}}
  // Sites without messages are left out; rel_l2 is null where nothing was sampled.
  std::string to_json() const;

 private:
  std::array<SiteStats, kNumSites> sites_{};
};

}  // namespace taco
