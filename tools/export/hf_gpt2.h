// taco's GPT-2 as Hugging Face's GPT2LMHeadModel stores it (transformers' modeling_gpt2):
//
//   taco (model/param_layout.h, tp = 1)     Hugging Face                      shape
//   wte [Vp, C], first V rows               transformer.wte.weight            [V, C]
//   wpe [T, C]                              transformer.wpe.weight            [T, C]
//   h{i}.ln1_w, ln1_b                       transformer.h.{i}.ln_1.weight/bias [C]
//   h{i}.qkv_w [3C, C], qkv_b [3C]          ...attn.c_attn.weight, .bias      [C, 3C], [3C]
//   h{i}.proj_w [C, C], proj_b              ...attn.c_proj.weight, .bias      [C, C], [C]
//   h{i}.ln2_w, ln2_b                       ...ln_2.weight, .bias             [C]
//   h{i}.fc_w [4C, C], fc_b [4C]            ...mlp.c_fc.weight, .bias         [C, 4C], [4C]
//   h{i}.fc2_w [C, 4C], fc2_b               ...mlp.c_proj.weight, .bias       [4C, C], [C]
//   lnf_w, lnf_b                            transformer.ln_f.weight, .bias    [C]
//
// taco's matrices are stored as nn.Linear's [out, in]; Hugging Face's Conv1D keeps [in, out], so
// every block matrix is transposed. The fused QKV rows are already in GPT-2's order (all query
// heads, then keys, then values; head h at rows h*hs..(h+1)*hs-1 of each), which is what the
// tp = 1 view of any tensor-parallel checkpoint gives (ParamLayout::to_logical). The tied head is
// wte: lm_head.weight is not written (transformers ties it to transformer.wte.weight). The
// padded vocabulary rows (zero, never in the loss) are dropped.
#pragma once

#include <string>
#include <vector>

#include "model/param_layout.h"
#include "tools/export/safetensors.h"

namespace taco {

// The tensors, in the order above; `params` is the tp = 1 layout of `dims` (FullState's
// "params"), which must outlive the tensors' fill functions.
std::vector<SafetensorsTensor> hf_gpt2_tensors(const GptDims& dims,
                                               const std::vector<float>& params);

// config.json for GPT2LMHeadModel: taco's shapes, real vocabulary, LayerNorm epsilon
// (kernels/layernorm.h), tanh GELU ("gelu_new", kernels/gelu.h), no dropout. `eos_token`: the id
// of <|endoftext|> for GPT-2 BPE runs, or -1 (bos/eos left null).
std::string hf_gpt2_config_json(const GptDims& dims, int eos_token);

}  // namespace taco
