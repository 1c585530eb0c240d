#include "compression/sites.h"

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

const std::vector<Site>& all_sites() {
  static const std::vector<Site> sites = [] {
    std::vector<Site> v;
    for (int i = 0; i < kNumSites; ++i) v.push_back(Site(i));
    return v;
  }();
  return sites;
}

const char* site_name(Site site) {
  const int i = int(site);
  return i >= 0 && i < kNumSites ? kSiteNames[size_t(i)].data() : "?";
}

bool parse_site(std::string_view name, Site* out) {
  const int i = site_index(name);
  if (i < 0) return false;
  *out = Site(i);
  return true;
}

bool site_is_per_layer(Site site) { return site >= Site::attn_in_fwd && site <= Site::mlp_out_bwd; }

std::string site_list() {
  std::string s;
  for (int i = 0; i < kNumSites; ++i) s += (i ? ", " : "") + std::string(kSiteNames[size_t(i)]);
  return s;
}

}  // namespace taco
