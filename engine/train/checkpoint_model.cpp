#include "engine/train/checkpoint_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/runtime/arena.h"
#include "engine/train/checkpoint.h"
#include "kernels/check.h"
#include "kernels/dtype.h"
#include "parallel/process_grid.h"
#include "parallel/zero_shard.h"

namespace taco {

namespace fs = std::filesystem;

std::string checkpoint_layout(const Config& c, const GptDims& d, DType dtype, DeviceKind device,
                              int world) {
  const auto& p = c.parallel;
  return fmt::format(
      "tp={} pp={} dp={} zero={} sp={} world={} | L={} H={} C={} T={} V={} | {} on {}", p.tp, p.pp,
      p.dp, p.zero, p.sequence_parallel ? 1 : 0, world, d.n_layer, d.n_head, d.d_model, d.seq_len,
      d.vocab_size, dtype_name(dtype), device == DeviceKind::cuda ? "cuda" : "cpu");
}

namespace {

const char* const kSections[] = {"params", "adam_m", "adam_v", "master"};

// One rank's place in a layout: its parameter layout and, under ZeRO-1, the range of its
// (tp, pp) flat buffer whose optimizer state it holds (the whole buffer without ZeRO-1).
struct RankPlace {
  ParamLayout layout;
  ZeroShard shard;
};

RankPlace place_of(const Config& cfg, int rank) {
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  const GridCoord c = grid_coord(GridShape{par.tp, par.pp, par.dp}, rank);
  LayoutSpec spec;
  spec.tp = par.tp;
  spec.tp_rank = c.tp;
  const int per_stage = m.n_layer / par.pp;
  spec.layer_begin = c.pp * per_stage;
  spec.layer_end = spec.layer_begin + per_stage;
  spec.has_embedding = c.pp == 0;
  spec.has_head = c.pp == par.pp - 1;
  ParamLayout layout(GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp),
                     spec);
  const size_t total = layout.total();
  // As the trainer splits the flat buffer.
  return RankPlace{std::move(layout),
                   par.zero == 1 ? ZeroShard(total, par.dp, c.dp) : ZeroShard(total)};
}

float read_value(const CheckpointPart& s, size_t i, bool bf16_values) {
  if (bf16_values) {
    bf16 h;
    std::memcpy(&h, s.bytes.data() + i * sizeof(bf16), sizeof h);
    return bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, s.bytes.data() + i * sizeof(float), sizeof f);
  return f;
}

// Calls f(local flat index, full flat index) for every element of `local` that has a place in
// the tp = 1 layout `full` (vocab padding rows of a wider tp split have none).
template <class F>
void for_each_element(const ParamLayout& local, const ParamLayout& full, F&& f) {
  for (const ParamInfo& p : local.params()) {
    const ParamInfo* q = full.find(p.name);
    TACO_CHECK(q != nullptr, "checkpoint model: parameter " + p.name + " has no place");
    for (int r = 0; r < p.rows; ++r)
      for (int col = 0; col < p.cols; ++col) {
        int R = 0, C = 0;
        local.to_logical(p, r, col, &R, &C);
        if (R < q->full_rows)
          f(p.offset + size_t(r) * p.cols + col, q->offset + size_t(R) * q->full_cols + C);
      }
  }
}

}  // namespace

CheckpointPart host_copy(const std::string& name, const Tensor& t) {
  CheckpointPart s{name, std::vector<uint8_t>(t.bytes())};
  if (!t.empty()) device_copy(s.bytes.data(), t.data, t.bytes(), DeviceKind::cpu, t.device);
  return s;
}

size_t count_nonfinite(const CheckpointPart& part, DType dtype) {
  size_t bad = 0;
  const size_t n = part.bytes.size() / std::max<size_t>(1, dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    float v = 0;
    if (dtype == DType::f32) {
      std::memcpy(&v, part.bytes.data() + 4 * i, 4);
    } else if (dtype == DType::bf16) {
      bf16 h;
      std::memcpy(&h, part.bytes.data() + 2 * i, 2);
      v = bf16_to_float(h);
    }
    bad += std::isfinite(v) ? 0 : 1;
  }
  return bad;
}

