// A checkpoint's whole model, whatever layout wrote it: every rank file of a checkpoint folder
// is read (and checked) and each rank's shard placed at its logical position (tp shards, pp
// stages; dp replicas are skipped), giving the parameters of the tp = pp = 1 layout in fp32.
// Used by taco-generate; a resharding converter would start from the same function.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "model/param_layout.h"

namespace taco {

struct FullModel {
  GptDims dims;               // tp = 1 dims (vocab padded to a multiple of 64)
  std::vector<float> params;  // ParamLayout(dims, {1, 0, 0, n_layer, true, true}).total()
  int64_t step = 0;
};

// `folder`: <dir>/step_N (with its COMPLETE marker); `cfg`: the run's config (config.yaml).
// Throws UserError naming the file for a missing, damaged or mismatching rank file.
FullModel load_full_model(const std::string& folder, const Config& cfg);

}  // namespace taco
