#include "engine/train/site_traffic.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "compression/codec_options.h"
#include "engine/train/metrics.h"

namespace taco {

namespace {

// after - before, field by field (both from the same site's running counters).
SiteCommStats difference(const SiteCommStats& after, const SiteCommStats& before) {
  SiteCommStats d;
  d.calls = after.calls - before.calls;
  d.logical_bytes = after.logical_bytes - before.logical_bytes;
  d.wire_bytes = after.wire_bytes - before.wire_bytes;
  d.seconds = after.seconds - before.seconds;
  d.compressed_calls = after.compressed_calls - before.compressed_calls;
  d.saved_bytes = after.saved_bytes - before.saved_bytes;
  d.nonfinite_groups = after.nonfinite_groups - before.nonfinite_groups;
  d.error_samples = after.error_samples - before.error_samples;
  d.error_sq = after.error_sq - before.error_sq;
  d.signal_sq = after.signal_sq - before.signal_sq;
  d.codec_seconds = after.codec_seconds - before.codec_seconds;
  d.codec_timed_calls = after.codec_timed_calls - before.codec_timed_calls;
  return d;
}

// The larger error, NaN winning: a non-finite message must stay visible.
double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// One row of the table: a site's consecutive layers with the same codec, summed.
struct Row {
  std::string site, layers;
  LayerTraffic t;
};

std::string layer_label(int first, int last) {
  if (first < 0) return "-";
  return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
}

std::vector<Row> rows_of(const TrafficByLayer& traffic) {
  std::vector<Row> rows;
  int first = -1, last = -1;
  for (const auto& [s, layer] : traffic.keys()) {
    const LayerTraffic& t = traffic.at(s, layer);
    const std::string site = site_name(s);
    const bool extends = !rows.empty() && rows.back().site == site && layer >= 0 && last >= 0 &&
                         layer == last + 1 && rows.back().t.codec == t.codec;
    if (extends) {
      rows.back().t += t;
      last = layer;
    } else {
      rows.push_back({site, "", t});
      first = last = layer;
    }
    rows.back().layers = layer_label(first, last);
  }
  return rows;
}

}  // namespace

LayerTraffic& LayerTraffic::operator+=(const LayerTraffic& other) {
  if (other.sums.error_samples > 0)
    max_rel_err =
        sums.error_samples > 0 ? worse(max_rel_err, other.max_rel_err) : other.max_rel_err;
  sums += other.sums;
  if (other.codec != "native") codec = other.codec;  // the latest (after calibration)
  return *this;
}

LayerTraffic& TrafficByLayer::at(Site site, int layer) {
  std::vector<LayerTraffic>& layers = by_site_[size_t(site)];
  const size_t i = size_t(layer + 1);
  if (layers.size() <= i) layers.resize(i + 1);
  return layers[i];
}

const LayerTraffic& TrafficByLayer::at(Site site, int layer) const {
  static const LayerTraffic kNone;
  const std::vector<LayerTraffic>& layers = by_site_[size_t(site)];
  const size_t i = size_t(layer + 1);
  return i < layers.size() ? layers[i] : kNone;
}

std::vector<SiteLayer> TrafficByLayer::keys() const {
  std::vector<SiteLayer> out;
  for (Site site : sites_by_name()) {
    const std::vector<LayerTraffic>& layers = by_site_[size_t(site)];
    for (size_t i = 0; i < layers.size(); ++i)
      if (layers[i].sums.calls > 0) out.emplace_back(site, int(i) - 1);
  }
  return out;
}

bool TrafficByLayer::empty() const {
  for (const auto& layers : by_site_)
    for (const LayerTraffic& t : layers)
      if (t.sums.calls > 0) return false;
  return true;
}

void TrafficByLayer::clear() {
  for (auto& layers : by_site_) layers.clear();
}

void add_traffic(TrafficByLayer& into, const TrafficByLayer& from) {
  for (const auto& [site, layer] : from.keys()) into.at(site, layer) += from.at(site, layer);
}

void LayeredSiteComm::reset_stats() {
  CompressedSiteComm::reset_stats();
  step_.clear();
}

void LayeredSiteComm::file(Site site, int layer, const SiteCommStats& before) {
  const SiteCommStats d = difference(stats()[site], before);
  if (d.calls == 0) return;
  LayerTraffic one;
  one.sums = d;
  if (d.error_samples > 0) one.max_rel_err = d.relative_l2();
  if (d.compressed_calls > 0 && site_is_compressible(site))
    one.codec = describe(canonical(policy_.configured(site_is_per_layer(site) ? layer : -1, site)));
  step_.at(site, layer) += one;
}

template <class Call>
void LayeredSiteComm::traced(Site site, int layer, const Site* site2, Call call) {
  if (depth_ > 0) return call();
  const SiteCommStats before = stats()[site];
  const SiteCommStats before2 = site2 ? stats()[*site2] : SiteCommStats{};
  ++depth_;
  try {
    call();
  } catch (...) {
    --depth_;
    throw;
  }
  --depth_;
  file(site, layer, before);
  if (site2) file(*site2, layer, before2);
}

void LayeredSiteComm::all_reduce(const Tensor& x, int rows, Site site, int layer) {
  traced(site, layer, nullptr, [&] { CompressedSiteComm::all_reduce(x, rows, site, layer); });
}

void LayeredSiteComm::reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site,
                                     int layer) {
  traced(site, layer, nullptr,
         [&] { CompressedSiteComm::reduce_scatter(in, out, rows, site, layer); });
}

