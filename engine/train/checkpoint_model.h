// A checkpoint's whole state, whatever layout wrote it: every rank file of a checkpoint folder is
// read (and checked) and each rank's shards placed at their logical positions (tp shards, pp
// stages, ZeRO-1 optimizer shards over dp), giving the tp = pp = dp = 1 view of the parameters,
// AdamW moments and (GPU runs) fp32 master weights. taco-generate samples from it; taco-reshard
// writes it back out for another layout. Pure data movement: a round trip is bit-exact.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/tensor.h"
#include "engine/train/checkpoint.h"
#include "model/param_layout.h"

namespace taco {

// What must match for a checkpoint to load: model, parallel layout, precision and device.
std::string checkpoint_layout(const Config& c, const GptDims& d, DType dtype, DeviceKind device,
                              int world);

// A rank's sections as the trainer saves and loads them:
// `t` (host or device) as the host bytes of section `name`.
CheckpointPart host_copy(const std::string& name, const Tensor& t);
// Values of a host copy of a tensor that are NaN or Inf (f32 or bf16; other dtypes hold none).
size_t count_nonfinite(const CheckpointPart& part, DType dtype);
// Section `name` of `ck` into `t`; UserError naming `where` when it is missing or sized otherwise.
void load_section(const RankCheckpoint& ck, const std::string& name, const Tensor& t,
                  const std::string& where);

struct FullState {
  GptDims dims;  // tp = 1 dims (vocab padded to a multiple of 64)
  int64_t step = 0;
  DType dtype = DType::f32;  // of the parameters: f32 (CPU runs) or bf16 (GPU runs)
  DeviceKind device = DeviceKind::cpu;
  std::map<std::string, std::string> header;  // rank 0's header (seed, config, ...)
  // "params", "adam_m", "adam_v" and, for GPU runs, "master": each the tp = 1 layout's
  // ParamLayout(dims, {1, 0, 0, n_layer, true, true}).total() values (bf16 params widened).
  std::map<std::string, std::vector<float>> sections;
};

// `folder`: <dir>/step_N (with its COMPLETE marker); `cfg`: the config of the run that wrote it.
// Throws UserError naming the file for a missing, damaged or mismatching rank file.
// `params_only`: only the "params" section is kept (tools that run or export the model); the rank
// files that hold only optimizer state (ZeRO-1, dp > 0) are still checked, not kept.
FullState load_full_state(const std::string& folder, const Config& cfg, bool params_only = false);

// The newest complete checkpoint in `dir` that loads for `cfg`, as the trainer resumes: a damaged
// newer one is skipped with one warning line on stderr, prefixed "`tool`: warning: ". `folder`
// gets the one loaded. UserError when no checkpoint is complete (naming `dir`), or the oldest
// one's error, saying that none loads, when none does.
FullState load_newest_full_state(const std::string& dir, const Config& cfg, const char* tool,
                                 std::string* folder, bool params_only = false);

// A run as the tools (taco-generate, taco-reshard, taco-export) name it: `path` is a run folder
// (runs/<name>: its config.yaml and the newest checkpoint that loads, as above) or one checkpoint
// folder (.../ckpt/step_N, with the config.yaml two levels up); `config` ("" = as just said)
// names the run's config file instead. UserError (one line, naming the path) for a path that is
// not there, a missing config or no loadable checkpoint.
struct RunState {
  std::string config_path;
  Config config;
  std::string folder;  // the checkpoint loaded
  FullState state;
};
RunState load_run_state(const std::string& path, const std::string& config, const char* tool,
                        bool params_only = false);

// Writes `state` as a checkpoint folder for the layout of `target` (parallel.tp/pp/dp/zero; the
// same model), rank files and COMPLETE marker, single process. The folder must not exist.
void write_full_state(const FullState& state, const Config& target, const std::string& folder);

}  // namespace taco
