#include "engine/train/codec_auto_log.h"

#include <spdlog/spdlog.h>

#include <string>

namespace taco {

void log_codec_auto(const std::vector<CompressedSiteComm*>& comms, const CompressionPolicy& policy,
                    int step, bool print) {
  for (CompressedSiteComm* comm : comms) {
    CodecAutotune* tune = comm ? comm->autotune() : nullptr;
    if (!tune) continue;
    const std::vector<AutoDecision> all = tune->take_new_decisions();
    if (!print || all.empty()) continue;
    std::vector<AutoDecision> changed;
    bool rechecked = false;
    for (const AutoDecision& d : all) {
      rechecked = rechecked || d.previous.has_value();
      if (d.previous && *d.previous != d.prediction.compress) changed.push_back(d);
    }
    std::string table;
    if (!rechecked) {
      table = auto_decision_table(all, *tune, policy.auto_margin());
    } else if (changed.empty()) {
      spdlog::info("codec: auto re-checked {} decision(s) on group {} in step {}: none changed",
                   all.size(), tune->group(), step + 1);
    } else {
      table = auto_decision_table(changed, *tune, policy.auto_margin());
    }
    if (table.empty()) continue;
    if (table.back() == '\n') table.pop_back();
    spdlog::info("{} in step {}:\n{}",
                 rechecked ? "codec: auto re-check changed decisions" : "codec: auto decided",
                 step + 1, table);
  }
  const int every = policy.auto_recheck_steps();
  if (every > 0 && (step + 1) % every == 0) {
    for (CompressedSiteComm* comm : comms)
      if (comm && comm->autotune()) comm->autotune()->recheck();
  }
}

}  // namespace taco
