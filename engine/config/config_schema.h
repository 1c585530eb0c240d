// Internal to engine/config: the keys of each section, bound to the struct fields they fill, and
// the values each enum key accepts. One table serves reading (config_read.cpp) and writing
// (config_emit.cpp), so the two cannot disagree on a name.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/config.h"

namespace taco::config_detail {

using Choices = std::vector<std::string>;

inline const Choices kBackends = {"auto", "nccl", "mpi"};
inline const Choices kStagedReduce = {"auto", "native", "two_shot"};
inline const Choices kPrecisions = {"auto", "fp32", "bf16"};
inline const Choices kDevices = {"auto", "cpu", "cuda"};
inline const Choices kCodecs = {"none", "fp8_tensor", "fp8_block", "taco"};
inline const Choices kFormats = {"e4m3", "e5m2"};
inline const Choices kScales = {"dual", "single", "e8m0"};
inline const Choices kResume = {"false", "true", "auto"};
inline const Choices kNonfinite = {"stop", "skip"};
inline const std::vector<int> kGroups = {32, 64, 128, 256, 512};  // and "auto" (stored as 0)

template <class S>
using Member =
    std::variant<int S::*, int64_t S::*, uint64_t S::*, double S::*, bool S::*, std::string S::*>;

template <class S>
struct Field {
  const char* key;
  Member<S> member;
  Choices choices = {};  // non-empty: the string must be one of these
};

inline const std::vector<Field<RunSection>> kRunFields = {
    {"name", &RunSection::name},
    {"dir", &RunSection::dir},
};

inline const std::vector<Field<ModelSection>> kModelFields = {
    {"n_layer", &ModelSection::n_layer},       {"n_head", &ModelSection::n_head},
    {"d_model", &ModelSection::d_model},       {"seq_len", &ModelSection::seq_len},
    {"vocab_size", &ModelSection::vocab_size},
};

inline const std::vector<Field<ParallelSection>> kParallelFields = {
    {"tp", &ParallelSection::tp},
    {"pp", &ParallelSection::pp},
    {"dp", &ParallelSection::dp},
    {"sequence_parallel", &ParallelSection::sequence_parallel},
    {"microbatches", &ParallelSection::microbatches},
    {"zero", &ParallelSection::zero},
    {"backend", &ParallelSection::backend, kBackends},
    {"staged_reduce", &ParallelSection::staged_reduce, kStagedReduce},
    {"stage_piece_bytes", &ParallelSection::stage_piece_bytes},
    {"timeout_s", &ParallelSection::timeout_s},
};

inline const std::vector<Field<TrainSection>> kTrainFields = {
    {"steps", &TrainSection::steps},
    {"micro_batch_size", &TrainSection::micro_batch_size},
    {"global_batch_tokens", &TrainSection::global_batch_tokens},
    {"lr", &TrainSection::lr},
    {"min_lr_frac", &TrainSection::min_lr_frac},
    {"warmup_steps", &TrainSection::warmup_steps},
    {"weight_decay", &TrainSection::weight_decay},
    {"grad_clip", &TrainSection::grad_clip},
    {"beta1", &TrainSection::beta1},
    {"beta2", &TrainSection::beta2},
    {"eps", &TrainSection::eps},
    {"precision", &TrainSection::precision, kPrecisions},
    {"device", &TrainSection::device, kDevices},
    {"seed", &TrainSection::seed},
    {"nonfinite", &TrainSection::nonfinite, kNonfinite},
};

inline const std::vector<Field<DataSection>> kDataFields = {
    {"train", &DataSection::train},
    {"val", &DataSection::val},
};

inline const std::vector<Field<CheckpointSection>> kCheckpointFields = {
    {"dir", &CheckpointSection::dir},
    {"every", &CheckpointSection::every},
    {"keep", &CheckpointSection::keep},
    {"resume", &CheckpointSection::resume, kResume},
};

inline const std::vector<Field<LogSection>> kLogFields = {
    {"every", &LogSection::every},
    {"eval_every", &LogSection::eval_every},
    {"eval_batches", &LogSection::eval_batches},
    {"all_ranks", &LogSection::all_ranks},
};

// CodecSpec's `group` is not in this table: it reads "auto" as 0 and accepts only kGroups.
inline const std::vector<Field<CodecSpec>> kCodecFields = {
    {"codec", &CodecSpec::codec, kCodecs},
    {"format", &CodecSpec::format, kFormats},
    {"scales", &CodecSpec::scales, kScales},
};

inline const std::vector<std::string> kSections = {"run",  "model",       "parallel",   "train",
                                                   "data", "compression", "checkpoint", "log"};
inline const std::vector<std::string> kCompressionKeys = {"default", "min_bytes", "calibrate_steps",
                                                          "chunks", "rules"};
inline const std::vector<std::string> kCodecKeys = {"codec", "format", "group", "scales"};
inline const std::vector<std::string> kRuleKeys = {"layers", "sites", "codec",
                                                   "format", "group", "scales"};

template <class S>
std::vector<std::string> keys_of(const std::vector<Field<S>>& fields) {
  std::vector<std::string> keys;
  for (const auto& f : fields) keys.push_back(f.key);
  return keys;
}

std::string join(const std::vector<std::string>& items, const std::string& separator);

}  // namespace taco::config_detail
