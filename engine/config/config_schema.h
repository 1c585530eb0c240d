// Internal to engine/config: the keys of each section, bound to the struct fields they fill, and
// the values each enum key accepts. One table serves reading (config_read.cpp) and writing
// (config_emit.cpp), so the two cannot disagree on a name.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>
#include <variant>
#include <vector>

#include "compression/codec_options.h"
#include "engine/config/config.h"

namespace taco::config_detail {

using Choices = std::vector<std::string>;

// The names of every value of an enum that compression/ owns, in its order.
template <class E, size_t N>
Choices names_of(const E (&values)[N], const char* (*name)(E)) {
  Choices out;
  for (E v : values) out.emplace_back(name(v));
  return out;
}

inline const Choices kBackends = {"auto", "nccl", "mpi"};
inline const Choices kStagedReduce = {"auto", "native", "two_shot"};
inline const Choices kPrecisions = {"auto", "fp32", "bf16"};
inline const Choices kDevices = {"auto", "cpu", "cuda"};
inline const Choices kCodecs = names_of(kCodecKinds, codec_kind_name);
// `codec` also takes auto (CodecSpec::codec_auto); `candidate` takes the codecs but none.
inline const Choices kCodecChoices = [] {
  Choices c = kCodecs;
  c.emplace_back("auto");
  return c;
}();
inline const Choices kCandidates(kCodecs.begin() + 1, kCodecs.end());
inline const Choices kFormats = names_of(kFp8Formats, fp8_format_name);
inline const Choices kScales = names_of(kFp8ScaleModes, fp8_scales_name);
inline const Choices kResume = {"false", "true", "auto"};
inline const Choices kNonfinite = {"stop", "skip"};
inline const Choices kCudaGraph = {"auto", "off"};
// The group sizes a codec spec accepts, besides "auto" (stored as 0).
inline const std::vector<int> kGroups(std::begin(kGroupSizes), std::end(kGroupSizes));

// A field is a plain value or one of compression/'s enums (read and written by name; its Field
// lists the names as choices).
template <class S>
using Member = std::variant<int S::*, int64_t S::*, uint64_t S::*, double S::*, bool S::*,
                            std::string S::*, CodecKind S::*, Fp8Format S::*, Fp8Scales S::*>;

// One key of a section: its name, the struct field it fills, what it means (one or two sentences
// for docs/config-reference.md and taco-train --help; never empty, tests/unit/
// test_config_reference.cpp checks) and, for a string that is an enum, the values it accepts.
template <class S>
struct Field {
  const char* key;
  Member<S> member;
  const char* doc;
  Choices choices = {};  // non-empty: the string must be one of these
};

inline const std::vector<Field<RunSection>> kRunFields = {
    {"name", &RunSection::name,
     "Name of the run: its outputs (config.yaml, log.txt, metrics.jsonl, ckpt/) go to "
     "`<dir>/<name>/`. No '/' allowed."},
    {"dir", &RunSection::dir, "Folder that holds the run folders."},
};

inline const std::vector<Field<ModelSection>> kModelFields = {
    {"n_layer", &ModelSection::n_layer,
     "Transformer blocks. Required in a file, as are the other four model keys."},
    {"n_head", &ModelSection::n_head,
     "Attention heads per block; parallel.tp must divide it. Must divide d_model."},
    {"d_model", &ModelSection::d_model,
     "Hidden size (width of the residual stream); the MLP is 4 x d_model wide."},
    {"seq_len", &ModelSection::seq_len, "Tokens per training window (context length)."},
    {"vocab_size", &ModelSection::vocab_size,
     "Token ids the model accepts: 256 for taco-prep's byte tokenizer, 50257 for GPT-2 BPE. "
     "Padded internally to a multiple of 64 (tp = 1) or 128 x tp; the padding never reaches "
     "the loss."},
};

inline const std::vector<Field<ParallelSection>> kParallelFields = {
    {"tp", &ParallelSection::tp,
     "Tensor-parallel ranks: heads, MLP width and vocabulary are split over them. The world "
     "size must equal tp x pp x dp."},
    {"pp", &ParallelSection::pp, "Pipeline stages (1F1B schedule); must divide model.n_layer."},
    {"dp", &ParallelSection::dp, "Data-parallel replicas; gradients are summed over them."},
    {"sequence_parallel", &ParallelSection::sequence_parallel,
     "Sequence parallelism: outside the tensor-parallel regions (LayerNorms, residual adds) "
     "each tp rank holds 1/tp of the tokens, so the *.out sites and embed.fwd reduce-scatter and "
     "the *.in sites all-gather. Needs seq_len % tp == 0."},
    {"microbatches", &ParallelSection::microbatches,
     "Micro-batches per step. 1 derives it as global_batch_tokens / (micro_batch_size x "
     "seq_len x dp); any other value must equal that."},
    {"zero", &ParallelSection::zero,
     "0: every dp replica holds the whole optimizer state; 1: ZeRO-1, each holds a 1/dp shard "
     "(dp.grad becomes a reduce-scatter and parameters are all-gathered as dp.param)."},
    {"backend", &ParallelSection::backend,
     "How groups move device buffers on GPUs. auto: NCCL where every rank has its own GPU, else "
     "MPI through host memory; nccl; mpi (host-staged). CPU ranks always use MPI.",
     kBackends},
    {"staged_reduce", &ParallelSection::staged_reduce,
     "Host-staged MPI only: how uncompressed sums are done. native: MPI sums the staged copies "
     "on the host; two_shot: all-to-all, sum on the GPU, all-gather; auto: times both per size "
     "class at their first call and keeps the faster.",
     kStagedReduce},
    {"stage_piece_bytes", &ParallelSection::stage_piece_bytes,
     "Host-staged MPI only: bytes per piece of the staging pipeline (at least 4096). Smaller "
     "pieces overlap copies and transfers more but pay more per-piece overhead."},
    {"timeout_s", &ParallelSection::timeout_s,
     "Watchdog: a rank stuck longer than this inside one communication call (a peer died or "
     "hangs) exits with code 75 naming the call, site and peers. 0 turns it off."},
};

inline const std::vector<Field<TrainSection>> kTrainFields = {
    {"steps", &TrainSection::steps, "Optimizer steps of the whole run (a resumed run included)."},
    {"micro_batch_size", &TrainSection::micro_batch_size,
     "Windows of seq_len tokens per micro-batch on each dp replica."},
    {"global_batch_tokens", &TrainSection::global_batch_tokens,
     "Tokens per optimizer step over all replicas; a multiple of micro_batch_size x seq_len x "
     "dp."},
    {"lr", &TrainSection::lr,
     "Peak learning rate: linear warmup over warmup_steps, then a cosine down to min_lr_frac x "
     "lr at the last step."},
    {"min_lr_frac", &TrainSection::min_lr_frac,
     "Final learning rate as a fraction of lr, in [0, 1]."},
    {"warmup_steps", &TrainSection::warmup_steps, "Steps of linear warmup from 0 to lr."},
    {"weight_decay", &TrainSection::weight_decay,
     "AdamW decoupled weight decay, applied to weight matrices and both embeddings, not to "
     "biases or LayerNorms."},
    {"grad_clip", &TrainSection::grad_clip,
     "Clip the global gradient norm to this value; 0 turns clipping off."},
    {"beta1", &TrainSection::beta1, "AdamW first-moment decay, in [0, 1)."},
    {"beta2", &TrainSection::beta2, "AdamW second-moment decay, in [0, 1)."},
    {"eps", &TrainSection::eps, "AdamW denominator epsilon (> 0)."},
    {"precision", &TrainSection::precision,
     "auto: bf16 with fp32 master weights on GPUs, fp32 on CPU ranks. fp32 on a GPU or bf16 on "
     "the CPU is refused.",
     kPrecisions},
    {"device", &TrainSection::device,
     "auto: a GPU when one is visible, else the CPU; cuda fails without a GPU; cpu forces CPU "
     "ranks.",
     kDevices},
    {"seed", &TrainSection::seed,
     "Seeds the initial weights and the data order; the same seed and global batch give the "
     "same batches on every layout."},
    {"nonfinite", &TrainSection::nonfinite,
     "A step whose loss or gradient norm is NaN/Inf is never applied. stop: end the run with "
     "one line; skip: drop the update with a warning and go on.",
     kNonfinite},
    {"cuda_graph", &TrainSection::cuda_graph,
     "auto: on one GPU rank (tp = pp = dp = 1) the step runs as a CUDA graph, captured at the "
     "second step and replayed (elsewhere eagerly, as with off). off: the step's kernels are "
     "launched one by one, for debugging. The same bits either way.",
     kCudaGraph},
};

inline const std::vector<Field<DataSection>> kDataFields = {
    {"train", &DataSection::train,
     "Glob of llm.c token shards to train on (taco-prep writes them)."},
    {"val", &DataSection::val, "Glob of validation shards; empty: no validation loss."},
};

inline const std::vector<Field<CheckpointSection>> kCheckpointFields = {
    {"dir", &CheckpointSection::dir, "Checkpoint folder; empty means `<run dir>/ckpt`."},
    {"every", &CheckpointSection::every,
     "Save every N steps; 0 saves only at the end and on SIGINT/SIGTERM."},
    {"keep", &CheckpointSection::keep,
     "Newest verified checkpoints kept; 0 writes none (benchmark runs)."},
    {"resume", &CheckpointSection::resume,
     "false: a fresh run (refused if the folder holds checkpoints); true: continue from the "
     "newest good checkpoint, which must exist; auto: continue if there is one, else start. "
     "--resume on the command line means true.",
     kResume},
};

inline const std::vector<Field<LogSection>> kLogFields = {
    {"every", &LogSection::every,
     "Steps per log line and metrics.jsonl record (the first and last step are logged too)."},
    {"eval_every", &LogSection::eval_every,
     "Steps between validation losses (and one at the end); 0: only at the end."},
    {"eval_batches", &LogSection::eval_batches,
     "Micro-batches of the validation set per evaluation (always the same windows)."},
    {"all_ranks", &LogSection::all_ranks,
     "Print every rank's lines, prefixed with the rank; false prints rank 0 only."},
};

// CodecSpec's `group` is not in this table: it reads "auto" as 0 and accepts only kGroups. The
// other keys read their names into compression/'s enums.
inline const std::vector<Field<CodecSpec>> kCodecFields = {
    {"codec", &CodecSpec::codec,
     "none: raw values on the backend's own collective; fp8_tensor: FP8, one scale per message; "
     "fp8_block: FP8, one scale per group; taco: adaptive scale + Hadamard per group, then FP8; "
     "auto: none or the candidate per message size, whichever the link and codec speeds "
     "measured at the first step predict faster (compression.auto_margin).",
     kCodecChoices},
    {"candidate", &CodecSpec::candidate,
     "codec: auto only: the codec it may choose instead of none; format, group (not auto) and "
     "scales are the candidate's.",
     kCandidates},
    {"format", &CodecSpec::format,
     "FP8 format of the codes: e4m3 (max 448, more mantissa) or e5m2 (max 57344, more range).",
     kFormats},
    {"scales", &CodecSpec::scales,
     "Per-group scales on the wire. dual: q and a as two fp32 (the paper's); single: q/a as "
     "one fp32, same error in fp32; e8m0: a rounded to a power of two, one byte.",
     kScales},
};

inline const std::vector<std::string> kSections = {"run",  "model",       "parallel",   "train",
                                                   "data", "compression", "checkpoint", "log"};
inline const std::vector<std::string> kCompressionKeys = {
    "default", "min_bytes", "calibrate_steps", "chunks", "auto_margin", "auto_recheck_steps",
    "rules"};
inline const std::vector<std::string> kCodecKeys = {"codec", "candidate", "format", "group",
                                                    "scales"};
inline const std::vector<std::string> kRuleKeys = {"layers", "sites", "codec", "candidate",
                                                   "format", "group", "scales"};

// The meaning of the keys that are not plain fields (the compression section, a codec spec's
// group, a rule's own keys), by their path as docs/config-reference.md writes it; the test
// checks that every key of kCompressionKeys, kCodecKeys and kRuleKeys has one.
struct KeyDoc {
  const char* path;
  const char* type;
  const char* doc;
};

inline const std::vector<KeyDoc> kCompressionDocs = {
    {"compression.default", "codec spec",
     "The codec of every (layer, site) that no rule matches: a map of codec, format, group and "
     "scales (below)."},
    {"compression.min_bytes", "integer",
     "Messages smaller than this many bytes (uncompressed size) take the native collective; 0 "
     "compresses every message whatever its size."},
    {"compression.calibrate_steps", "integer",
     "Steps during which group: auto tries every group size along both axes on the real "
     "tensors before choosing; needs >= 1 when any spec says group: auto."},
    {"compression.chunks", "integer or auto",
     "Device buffers only: pieces of one compressed collective, so that encoding piece j + 1 "
     "overlaps sending piece j. auto: over NCCL up to 8 pieces of at least 4 MiB (one below "
     "8 MiB); over host-staged MPI one piece, whose transfer the staging pipelines "
     "(parallel.stage_piece_bytes)."},
    {"compression.auto_margin", "number",
     "codec: auto compresses a message only where encode + compressed transfer + decode is "
     "predicted below (1 - auto_margin) x the native collective; in [0, 1)."},
    {"compression.auto_recheck_steps", "integer",
     "codec: auto measures the links and codecs again and re-decides every N steps, logging "
     "what changed; 0 decides once, at each message's first use."},
    {"compression.rules", "list of rules",
     "Optional exceptions to default; the first rule whose layers and sites match a message "
     "decides its codec. A rule's codec keys it leaves out take the codec-spec defaults (codec "
     "none), not compression.default's."},
    {"codec.group", "32 | 64 | 128 | 256 | 512 | auto",
     "Values per scale group for fp8_block and taco; must divide d_model. auto: chosen by "
     "calibration (compression.calibrate_steps), G = 128 along hidden until then."},
    {"rule.layers", "string",
     "Blocks the rule applies to: \"all\", one index \"3\", a range \"1-3\" or a list "
     "\"0,2,5-7\" (0-based, below n_layer). Model-wide sites need a rule that covers every "
     "block (below)."},
    {"rule.sites", "list of site names",
     "Sites the rule applies to; empty or left out means every site. One name alone is a list "
     "of one."},
};

// A value as config_to_yaml writes it (config_emit.cpp): plain where YAML reads it back
// unchanged, else double-quoted.
std::string yaml_value(const std::string& s);
std::string yaml_value(bool b);
std::string yaml_value(double d);
std::string yaml_value(int v);
std::string yaml_value(int64_t v);
std::string yaml_value(uint64_t v);
std::string yaml_value(CodecKind v);
std::string yaml_value(Fp8Format v);
std::string yaml_value(Fp8Scales v);

// The value of field `f` in `section`, as config_to_yaml writes it.
template <class S>
std::string field_value(const S& section, const Field<S>& f) {
  return std::visit([&](auto member) { return yaml_value(section.*member); }, f.member);
}

template <class S>
std::vector<std::string> keys_of(const std::vector<Field<S>>& fields) {
  std::vector<std::string> keys;
  for (const auto& f : fields) keys.push_back(f.key);
  return keys;
}

std::string join(const std::vector<std::string>& items, const std::string& separator);

}  // namespace taco::config_detail
