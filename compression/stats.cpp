#include "compression/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace taco {

namespace {

inline double widen(float v) { return v; }
inline double widen(bf16 v) { return bf16_to_float(v); }

template <class T>
void add_sample(SiteStats& s, const T* x, const T* xhat, int64_t n) {
  double err = 0, sig = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = widen(x[i]), d = widen(xhat[i]) - a;
    err += d * d;
    sig += a * a;
  }
  s.error_sq += err;
  s.signal_sq += sig;
  ++s.error_samples;
  const double rel = sig > 0 ? std::sqrt(err / sig) : std::sqrt(err);
  // A NaN sample (non-finite input) must stay visible in the maximum too.
  if (std::isnan(rel) || rel > s.max_relative_l2) s.max_relative_l2 = rel;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string site_json(const SiteStats& s) {
  const bool sampled = s.error_samples > 0;
  return "{\"messages\":" + std::to_string(s.messages) +
         ",\"logical_bytes\":" + std::to_string(s.logical_bytes) +
         ",\"wire_bytes\":" + std::to_string(s.wire_bytes) + ",\"ratio\":" + number(s.ratio()) +
         ",\"rel_l2\":" + (sampled ? number(s.relative_l2()) : "null") +
         ",\"max_rel_l2\":" + (sampled ? number(s.max_relative_l2) : "null") +
         ",\"error_samples\":" + std::to_string(s.error_samples) +
         ",\"nonfinite_groups\":" + std::to_string(s.nonfinite_groups) + "}";
}

}  // namespace

void SiteStats::add_message(int64_t logical, int64_t wire, int64_t nonfinite) {
  ++messages;
  logical_bytes += logical;
  wire_bytes += wire;
  nonfinite_groups += nonfinite;
}

void SiteStats::add_error_sample(const float* x, const float* xhat, int64_t n) {
  add_sample(*this, x, xhat, n);
}

void SiteStats::add_error_sample(const bf16* x, const bf16* xhat, int64_t n) {
  add_sample(*this, x, xhat, n);
}

void SiteStats::merge(const SiteStats& o) {
  const auto a = pack(), b = o.pack();
  std::array<double, kPackedSums + 1> m;
  for (int i = 0; i < kPackedSums; ++i) m[size_t(i)] = a[size_t(i)] + b[size_t(i)];
  const double x = a[kPackedSums], y = b[kPackedSums];
  m[kPackedSums] = std::isnan(x) || std::isnan(y) ? std::nan("") : std::max(x, y);
  *this = unpack(m);
}

double SiteStats::ratio() const {
  return wire_bytes > 0 ? double(logical_bytes) / double(wire_bytes) : 0.0;
}

double SiteStats::relative_l2() const {
  return signal_sq > 0 ? std::sqrt(error_sq / signal_sq) : std::sqrt(error_sq);
}

std::array<double, SiteStats::kPackedSums + 1> SiteStats::pack() const {
  return {double(messages),
          double(logical_bytes),
          double(wire_bytes),
          double(nonfinite_groups),
          double(error_samples),
          error_sq,
          signal_sq,
          max_relative_l2};
}

SiteStats SiteStats::unpack(const std::array<double, kPackedSums + 1>& p) {
  SiteStats s;
  s.messages = int64_t(p[0]);
  s.logical_bytes = int64_t(p[1]);
  s.wire_bytes = int64_t(p[2]);
  s.nonfinite_groups = int64_t(p[3]);
  s.error_samples = int64_t(p[4]);
  s.error_sq = p[5];
  s.signal_sq = p[6];
  s.max_relative_l2 = p[7];
  return s;
}

void ChannelErrors::add(const float* x, const float* xhat, int64_t rows, int64_t cols) {
  if (channel_error_sq_.size() < size_t(cols)) {
    channel_error_sq_.resize(size_t(cols), 0.0);
    channel_signal_sq_.resize(size_t(cols), 0.0);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const double v = x[i], d = double(xhat[i]) - v;
      channel_error_sq_[size_t(c)] += d * d;
      channel_signal_sq_[size_t(c)] += v * v;
      error_sq_ += d * d;
      signal_sq_ += v * v;
    }
  }
}

double ChannelErrors::global() const {
  return signal_sq_ > 0 ? std::sqrt(error_sq_ / signal_sq_) : std::sqrt(error_sq_);
}

double ChannelErrors::mean_channel() const {
  double sum = 0;
  int n = 0;
  for (size_t c = 0; c < channel_error_sq_.size(); ++c) {
    if (channel_signal_sq_[c] > 0) {
      sum += std::sqrt(channel_error_sq_[c] / channel_signal_sq_[c]);
      ++n;
    }
  }
  return n ? sum / n : 0.0;
}

double ChannelErrors::pooled(const std::vector<bool>& pick) const {
  double e = 0, s = 0;
  for (size_t c = 0; c < channel_error_sq_.size() && c < pick.size(); ++c) {
    if (!pick[c]) continue;
    e += channel_error_sq_[c];
    s += channel_signal_sq_[c];
  }
  return s > 0 ? std::sqrt(e / s) : std::sqrt(e);
}

void CompressionStats::merge(const CompressionStats& other) {
  for (size_t i = 0; i < sites_.size(); ++i) sites_[i].merge(other.sites_[i]);
}

SiteStats CompressionStats::total() const {
  SiteStats t;
  for (const SiteStats& s : sites_) t.merge(s);
  return t;
}

std::string CompressionStats::to_json() const {
  std::string out = "{";
  for (Site site : compressible_sites()) {
    const SiteStats& s = (*this)[site];
    if (s.messages == 0) continue;
    out += std::string("\"") + site_name(site) + "\":" + site_json(s) + ",";
  }
  return out + "\"total\":" + site_json(total()) + "}";
}

}  // namespace taco
