// Every communication site of a training step (docs/design.md §3) as one typed enum: the policy
// tables, the site doors (parallel/site_comm.h), their statistics and the watchdog all take a
// Site, so a misspelt site does not compile. Names of the compressible sites, their order and
// the layer-range syntax come from compression/spec.h (kSiteNames, site_index,
// parse_layer_ranges), which engine/config embeds; config validation checks rules by building
// the CompressionPolicy (compression/policy.h).
//
// Compressible sites, the names a compression rule may use:
//   per layer, one instance per transformer block:
//     attn.in.{fwd,bwd}  attn.out.{fwd,bwd}  mlp.in.{fwd,bwd}  mlp.out.{fwd,bwd}
//   model-wide, not tied to a block:
//     embed.{fwd,bwd}  head.in.{fwd,bwd}  pp.act  pp.grad  dp.grad
// Never compressed: they always take the backend's own collective, are accounted and watched
// under their names, and a rule naming one is refused:
//   sp.grad tied.grad dp.param (gradient sync), ce.max ce.sum (vocab-parallel cross-entropy),
//   loss.sum grad.norm stop.signal checkpoint startup exit (host values and raw MPI calls),
//   codec.auto codec.auto.probe (codec: auto's agreements and link probe).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compression/spec.h"

namespace taco {

enum class Site : uint8_t {
  // Compressible, in kSiteNames order (checked at compile time in sites.cpp).
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
  // Never compressed, in kUncompressedSiteNames order.
  sp_grad,           // sequence-parallel partial gradients summed over tp
  tied_grad,         // the tied embedding's two copies summed over the embedding group
  dp_param,          // ZeRO-1's all-gather of the updated shards
  ce_max,            // cross-entropy row max over the vocabulary shards
  ce_sum,            // cross-entropy exp-sums and target logits over the vocabulary shards
  loss_sum,          // the step's (or evaluation's) loss sum over the world
  grad_norm,         // the squared gradient norm's sum
  stop_signal,       // the largest stop signal over the world
  checkpoint,        // checkpoint agreements, plans and bad-step counts
  startup,           // start-up agreements and MPI set-up
  exit,              // MPI_Finalize
  codec_auto,        // codec: auto's agreement on its predicted times (parallel/codec_autotune.h)
  codec_auto_probe,  // codec: auto's timed all-reduces of the link
};

inline constexpr int kNumUncompressedSites = 13;
inline constexpr std::array<std::string_view, kNumUncompressedSites> kUncompressedSiteNames = {
    "sp.grad",     "tied.grad",  "dp.param", "ce.max", "ce.sum",     "loss.sum",        "grad.norm",
    "stop.signal", "checkpoint", "startup",  "exit",   "codec.auto", "codec.auto.probe"};
// Every Site: per-site tables over all of them have this many entries.
inline constexpr int kNumAllSites = kNumSites + kNumUncompressedSites;

// The base site of a tensor-parallel mapping (parallel/tensor_parallel.h): its forward runs at
// forward_site(), its backward at backward_site().
enum class TpSite : uint8_t { embed, attn_in, attn_out, mlp_in, mlp_out, head_in };

constexpr Site forward_site(TpSite site) {
  constexpr Site kForward[] = {Site::embed_fwd,  Site::attn_in_fwd, Site::attn_out_fwd,
                               Site::mlp_in_fwd, Site::mlp_out_fwd, Site::head_in_fwd};
  return kForward[int(site)];
}
constexpr Site backward_site(TpSite site) {
  constexpr Site kBackward[] = {Site::embed_bwd,  Site::attn_in_bwd, Site::attn_out_bwd,
                                Site::mlp_in_bwd, Site::mlp_out_bwd, Site::head_in_bwd};
  return kBackward[int(site)];
}

// The sites a compression rule may name, in order.
const std::vector<Site>& compressible_sites();
// Every Site, sorted by name: the order logs and metrics list sites in.
const std::array<Site, kNumAllSites>& sites_by_name();

const char* site_name(Site site);  // "attn.out.fwd"
// Any site's name, compressible or not.
bool parse_site(std::string_view name, Site* out);
constexpr bool site_is_compressible(Site site) { return int(site) < kNumSites; }
bool site_is_per_layer(Site site);  // attn.* and mlp.*

// "embed.fwd, embed.bwd, ..., dp.grad": the compressible sites, for error messages.
std::string site_list();

}  // namespace taco
