// Value ranges and the constraints between keys, checked on the typed config. Each failure names
// the key whose value has to change (for a pair that must divide: the parallel size, since the
// model is usually the fixed part of an experiment).
#include <cstdio>
#include <string>
#include <vector>

#include "compression/policy.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_source.h"
#include "kernels/check.h"

namespace taco::config_detail {
namespace {

class Validator {
 public:
  Validator(const Config& c, const ConfigSource& source) : c_(c), source_(source) {}

  void all() const {
    const auto& m = c_.model;
    if (c_.run.name.empty() || c_.run.name.find('/') != std::string::npos)
      fail("run.name", "'" + c_.run.name + "' cannot name a directory",
           "a non-empty name without '/'");
    at_least("model.n_layer", m.n_layer, 1);
    at_least("model.n_head", m.n_head, 1);
    at_least("model.d_model", m.d_model, 1);
    at_least("model.seq_len", m.seq_len, 1);
    at_least("model.vocab_size", m.vocab_size, 2);
    if (m.d_model % m.n_head != 0)
      fail("model.d_model",
           std::to_string(m.d_model) +
               " is not divisible by model.n_head = " + std::to_string(m.n_head),
           "a multiple of n_head (each head has d_model / n_head dimensions)");
    parallel();
    train();
    if (c_.data.train.empty()) fail("data.train", "no value", "a path or glob of token shards");
    compression();
    at_least("checkpoint.every", c_.checkpoint.every, 0);
    at_least("checkpoint.keep", c_.checkpoint.keep, 0);
    if (c_.checkpoint.keep == 0 && c_.checkpoint.resume != "false")
      fail("checkpoint.resume", "'" + c_.checkpoint.resume + "' with checkpoint.keep = 0",
           "false (keep 0 writes no checkpoints), or checkpoint.keep >= 1");
    at_least("log.every", c_.log.every, 1);
    at_least("log.eval_every", c_.log.eval_every, 0);
    at_least("log.eval_batches", c_.log.eval_batches, 1);
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what,
                         const std::string& expected) const {
    source_.fail(path, what, expected);
  }

  void at_least(const std::string& path, int64_t value, int64_t min) const {
    if (value < min)
      fail(path, std::to_string(value) + " is too small", "an integer >= " + std::to_string(min));
  }

  // Names `path` = value as a divisor of `of_name` = of.
  void divides(const std::string& path, int value, const std::string& of_name, int64_t of,
               const std::string& why) const {
    if (of % value != 0)
      fail(path, std::to_string(value) + " does not divide " + of_name + " = " + std::to_string(of),
           "a divisor of " + of_name + " (" + why + ")");
  }

  void parallel() const {
    const auto& p = c_.parallel;
    at_least("parallel.tp", p.tp, 1);
    at_least("parallel.pp", p.pp, 1);
    at_least("parallel.dp", p.dp, 1);
    at_least("parallel.microbatches", p.microbatches, 1);
    at_least("parallel.stage_piece_bytes", p.stage_piece_bytes, 4096);
    if (!(p.timeout_s >= 0))
      fail("parallel.timeout_s", number_text(p.timeout_s) + " is negative",
           "seconds >= 0 (0 turns the communication watchdog off)");
    if (p.zero != 0 && p.zero != 1)
      fail("parallel.zero", std::to_string(p.zero) + " is not a ZeRO stage we have",
           "0 (replicated optimizer state) or 1 (ZeRO-1: sharded optimizer state)");
    divides("parallel.tp", p.tp, "model.n_head", c_.model.n_head,
            "each tensor-parallel rank owns whole heads");
    divides("parallel.pp", p.pp, "model.n_layer", c_.model.n_layer,
            "each pipeline stage owns the same number of layers");
    if (p.sequence_parallel && c_.model.seq_len % p.tp != 0)
      fail("parallel.sequence_parallel",
           "true, but model.seq_len = " + std::to_string(c_.model.seq_len) +
               " does not split over parallel.tp = " + std::to_string(p.tp),
           "model.seq_len a multiple of parallel.tp, or sequence_parallel: false");
  }

  void train() const {
    const auto& t = c_.train;
    at_least("train.steps", t.steps, 1);
    at_least("train.micro_batch_size", t.micro_batch_size, 1);
    at_least("train.global_batch_tokens", t.global_batch_tokens, 1);
    const int64_t per_step = int64_t{t.micro_batch_size} * c_.model.seq_len * c_.parallel.dp;
    if (t.global_batch_tokens % per_step != 0)
      fail("train.global_batch_tokens",
           std::to_string(t.global_batch_tokens) +
               " is not a whole number of micro-batches: micro_batch_size * seq_len * dp = " +
               std::to_string(t.micro_batch_size) + " * " + std::to_string(c_.model.seq_len) +
               " * " + std::to_string(c_.parallel.dp) + " = " + std::to_string(per_step),
           "a multiple of " + std::to_string(per_step));
    if (!(t.lr > 0)) fail("train.lr", number_text(t.lr) + " is not positive", "a number > 0");
    in_range("train.min_lr_frac", t.min_lr_frac, 0, 1, true);
    at_least("train.warmup_steps", t.warmup_steps, 0);
    if (t.weight_decay < 0)
      fail("train.weight_decay", number_text(t.weight_decay) + " is negative", "a number >= 0");
    if (t.grad_clip < 0)
      fail("train.grad_clip", number_text(t.grad_clip) + " is negative",
           "a number >= 0 (0 turns clipping off)");
    in_range("train.beta1", t.beta1, 0, 1, false);
    in_range("train.beta2", t.beta2, 0, 1, false);
    if (!(t.eps > 0)) fail("train.eps", number_text(t.eps) + " is not positive", "a number > 0");
  }

  // lo <= value <= hi (value < hi when !closed).
  void in_range(const std::string& path, double value, double lo, double hi, bool closed) const {
    if (value < lo || value > hi || (!closed && value == hi))
      fail(path, number_text(value) + " is out of range",
           "a number in [" + number_text(lo) + ", " + number_text(hi) + (closed ? "]" : ")"));
  }

  // The compression section is checked by building its policy (compression/policy.h), the one
  // place that knows its rules; its error is placed here at the key's line or --set.
  void compression() const {
    try {
      CompressionPolicy(c_.compression, c_.model.n_layer, c_.model.d_model, source_.name());
    } catch (const CompressionError& e) {
      throw UserError(one_line(source_.where(e.key()) + ": " + e.key() + ": " + e.problem()));
    }
  }

  const Config& c_;
  const ConfigSource& source_;
};

}  // namespace

void validate_config(const Config& config, const ConfigSource& source) {
  Validator(config, source).all();
}

}  // namespace taco::config_detail

namespace taco {

namespace {
// A derived value for a message: three significant digits (0.0012, not 0.0012000000000000001).
std::string rounded_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}
}  // namespace

std::vector<std::string> config_warnings(const Config& c) {
  std::vector<std::string> out;
  const auto& t = c.train;
  if (t.warmup_steps > t.steps)
    out.push_back(c.source + ": train.warmup_steps = " + std::to_string(t.warmup_steps) +
                  " is beyond train.steps = " + std::to_string(t.steps) +
                  ": the learning rate never reaches train.lr (peaks at " +
                  rounded_text(t.lr * t.steps / t.warmup_steps) +
                  ") and never decays; lower warmup_steps");
  return out;
}

}  // namespace taco
