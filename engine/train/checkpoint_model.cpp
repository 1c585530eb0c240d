#include "engine/train/checkpoint_model.h"

#include <cstring>
#include <filesystem>

#include "engine/train/checkpoint.h"
#include "kernels/check.h"
#include "kernels/dtype.h"
#include "parallel/process_grid.h"

namespace taco {

FullModel load_full_model(const std::string& folder, const Config& cfg) {
  const auto& m = cfg.model;
  const auto& par = cfg.parallel;
  if (!std::filesystem::exists(folder + "/COMPLETE"))
    throw UserError(folder + ": no COMPLETE marker: not a finished checkpoint");
  FullModel out;
  out.dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, 1);
  const ParamLayout full(out.dims, LayoutSpec{1, 0, 0, m.n_layer, true, true});
  out.params.assign(full.total(), 0.f);
  std::vector<char> filled(full.params().size(), 0);

  const GridShape shape{par.tp, par.pp, par.dp};
  const GptDims rank_dims =
      GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp);
  const int per_stage = m.n_layer / par.pp;
  for (int rank = 0; rank < par.tp * par.pp; ++rank) {  // dp replica 0 holds everything
    const GridCoord c = grid_coord(shape, rank);
    const std::string path = folder + "/" + rank_file_name(rank);
    const RankCheckpoint ck = read_rank_checkpoint(path);
    out.step = std::stoll(ck.header.count("step") ? ck.header.at("step") : "0");
    LayoutSpec spec;
    spec.tp = par.tp;
    spec.tp_rank = c.tp;
    spec.layer_begin = c.pp * per_stage;
    spec.layer_end = spec.layer_begin + per_stage;
    spec.has_embedding = c.pp == 0;
    spec.has_head = c.pp == par.pp - 1;
    const ParamLayout layout(rank_dims, spec);
    const CheckpointPart* params = ck.find("params");
    const bool is_bf16 = params && params->bytes.size() == layout.total() * sizeof(bf16);
    if (!params || (!is_bf16 && params->bytes.size() != layout.total() * sizeof(float)))
      throw UserError(path + ": its parameters do not fit the model in config.yaml (" +
                      std::to_string(params ? params->bytes.size() : 0) +
                      " bytes); is this the run's own config?");
    auto value = [&](size_t i) {
      if (!is_bf16) {
        float f;
        std::memcpy(&f, params->bytes.data() + i * sizeof(float), sizeof f);
        return f;
      }
      bf16 h;
      std::memcpy(&h, params->bytes.data() + i * sizeof(bf16), sizeof h);
      return bf16_to_float(h);
    };
    for (const ParamInfo& p : layout.params()) {
      const ParamInfo* q = full.find(p.name);
      TACO_CHECK(q != nullptr, "load_full_model: parameter " + p.name + " has no place");
      filled[size_t(q - full.params().data())] = 1;
      for (int r = 0; r < p.rows; ++r)
        for (int col = 0; col < p.cols; ++col) {
          int R = 0, C = 0;
          layout.to_logical(p, r, col, &R, &C);
          if (R >= q->full_rows) continue;  // vocab padding of a wider tp split
          out.params[q->offset + size_t(R) * q->full_cols + C] =
              value(p.offset + size_t(r) * p.cols + col);
        }
    }
  }
  for (size_t i = 0; i < filled.size(); ++i)
    if (!filled[i])
      throw UserError(folder + ": no rank holds parameter " + full.params()[i].name +
                      "; the checkpoint does not match config.yaml's layout");
  return out;
}

}  // namespace taco
