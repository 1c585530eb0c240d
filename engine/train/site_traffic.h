// Traffic per (site, layer) and the end-of-run table built from it (docs/logs-and-metrics.md).
//
// SiteComm accounts per site only; the calls themselves name a layer. LayeredSiteComm is the
// trainer's door (a CompressedSiteComm) that also splits each call's accounting by the layer it
// named and keeps the worst single measured message, without touching parallel/: it compares the
// site's counters before and after each call and files the difference under (site, layer).
//
// The end-of-run table groups each site's consecutive layers that used the same codec into one
// row ("0-3", "4-11"), so a 48-layer model prints a row per site and rule range, not per layer.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "parallel/compressed_site_comm.h"

namespace taco {

// One (site, layer)'s traffic: the site counters summed over its calls, the worst relative L2
// error of a single measured message (NaN once one decoded non-finite), and the codec it used
// (compression/codec_options.h's describe(), "native" when no call was compressed).
struct LayerTraffic {
  SiteCommStats sums;
  double max_rel_err = 0;  // meaningful where sums.error_samples > 0
  std::string codec = "native";
  LayerTraffic& operator+=(const LayerTraffic& other);
};

// (site, layer); layer -1 for model-wide sites and calls that name no layer.
using SiteLayer = std::pair<Site, int>;

// LayerTraffic per (site, layer), indexed by site and layer. An entry without calls counts as
// absent.
class TrafficByLayer {
 public:
  // The entry of (site, layer), made (empty) where there is none.
  LayerTraffic& at(Site site, int layer);
  // The entry of (site, layer), or an empty one.
  const LayerTraffic& at(Site site, int layer) const;
  // The (site, layer)s with calls, in the order of the table: sites by name, layers ascending
  // (-1 first).
  std::vector<SiteLayer> keys() const;
  size_t size() const { return keys().size(); }
  bool empty() const;
  void clear();

 private:
  std::array<std::vector<LayerTraffic>, kNumAllSites> by_site_;  // [site][layer + 1]
};

void add_traffic(TrafficByLayer& into, const TrafficByLayer& from);

class LayeredSiteComm : public CompressedSiteComm {
 public:
  LayeredSiteComm(Communicator& comm, const CompressionPolicy& policy,
                  SiteCalibration* calibration = nullptr)
      : CompressedSiteComm(comm, policy, calibration), policy_(policy) {}

  void all_reduce(const Tensor& x, int rows, Site site, int layer) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site, int layer) override;
  void all_gather(const Tensor& in, const Tensor& out, int rows, Site site, int layer) override;
  void send(const Tensor& x, int peer, Site site, int layer) override;
  void recv(const Tensor& x, int peer, Site site, int layer) override;
  void send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in, int src,
                 Site in_site) override;
  void reset_stats() override;

  // stats() split by layer: the calls since the last reset_stats(), like stats().
  const TrafficByLayer& layer_traffic() const { return step_; }

 private:
  // Runs `call` (one base-class call naming `site` at `layer`, and `site2` when given) and files
  // the change of those sites' counters under (site, layer). Calls the base class makes from
  // inside one call (send_recv falling back to send and recv) are part of that call.
  template <class Call>
  void traced(Site site, int layer, const Site* site2, Call call);
  void file(Site site, int layer, const SiteCommStats& before);

  const CompressionPolicy& policy_;
  TrafficByLayer step_;
  int depth_ = 0;
};

// The end-of-run table: one row per site and layer range with calls, logical and wire MB, the
// ratio, MB saved, seconds, the pooled and the worst single-message relative error, NaN groups
// and the codec, then a total. `native` names the dtype the logical bytes are counted in ("fp32"
// on CPU ranks, "bf16" on GPUs): ratio and saved bytes are against sending that uncompressed.
std::string traffic_table(const TrafficByLayer& traffic, int steps, const std::string& native);

// The same rows as one JSON object for metrics.jsonl: {"steps": .., "dtype": .., "rows": [..]}.
std::string traffic_json(const TrafficByLayer& traffic, int steps, const std::string& native);

}  // namespace taco
