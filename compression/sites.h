// The communication sites of a training step (docs/design.md §3) as a typed enum for the hot path
// (policy tables, statistics). Names, their order and the layer-range syntax come from
// compression/spec.h (kSiteNames, site_index, parse_layer_ranges), which engine/config embeds;
// config validation checks rules by building the CompressionPolicy (compression/policy.h).
//
// Per-layer sites, one instance per transformer block:
//   attn.in.{fwd,bwd}  attn.out.{fwd,bwd}  mlp.in.{fwd,bwd}  mlp.out.{fwd,bwd}
// Model-wide sites, not tied to a block:
//   embed.{fwd,bwd}  head.in.{fwd,bwd}  pp.act  pp.grad  dp.grad
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compression/spec.h"

namespace taco {

// Same order as kSiteNames (checked at compile time in sites.cpp).
enum class Site : uint8_t {
  embed_fwd,
  embed_bwd,
  attn_in_fwd,
  attn_in_bwd,
  attn_out_fwd,
  attn_out_bwd,
  mlp_in_fwd,
  mlp_in_bwd,
  mlp_out_fwd,
  mlp_out_bwd,
  head_in_fwd,
  head_in_bwd,
  pp_act,
  pp_grad,
  dp_grad,
};

// Every site, in order.
const std::vector<Site>& all_sites();

const char* site_name(Site site);  // "attn.out.fwd"
bool parse_site(std::string_view name, Site* out);
bool site_is_per_layer(Site site);  // attn.* and mlp.*

// "embed.fwd, embed.bwd, ..., dp.grad": for error messages.
std::string site_list();

}  // namespace taco
