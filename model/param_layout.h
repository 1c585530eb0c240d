// The GPT-2 parameters of one rank as named views into one contiguous buffer.
//
// Logical (unsharded) shapes, with C = d_model, L = n_layer, Vp = padded vocab:
//   wte [Vp, C] (tied LM head), wpe [T, C]
//   per layer l: ln1_w, ln1_b [C]; qkv_w [3C, C], qkv_b [3C]; proj_w [C, C], proj_b [C];
//                ln2_w, ln2_b [C]; fc_w [4C, C], fc_b [4C]; fc2_w [C, 4C], fc2_b [C]
//   lnf_w, lnf_b [C]
// Tensor parallelism (Megatron) shards them over tp ranks:
//   column-parallel (rows split): qkv_w/qkv_b (q, k and v rows each split, so a rank holds whole
//   heads), fc_w/fc_b; row-parallel (columns split): proj_w, fc2_w; vocab-parallel: wte rows;
//   everything else is replicated.
// Pipeline parallelism keeps only a stage's layers, the embedding on the first stage and
// lnf + the tied head (its own copy of wte) on the last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace taco {

struct GptDims {
  int n_layer = 0;
  int n_head = 0;
  int d_model = 0;
  int seq_len = 0;
  int vocab_size = 0;    // real vocabulary
  int padded_vocab = 0;  // padded_vocab_size (parallel/process_grid.h): 64 at tp = 1, 128 * tp

  static GptDims make(int n_layer, int n_head, int d_model, int seq_len, int vocab_size, int tp);
  // Parameters of the whole (unsharded) model, padded vocab rows included.
  size_t num_params() const;
};

// Which slice of the logical tensor a rank holds.
enum class Shard { replicated, rows, cols, qkv_rows };

struct ParamInfo {
  std::string name;                  // "wte", "h3.qkv_w", "lnf_b", ...
  int layer = -1;                    // -1 for embeddings and the final LayerNorm
  int full_rows = 0, full_cols = 0;  // logical shape (a vector is rows x 1)
  int rows = 0, cols = 0;            // this rank's shard
  Shard shard = Shard::replicated;
  bool decay = false;    // weight decay applies (matrices, not biases or LayerNorm)
  float init_std = 0.f;  // N(0, std) init; 0 = constant init_value
  float init_value = 0.f;
  int valid_rows = 0;  // rows holding real data (wte: vocab rows below vocab_size)
  size_t offset = 0;   // elements from the start of the buffer
  size_t numel() const { return size_t(rows) * cols; }
};

struct LayoutSpec {
  int tp = 1, tp_rank = 0;
  int layer_begin = 0, layer_end = 0;  // this pipeline stage's layers
  bool has_embedding = true;           // first stage
  bool has_head = true;                // last stage
};

class ParamLayout {
 public:
  ParamLayout(const GptDims& dims, const LayoutSpec& spec);

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& get(const std::string& name) const;
  const ParamInfo* find(const std::string& name) const;
  size_t total() const { return total_; }
  const GptDims& dims() const { return dims_; }
  const LayoutSpec& spec() const { return spec_; }

  // Global coordinates of local element (r, c) of a parameter: the logical row and column.
  void to_logical(const ParamInfo& p, int r, int c, int* full_r, int* full_c) const;

 private:
  void add(const std::string& name, int layer, int full_rows, int full_cols, Shard shard,
           bool decay, float init_std, float init_value);
  GptDims dims_;
  LayoutSpec spec_;
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
};

// GPT-2 initialization, identical for every layout: element (r, c) of each logical tensor is a
// pure function of (seed, parameter name, r, c), so each rank fills only its shard and any
// tp/pp split starts from the same model. `out` holds layout.total() floats.
void init_params_gpt2(const ParamLayout& layout, uint64_t seed, float* out);

}  // namespace taco
