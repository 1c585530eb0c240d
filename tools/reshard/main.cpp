// taco-reshard: rewrites a checkpoint for another parallel layout (tp, pp, dp, ZeRO-1), so a run
// can continue on a different number or arrangement of ranks.
//
//   taco-reshard RUN_DIR|CHECKPOINT_DIR --set parallel.tp=2 [--set key=value ...] [--config FILE]
//
// The target config is the source run's config.yaml with the --set overrides (set run.name, or
// run.dir, to a new place: the output goes to <run.dir>/<run.name>/, which must hold no
// checkpoint yet). It writes config.yaml there and ckpt/step_N/ with the parameters, fp32 master
// weights and AdamW moments placed for the new layout (pure data movement: resharding back gives
// the same bits), then prints the command that continues the run. Single process, on the CPU.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_model.h"
#include "kernels/check.h"
#include "parallel/process_grid.h"
#include "tools/tool_main.h"

namespace {

namespace fs = std::filesystem;
using taco::UserError;

const char* const kUsage =
    "usage: taco-reshard RUN_DIR|CHECKPOINT_DIR --set key=value [--set ...] [--config FILE]\n"
    "\n"
    "Writes the checkpoint (a run's newest complete one that loads, or the folder given) for the\n"
    "layout that the --set overrides give the run's config.yaml, into <run.dir>/<run.name>/ of\n"
    "that target config (set run.name to a new name). Pure data movement, bit-exact; runs on\n"
    "the CPU without mpirun.\n"
    "\n"
    "  RUN_DIR         runs/<name>: its config.yaml and newest complete checkpoint\n"
    "  CHECKPOINT_DIR  one checkpoint folder (.../ckpt/step_N); config.yaml from two levels up\n"
    "  --set K=V       a key of the target config, as taco-train takes it: the layout\n"
    "                  (parallel.tp, parallel.pp, parallel.dp, parallel.zero), run.name, ...\n"
    "  --config FILE   the run's config when it is not where described above\n"
    "\n"
    "Example:\n"
    "  taco-reshard runs/tiny-cpu --set parallel.tp=1 --set run.name=tiny-cpu-tp1\n"
    "  taco-train runs/tiny-cpu-tp1/config.yaml --resume\n"
    "Every config key: docs/config-reference.md.\n";

int run(int argc, char** argv) {
  std::string src, config_path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(a + ": missing value (see --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--set") {
      overrides.push_back(value());
    } else if (a == "--config") {
      config_path = value();
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(a + ": unknown option (see --help)");
    } else if (src.empty()) {
      src = a;
    } else {
      throw UserError(a + ": only one RUN_DIR or CHECKPOINT_DIR (see --help)");
    }
  }
  if (src.empty()) throw UserError("missing RUN_DIR or CHECKPOINT_DIR (see --help)");
  if (overrides.empty()) throw UserError("nothing to change: give the new layout with --set");

  const taco::RunState loaded = taco::load_run_state(src, config_path, "taco-reshard");
  config_path = loaded.config_path;
  const taco::Config& source = loaded.config;
  const taco::FullState& state = loaded.state;
  const std::string& folder = loaded.folder;
  std::ifstream in(config_path);
  const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  taco::Config target = taco::load_config_text(yaml, config_path, overrides);
  target.checkpoint.dir = "";  // the output run keeps its checkpoints beside it
  const auto& sm = source.model;
  const auto& tm = target.model;
  if (sm.n_layer != tm.n_layer || sm.n_head != tm.n_head || sm.d_model != tm.d_model ||
      sm.seq_len != tm.seq_len || sm.vocab_size != tm.vocab_size) {
    throw UserError(
        "--set: the model section changed; taco-reshard moves a model between "
        "layouts, it does not change the model");
  }
  const auto& tp = target.parallel;
  taco::validate_grid(
      {tp.tp, tp.pp, tp.dp}, tp.tp * tp.pp * tp.dp,
      {tm.n_head, tm.d_model, tm.n_layer, tm.vocab_size, tm.seq_len, tp.sequence_parallel});
  const fs::path out_dir = fs::path(target.run.dir) / target.run.name;
  if (fs::weakly_canonical(out_dir) == fs::weakly_canonical(fs::path(folder) / ".." / ".."))
    throw UserError("the output run " + out_dir.string() +
                    " is the source run; --set run.name=NEW (or run.dir) for the resharded one");
  if (!taco::newest_complete_checkpoint((out_dir / "ckpt").string(), nullptr).empty())
    throw UserError(out_dir.string() + "/ckpt already holds checkpoints; choose another run.name");

  const std::string dst = (out_dir / "ckpt" / taco::checkpoint_step_name(state.step)).string();
  fs::create_directories(out_dir / "ckpt");
  taco::write_full_state(state, target, dst);
  std::ofstream(out_dir / "config.yaml") << taco::config_to_yaml(target);
  const int world = tp.tp * tp.pp * tp.dp;
  std::printf("taco-reshard: %s (step %lld) -> %s for %s\n", folder.c_str(), (long long)state.step,
              dst.c_str(), taco::layout_string({tp.tp, tp.pp, tp.dp}).c_str());
  std::printf("continue with: %s%s/taco-train %s --resume\n",
              world > 1 ? ("mpirun -np " + std::to_string(world) + " ").c_str() : "",
              fs::path(argv[0]).parent_path().string().c_str(),
              (out_dir / "config.yaml").string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return taco::run_tool("taco-reshard", [&] { return run(argc, argv); });
}
