#include "compression/sites.h"

#include <algorithm>

namespace taco {

static_assert(kNumSites == int(Site::dp_grad) + 1, "Site and kSiteNames differ in length");
static_assert(kSiteNames[int(Site::embed_fwd)] == "embed.fwd" &&
                  kSiteNames[int(Site::attn_in_fwd)] == "attn.in.fwd" &&
                  kSiteNames[int(Site::attn_out_bwd)] == "attn.out.bwd" &&
                  kSiteNames[int(Site::mlp_out_bwd)] == "mlp.out.bwd" &&
                  kSiteNames[int(Site::head_in_bwd)] == "head.in.bwd" &&
                  kSiteNames[int(Site::pp_act)] == "pp.act" &&
                  kSiteNames[int(Site::dp_grad)] == "dp.grad",
              "Site and kSiteNames are in different orders");
static_assert(kNumAllSites == int(Site::codec_auto_probe) + 1,
              "Site and kUncompressedSiteNames differ in length");
static_assert(kUncompressedSiteNames[int(Site::sp_grad) - kNumSites] == "sp.grad" &&
                  kUncompressedSiteNames[int(Site::dp_param) - kNumSites] == "dp.param" &&
                  kUncompressedSiteNames[int(Site::ce_sum) - kNumSites] == "ce.sum" &&
                  kUncompressedSiteNames[int(Site::grad_norm) - kNumSites] == "grad.norm" &&
                  kUncompressedSiteNames[int(Site::checkpoint) - kNumSites] == "checkpoint" &&
                  kUncompressedSiteNames[int(Site::exit) - kNumSites] == "exit" &&
                  kUncompressedSiteNames[int(Site::codec_auto_probe) - kNumSites] ==
                      "codec.auto.probe",
              "Site and kUncompressedSiteNames are in different orders");
static_assert(forward_site(TpSite::head_in) == Site::head_in_fwd &&
                  backward_site(TpSite::embed) == Site::embed_bwd,
              "TpSite and its forward and backward sites are in different orders");

const std::vector<Site>& compressible_sites() {
  static const std::vector<Site> sites = [] {
    std::vector<Site> v;
    for (int i = 0; i < kNumSites; ++i) v.push_back(Site(i));
    return v;
  }();
  return sites;
}

const char* site_name(Site site) {
  const int i = int(site);
  if (i < kNumSites) return kSiteNames[size_t(i)].data();
  if (i < kNumAllSites) return kUncompressedSiteNames[size_t(i - kNumSites)].data();
  return "?";
}

const std::array<Site, kNumAllSites>& sites_by_name() {
  static const std::array<Site, kNumAllSites> sites = [] {
    std::array<Site, kNumAllSites> a;
    for (int i = 0; i < kNumAllSites; ++i) a[size_t(i)] = Site(i);
    std::sort(a.begin(), a.end(), [](Site x, Site y) {
      return std::string_view(site_name(x)) < std::string_view(site_name(y));
    });
    return a;
  }();
  return sites;
}

bool parse_site(std::string_view name, Site* out) {
  for (int i = 0; i < kNumAllSites; ++i) {
    if (name == site_name(Site(i))) {
      *out = Site(i);
      return true;
    }
  }
  return false;
}

bool site_is_per_layer(Site site) { return site >= Site::attn_in_fwd && site <= Site::mlp_out_bwd; }

std::string site_list() {
  std::string s;
  for (int i = 0; i < kNumSites; ++i) s += (i ? ", " : "") + std::string(kSiteNames[size_t(i)]);
  return s;
}

}  // namespace taco
