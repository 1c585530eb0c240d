#include "model/param_layout.h"

#include <cmath>

#include "kernels/check.h"
#include "parallel/vocab_split.h"

namespace taco {

GptDims GptDims::make(int n_layer, int n_head, int d_model, int seq_len, int vocab_size, int tp) {
  return GptDims{n_layer, n_head, d_model, seq_len, vocab_size, padded_vocab_size(vocab_size, tp)};
}

size_t GptDims::num_params() const {
  size_t C = d_model;
  size_t per_layer =
      2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C;
  return size_t(padded_vocab) * C + size_t(seq_len) * C + n_layer * per_layer + 2 * C;
}

ParamLayout::ParamLayout(const GptDims& dims, const LayoutSpec& spec) : dims_(dims), spec_(spec) {
  const int C = dims.d_model;
  const float std = 0.02f;
  const float resid_std = 0.02f / std::sqrt(2.0f * dims.n_layer);  // GPT-2's scaled projections
  if (spec.has_embedding || spec.has_head) {
    add("wte", -1, dims.padded_vocab, C, Shard::rows, true, std, 0.f);
  }
  if (spec.has_embedding) add("wpe", -1, dims.seq_len, C, Shard::replicated, true, std, 0.f);
  for (int l = spec.layer_begin; l < spec.layer_end; ++l) {
    std::string h = "h" + std::to_string(l) + ".";
    add(h + "ln1_w", l, C, 1, Shard::replicated, false, 0.f, 1.f);
    add(h + "ln1_b", l, C, 1, Shard::replicated, false, 0.f, 0.f);
    add(h + "qkv_w", l, 3 * C, C, Shard::qkv_rows, true, std, 0.f);
    add(h + "qkv_b", l, 3 * C, 1, Shard::qkv_rows, false, 0.f, 0.f);
    add(h + "proj_w", l, C, C, Shard::cols, true, resid_std, 0.f);
    add(h + "proj_b", l, C, 1, Shard::replicated, false, 0.f, 0.f);
    add(h + "ln2_w", l, C, 1, Shard::replicated, false, 0.f, 1.f);
    add(h + "ln2_b", l, C, 1, Shard::replicated, false, 0.f, 0.f);
    add(h + "fc_w", l, 4 * C, C, Shard::rows, true, std, 0.f);
    add(h + "fc_b", l, 4 * C, 1, Shard::rows, false, 0.f, 0.f);
    add(h + "fc2_w", l, C, 4 * C, Shard::cols, true, resid_std, 0.f);
    add(h + "fc2_b", l, C, 1, Shard::replicated, false, 0.f, 0.f);
  }
  if (spec.has_head) {
    add("lnf_w", -1, C, 1, Shard::replicated, false, 0.f, 1.f);
    add("lnf_b", -1, C, 1, Shard::replicated, false, 0.f, 0.f);
  }
}

void ParamLayout::add(const std::string& name, int layer, int full_rows, int full_cols, Shard shard,
                      bool decay, float init_std, float init_value) {
  ParamInfo p;
  p.name = name;
  p.layer = layer;
  p.full_rows = full_rows;
  p.full_cols = full_cols;
  p.rows = full_rows;
  p.cols = full_cols;
  p.shard = shard;
  p.decay = decay;
  p.init_std = init_std;
  p.init_value = init_value;
  const int tp = spec_.tp;
  if (shard == Shard::rows || shard == Shard::qkv_rows) p.rows = full_rows / tp;
  if (shard == Shard::cols) p.cols = full_cols / tp;
  TACO_CHECK(p.rows * tp == full_rows || shard == Shard::replicated || shard == Shard::cols,
             name + " rows not divisible by tp");
  p.valid_rows = p.rows;
  if (name == "wte") {
    int start = spec_.tp_rank * p.rows;
    p.valid_rows = std::max(0, std::min(p.rows, dims_.vocab_size - start));
  }
  p.offset = total_;
  total_ += p.numel();
  params_.push_back(p);
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParamInfo& ParamLayout::get(const std::string& name) const {
  const ParamInfo* p = find(name);
  TACO_CHECK(p != nullptr, "no parameter named " + name + " on this rank");
  return *p;
}

void ParamLayout::to_logical(const ParamInfo& p, int r, int c, int* full_r, int* full_c) const {
  const int k = spec_.tp_rank;
  *full_r = r;
  *full_c = c;
  switch (p.shard) {
    case Shard::replicated:
      break;
    case Shard::rows:
      *full_r = k * p.rows + r;
      break;
    case Shard::cols:
      *full_c = k * p.cols + c;
      break;
    case Shard::qkv_rows: {
      // Local rows are [q shard; k shard; v shard], each of p.rows / 3 rows.
      int part = p.rows / 3;
      int which = r / part;  // 0 = q, 1 = k, 2 = v
      *full_r = which * (p.full_rows / 3) + k * part + (r % part);
      break;
    }
  }
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// A standard normal that depends only on (key, index): Box-Muller on two hashed uniforms.
float normal_at(uint64_t key, uint64_t index) {
  uint64_t a = splitmix64(key ^ splitmix64(2 * index));
  uint64_t b = splitmix64(key ^ splitmix64(2 * index + 1));
  double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  double u2 = double(b >> 11) * 0x1.0p-53;          // [0, 1)
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace

void init_params_gpt2(const ParamLayout& layout, uint64_t seed, float* out) {
  const int vocab = layout.dims().vocab_size;
  for (const ParamInfo& p : layout.params()) {
    const uint64_t key = splitmix64(seed ^ hash_name(p.name));
    float* dst = out + p.offset;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < p.rows; ++r) {
      for (int c = 0; c < p.cols; ++c) {
        int fr, fc;
        layout.to_logical(p, r, c, &fr, &fc);
        float v = p.init_value;
        if (p.init_std > 0.f) v = p.init_std * normal_at(key, uint64_t(fr) * p.full_cols + fc);
        if (p.name == "wte" && fr >= vocab) v = 0.f;  // padded vocab rows stay zero
        dst[size_t(r) * p.cols + c] = v;
      }
    }
  }
}

}  // namespace taco
