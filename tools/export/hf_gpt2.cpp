#include "tools/export/hf_gpt2.h"

#include <algorithm>
#include <charconv>

#include "kernels/check.h"
#include "kernels/layernorm.h"

namespace taco {

std::vector<SafetensorsTensor> hf_gpt2_tensors(const GptDims& dims,
                                               const std::vector<float>& params) {
  const ParamLayout layout(dims, LayoutSpec{1, 0, 0, dims.n_layer, true, true});
  TACO_CHECK(params.size() == layout.total(), "hf_gpt2_tensors: params of another model");
  const float* base = params.data();
  std::vector<SafetensorsTensor> out;
  // A taco tensor as it is: a vector [rows], or an embedding's first `rows` rows [rows, C].
  auto same = [&](const std::string& hf, const std::string& name, int rows = -1) {
    const ParamInfo& p = layout.get(name);
    const bool embedding = name == "wte" || name == "wpe";
    const int r = rows < 0 ? p.rows : rows;
    std::vector<int64_t> shape = {r};
    if (embedding) shape.push_back(p.cols);
    TACO_CHECK(embedding || p.cols == 1, "hf_gpt2_tensors: " + name + " is not a vector");
    const float* src = base + p.offset;
    const size_t n = size_t(r) * p.cols;
    out.push_back({hf, shape, [src, n](float* dst) { std::copy_n(src, n, dst); }});
  };
  // A matrix [out, in] transposed into Conv1D's [in, out].
  auto transposed = [&](const std::string& hf, const std::string& name) {
    const ParamInfo& p = layout.get(name);
    const float* src = base + p.offset;
    const int rows = p.rows, cols = p.cols;  // [out, in]
    out.push_back({hf, {cols, rows}, [src, rows, cols](float* dst) {
                     for (int o = 0; o < rows; ++o)
                       for (int i = 0; i < cols; ++i)
                         dst[size_t(i) * rows + o] = src[size_t(o) * cols + i];
                   }});
  };
  same("transformer.wte.weight", "wte", dims.vocab_size);
  same("transformer.wpe.weight", "wpe");
  for (int l = 0; l < dims.n_layer; ++l) {
    // Built step by step: GCC 12 warns falsely (-Wrestrict) on "h" + std::to_string(l).
    std::string t = "h", hf = "transformer.h.";
    t += std::to_string(l) + ".";
    hf += std::to_string(l) + ".";
    same(hf + "ln_1.weight", t + "ln1_w");
    same(hf + "ln_1.bias", t + "ln1_b");
    transposed(hf + "attn.c_attn.weight", t + "qkv_w");
    same(hf + "attn.c_attn.bias", t + "qkv_b");
    transposed(hf + "attn.c_proj.weight", t + "proj_w");
    same(hf + "attn.c_proj.bias", t + "proj_b");
    same(hf + "ln_2.weight", t + "ln2_w");
    same(hf + "ln_2.bias", t + "ln2_b");
    transposed(hf + "mlp.c_fc.weight", t + "fc_w");
    same(hf + "mlp.c_fc.bias", t + "fc_b");
    transposed(hf + "mlp.c_proj.weight", t + "fc2_w");
    same(hf + "mlp.c_proj.bias", t + "fc2_b");
  }
  same("transformer.ln_f.weight", "lnf_w");
  same("transformer.ln_f.bias", "lnf_b");
  return out;
}

std::string hf_gpt2_config_json(const GptDims& dims, int eos_token) {
  char eps[32];
  const auto end = std::to_chars(eps, eps + sizeof eps, cpu::kLayerNormEps).ptr;  // "1e-05"
  const std::string eos = eos_token >= 0 ? std::to_string(eos_token) : "null";
  const auto i = [](int v) { return std::to_string(v); };
  return "{\n"
         "  \"model_type\": \"gpt2\",\n"
         "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
         "  \"vocab_size\": " +
         i(dims.vocab_size) +
         ",\n"
         "  \"n_positions\": " +
         i(dims.seq_len) +
         ",\n"
         "  \"n_ctx\": " +
         i(dims.seq_len) +
         ",\n"
         "  \"n_embd\": " +
         i(dims.d_model) +
         ",\n"
         "  \"n_layer\": " +
         i(dims.n_layer) +
         ",\n"
         "  \"n_head\": " +
         i(dims.n_head) +
         ",\n"
         "  \"n_inner\": " +
         i(4 * dims.d_model) +
         ",\n"
         "  \"activation_function\": \"gelu_new\",\n"
         "  \"layer_norm_epsilon\": " +
         std::string(eps, end) +
         ",\n"
         "  \"resid_pdrop\": 0.0,\n"
         "  \"embd_pdrop\": 0.0,\n"
         "  \"attn_pdrop\": 0.0,\n"
         "  \"initializer_range\": 0.02,\n"
         "  \"scale_attn_weights\": true,\n"
         "  \"scale_attn_by_inverse_layer_idx\": false,\n"
         "  \"reorder_and_upcast_attn\": false,\n"
         "  \"tie_word_embeddings\": true,\n"
         "  \"bos_token_id\": " +
         eos +
         ",\n"
         "  \"eos_token_id\": " +
         eos +
         ",\n"
         "  \"torch_dtype\": \"float32\",\n"
         "  \"use_cache\": true\n"
         "}\n";
}

}  // namespace taco