void LayeredSiteComm::all_gather(const Tensor& in, const Tensor& out, int rows, Site site,
                                 int layer) {
  traced(site, layer, nullptr, [&] { CompressedSiteComm::all_gather(in, out, rows, site, layer); });
}

void LayeredSiteComm::send(const Tensor& x, int peer, Site site, int layer) {
  traced(site, layer, nullptr, [&] { CompressedSiteComm::send(x, peer, site, layer); });
}

void LayeredSiteComm::recv(const Tensor& x, int peer, Site site, int layer) {
  traced(site, layer, nullptr, [&] { CompressedSiteComm::recv(x, peer, site, layer); });
}

void LayeredSiteComm::send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in,
                                int src, Site in_site) {
  traced(out_site, -1, &in_site,
         [&] { CompressedSiteComm::send_recv(out, dst, out_site, in, src, in_site); });
}

std::string traffic_table(const TrafficByLayer& traffic, int steps, const std::string& native) {
  std::string out = fmt::format(
      "traffic per site and layer range over {} step(s), this rank's messages; ratio and saved "
      "count against sending them\nuncompressed in {}; rel err: relative L2 error pooled over "
      "the logged steps' messages; max err: the worst single message\n"
      "  {:<13} {:>6} {:>7} {:>10} {:>9} {:>6} {:>9} {:>7} {:>9} {:>9} {:>7}  {}",
      steps, native, "site", "layers", "calls", "logical MB", "wire MB", "ratio", "saved MB",
      "comm s", "rel err", "max err", "NaN grp", "codec");
  LayerTraffic total;
  auto row = [&](const std::string& site, const std::string& layers, const LayerTraffic& t) {
    const SiteCommStats& st = t.sums;
    const std::string ratio =
        st.wire_bytes > 0 ? fmt::format("{:.2f}", double(st.logical_bytes) / st.wire_bytes) : "-";
    const bool measured = st.error_samples > 0;
    const std::string rel = measured ? fmt::format("{:.3e}", st.relative_l2()) : "-";
    const std::string max = measured ? fmt::format("{:.3e}", t.max_rel_err) : "-";
    out += fmt::format(
        "\n  {:<13} {:>6} {:>7} {:>10.1f} {:>9.1f} {:>6} {:>9.1f} {:>7.2f} {:>9} {:>9} {:>7}  {}",
        site, layers, st.calls, st.logical_bytes / 1e6, st.wire_bytes / 1e6, ratio,
        st.saved_bytes / 1e6, st.seconds, rel, max, st.nonfinite_groups, t.codec);
  };
  for (const Row& r : rows_of(traffic)) {
    row(r.site, r.layers, r.t);
    total += r.t;
  }
  total.codec = "";
  row("total", "", total);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string traffic_json(const TrafficByLayer& traffic, int steps, const std::string& native) {
  std::string rows = "[";
  for (const Row& r : rows_of(traffic)) {
    const SiteCommStats& st = r.t.sums;
    const bool measured = st.error_samples > 0;
    if (rows.size() > 1) rows += ", ";
    rows += JsonRecord()
                .add("site", r.site)
                .add("layers", r.layers)
                .add("codec", r.t.codec)
                .add("calls", (long long)st.calls)
                .add("bytes", (long long)st.logical_bytes)
                .add("wire_bytes", (long long)st.wire_bytes)
                .add("saved_bytes", (long long)st.saved_bytes)
                .add("seconds", st.seconds)
                .add("error_samples", (long long)st.error_samples)
                .add("rel_err", measured ? st.relative_l2() : NAN)
                .add("max_rel_err", measured ? r.t.max_rel_err : NAN)
                .add("nonfinite_groups", (long long)st.nonfinite_groups)
                .str();
  }
  return JsonRecord()
      .add("steps", (long long)steps)
      .add("dtype", native)
      .add_raw("rows", rows + "]")
      .str();
}

}  // namespace taco
