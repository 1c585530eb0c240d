// codec: auto's decisions in the run log (parallel/codec_autotune.h). Groups decide lazily, at
// the first use of each (site, layer, message size) (the pipeline's messages before the first
// step), so the decisions of a step are known when it ends: after every step, world rank 0 prints
// those its groups made during it (the whole table after the first step), and every
// auto_recheck_steps steps every rank asks its groups to measure again at the next use; the
// decisions of a re-check print only where they changed.
#pragma once

#include <vector>

#include "parallel/compressed_site_comm.h"

namespace taco {

// Call on every rank after step `step` (0-based) ends; `print`: this rank logs (world rank 0).
void log_codec_auto(const std::vector<CompressedSiteComm*>& comms, const CompressionPolicy& policy,
                    int step, bool print);

}  // namespace taco