void load_section(const RankCheckpoint& ck, const std::string& name, const Tensor& t,
                  const std::string& where) {
  const CheckpointPart* s = ck.find(name);
  if (!s || s->bytes.size() != t.bytes())
    throw UserError(where + ": section '" + name + "' is missing or has another size (" +
                    std::to_string(s ? s->bytes.size() : 0) + " bytes, expected " +
                    std::to_string(t.bytes()) + ")");
  if (!t.empty()) device_copy(t.data, s->bytes.data(), t.bytes(), t.device, DeviceKind::cpu);
}

FullState load_full_state(const std::string& folder, const Config& cfg, bool params_only) {
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  if (!fs::exists(folder + "/COMPLETE"))
    throw UserError(folder + ": no COMPLETE marker: not a finished checkpoint");
  FullState out;
  out.dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, 1);
  const ParamLayout full(out.dims, LayoutSpec{1, 0, 0, m.n_layer, true, true});
  std::vector<char> filled(full.params().size(), 0);

  const int world = par.tp * par.pp * par.dp;
  for (int rank = 0; rank < world; ++rank) {
    const RankPlace place = place_of(cfg, rank);
    const GridCoord c = grid_coord(GridShape{par.tp, par.pp, par.dp}, rank);
    const bool zero = par.zero == 1;
    if (!zero && c.dp != 0) continue;  // dp replicas hold the same state
    const std::string path = folder + "/" + rank_file_name(rank);
    if (params_only && c.dp != 0) {  // ZeRO-1 optimizer shards only: checked, not kept
      verify_rank_checkpoint(path);
      continue;
    }
    const RankCheckpoint ck = read_rank_checkpoint(path);
    const size_t total = place.layout.total(), shard = place.shard.size();
    const CheckpointPart* params = ck.find("params");
    const bool bf16_params = params && params->bytes.size() == total * sizeof(bf16);
    if (!params || (!bf16_params && params->bytes.size() != total * sizeof(float)))
      throw UserError(path + ": its parameters do not fit the model in the run's config (" +
                      std::to_string(params ? params->bytes.size() : 0) +
                      " bytes); is this the config of the run that wrote it?");
    if (rank == 0) {
      out.header = ck.header;
      out.step = std::stoll(ck.header.count("step") ? ck.header.at("step") : "0");
      out.dtype = bf16_params ? DType::bf16 : DType::f32;
      out.device = bf16_params ? DeviceKind::cuda : DeviceKind::cpu;
    }
    for (const char* name : kSections) {
      const CheckpointPart* s = ck.find(name);
      const bool is_params = std::string(name) == "params";
      if (!s || s->bytes.empty() || (params_only && !is_params)) continue;  // no master on CPUs
      const size_t expected = is_params ? total * (bf16_params ? 2 : 4) : shard * sizeof(float);
      if (s->bytes.size() != expected)
        throw UserError(path + ": section " + name + " holds " + std::to_string(s->bytes.size()) +
                        " bytes, expected " + std::to_string(expected));
      std::vector<float>& dst = out.sections[name];
      dst.resize(full.total(), 0.f);
      // Parameters: every (tp, pp) rank of dp replica 0; optimizer state: each rank's shard.
      if (is_params && c.dp != 0) continue;
      const size_t lo = is_params ? 0 : place.shard.begin(),
                   hi = is_params ? total : place.shard.end();
      for_each_element(place.layout, full, [&](size_t local, size_t whole) {
        if (local >= lo && local < hi)
          dst[whole] = read_value(*s, local - lo, is_params && bf16_params);
      });
    }
    for (const ParamInfo& p : place.layout.params())
      filled[size_t(full.find(p.name) - full.params().data())] = 1;
  }
  for (size_t i = 0; i < filled.size(); ++i)
    if (!filled[i])
      throw UserError(folder + ": no rank holds parameter " + full.params()[i].name +
                      "; the checkpoint does not match the run's config");
  return out;
}

FullState load_newest_full_state(const std::string& dir, const Config& cfg, const char* tool,
                                 std::string* folder, bool params_only) {
  const std::vector<std::string> folders = complete_checkpoints(dir);
  if (folders.empty())
    throw UserError(dir +
                    ": no complete checkpoint; train first (taco-train saves one at the end and "
                    "on SIGINT/SIGTERM)");
  for (size_t i = 0;; ++i) {
    try {
      FullState full = load_full_state(folders[i], cfg, params_only);
      *folder = folders[i];
      return full;
    } catch (const UserError& e) {
      if (i + 1 == folders.size())
        throw UserError(std::string(e.what()) + "; none of the " + std::to_string(folders.size()) +
                        " complete checkpoint(s) in " + dir +
                        " loads: restore the damaged file or train again");
      std::fprintf(stderr, "%s: warning: %s; trying an older checkpoint\n", tool, e.what());
    }
  }
}

RunState load_run_state(const std::string& path, const std::string& config, const char* tool,
                        bool params_only) {
  if (!fs::exists(path))
    throw UserError(path +
                    ": no such folder; give a run folder (runs/<name>, holding config.yaml) or "
                    "one of its checkpoint folders (runs/<name>/ckpt/step_N)");
  RunState run;
  run.config_path = config;
  const bool checkpoint_folder = fs::exists(fs::path(path) / "COMPLETE");
  if (run.config_path.empty())
    run.config_path = (checkpoint_folder ? fs::path(path) / ".." / ".." / "config.yaml"
                                         : fs::path(path) / "config.yaml")
                          .string();
  if (!fs::exists(run.config_path))
    throw UserError(run.config_path + ": no config.yaml for this run; pass --config FILE");
  run.config = load_config_file(run.config_path, {});
  if (checkpoint_folder) {
    run.folder = path;
    run.state = load_full_state(path, run.config, params_only);
  } else {
    // The newest checkpoint that loads, as the trainer resumes: a damaged newer one is skipped.
    const std::string dir = run.config.checkpoint.dir.empty() ? (fs::path(path) / "ckpt").string()
                                                              : run.config.checkpoint.dir;
    run.state = load_newest_full_state(dir, run.config, tool, &run.folder, params_only);
  }
  return run;
}

void write_full_state(const FullState& state, const Config& target, const std::string& folder) {
  const auto& par = target.parallel;
  const auto& m = target.model;
  TACO_CHECK(m.n_layer == state.dims.n_layer && m.d_model == state.dims.d_model &&
                 m.n_head == state.dims.n_head && m.vocab_size == state.dims.vocab_size,
             "write_full_state: the target config holds another model");
  if (fs::exists(folder)) throw UserError(folder + ": exists; choose a new output folder");
  fs::create_directories(folder);
  const ParamLayout full(state.dims, LayoutSpec{1, 0, 0, state.dims.n_layer, true, true});
  const int world = par.tp * par.pp * par.dp;
  const GptDims rank_dims =
      GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp);
  const std::string layout = checkpoint_layout(target, rank_dims, state.dtype, state.device, world);
  for (int rank = 0; rank < world; ++rank) {
    const RankPlace place = place_of(target, rank);
    const size_t total = place.layout.total(), shard = place.shard.size();
    std::vector<CheckpointPart> parts;
    for (const char* name : kSections) {
      const bool is_params = std::string(name) == "params";
      const auto it = state.sections.find(name);
      CheckpointPart part{name, {}};
      if (it != state.sections.end()) {
        const std::vector<float>& src = it->second;
        const size_t lo = is_params ? 0 : place.shard.begin(), n = is_params ? total : shard;
        const bool as_bf16 = is_params && state.dtype == DType::bf16;
        part.bytes.assign(n * (as_bf16 ? sizeof(bf16) : sizeof(float)), 0);
        for_each_element(place.layout, full, [&](size_t local, size_t whole) {
          if (local < lo || local >= lo + n) return;
          const size_t i = local - lo;
          if (as_bf16) {
            const bf16 h = float_to_bf16(src[whole]);  // exact: the values came from bf16
            std::memcpy(part.bytes.data() + i * sizeof(bf16), &h, sizeof h);
          } else {
            std::memcpy(part.bytes.data() + i * sizeof(float), &src[whole], sizeof(float));
          }
        });
      }
      parts.push_back(std::move(part));
    }
    std::map<std::string, std::string> header = state.header;
    header["layout"] = layout;
    header["step"] = std::to_string(state.step);
    header["rank"] = std::to_string(rank);
    header["world"] = std::to_string(world);
    write_rank_checkpoint(folder + "/" + rank_file_name(rank), header, parts);
  }
  std::ofstream marker(folder + "/COMPLETE");
  marker << "layout=" << layout << "\nstep=" << state.step << "\nworld=" << world << "\n";
  if (!marker) throw Error(folder + "/COMPLETE: cannot write the checkpoint marker", 1);
}

}  // namespace taco
