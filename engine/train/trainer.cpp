#include "engine/train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/data/shards.h"
#include "engine/runtime/arena.h"
#include "engine/train/metrics.h"
#include "engine/train/optimizer.h"
#include "engine/train/schedule.h"
#include "kernels/check.h"
#include "kernels/gradnorm.h"
#include "model/gpt.h"
#include "model/ops.h"
#include "model/param_layout.h"

namespace taco {

struct Trainer::State {
  Config cfg;
  RunContext ctx;
  DeviceInfo device;
  DType dtype = DType::f32;
  GptDims dims;
  std::unique_ptr<ParamLayout> layout;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Gpt> model;
  std::unique_ptr<AdamW> optimizer;
  std::unique_ptr<TokenShards> train_data, val_data;
  std::unique_ptr<MetricsWriter> metrics;
  int micro_steps = 1;
  int64_t tokens_per_step = 0;
  std::vector<int32_t> inputs, targets;
};

namespace {

DType choose_dtype(const std::string& precision, DeviceKind device, const std::string& source) {
  if (precision == "fp32") {
    if (device == DeviceKind::cuda)
      throw UserError(source +
                      ": train.precision: fp32 training runs on the CPU only; use bf16 "
                      "or auto on a GPU (or train.device: cpu)");
    return DType::f32;
  }
  if (precision == "bf16") {
    if (device == DeviceKind::cpu)
      throw UserError(source +
                      ": train.precision: bf16 needs a GPU; the CPU reference trains in "
                      "fp32 (use auto or fp32)");
    return DType::bf16;
  }
  return device == DeviceKind::cuda ? DType::bf16 : DType::f32;
}

std::string human(double x) {
  char buf[32];
  if (x >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

}  // namespace

Trainer::Trainer(const Config& config, const RunContext& ctx) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = config;
  s.ctx = ctx;
  const auto& m = config.model;
  const auto& par = config.parallel;
  if (par.tp * par.pp * par.dp != ctx.world_size) {
    throw UserError(config.source + ": parallel: world size " + std::to_string(ctx.world_size) +
                    " != dp*pp*tp = " + std::to_string(par.dp) + "*" + std::to_string(par.pp) +
                    "*" + std::to_string(par.tp) + "; launch with mpirun -np " +
                    std::to_string(par.dp * par.pp * par.tp) + " or change parallel.*");
  }
  if (ctx.world_size != 1) {
    throw UserError(config.source +
                    ": parallel: layouts other than tp=pp=dp=1 need the parallel "
                    "runtime, which is not built yet; run with one rank");
  }

  const bool want_gpu = config.train.device != "cpu";
  s.device = select_device(want_gpu, ctx.local_rank);
  if (config.train.device == "cuda" && s.device.kind != DeviceKind::cuda) {
    throw UserError(config.source + ": train.device: cuda requested but no CUDA device is " +
                    "available (use auto or cpu)");
  }
  s.dtype = choose_dtype(config.train.precision, s.device.kind, config.source);
  if (s.device.kind == DeviceKind::cuda) {
    throw UserError(config.source + ": train.device: the CUDA training path is not wired yet; " +
                    "set train.device: cpu");
  }

  const int B = config.train.micro_batch_size, T = m.seq_len;
  const int64_t rows_per_micro = int64_t(B) * T * par.dp;
  s.micro_steps = int(config.train.global_batch_tokens / rows_per_micro);
  s.tokens_per_step = config.train.global_batch_tokens;

  s.train_data = std::make_unique<TokenShards>(config.data.train, m.vocab_size, T + 1);
  if (!config.data.val.empty())
    s.val_data = std::make_unique<TokenShards>(config.data.val, m.vocab_size, T + 1);

  s.dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, par.tp);
  LayoutSpec spec;
  spec.layer_end = m.n_layer;
  s.layout = std::make_unique<ParamLayout>(s.dims, spec);
  s.arena = std::make_unique<Arena>(s.device.kind);
  s.model = std::make_unique<Gpt>(*s.layout, B, s.device.kind, s.dtype, nullptr);
  AdamWConfig acfg{config.train.beta1, config.train.beta2, config.train.eps,
                   config.train.weight_decay};
  s.optimizer = std::make_unique<AdamW>(*s.layout, s.dtype, s.device.kind, acfg);
  s.model->plan(*s.arena);
  s.optimizer->plan(*s.arena);
  s.arena->allocate();
  s.model->bind(*s.arena);
  init_params_gpt2(*s.layout, config.train.seed, s.model->params().as<float>());
  s.optimizer->bind(*s.arena, s.model->params());

  s.inputs.resize(size_t(B) * T);
  s.targets.resize(size_t(B) * T);
  if (!ctx.run_dir.empty() && ctx.world_rank == 0)
    s.metrics = std::make_unique<MetricsWriter>(ctx.run_dir + "/metrics.jsonl");
  else
    s.metrics = std::make_unique<MetricsWriter>();
}

Trainer::~Trainer() = default;

std::string Trainer::describe() const {
  const State& s = *s_;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "model %s params (L=%d H=%d C=%d T=%d V=%d->%d) | device %s %s | micro-batch %d x "
                "%d accumulation %d = %lld tokens/step | train %s tokens in %zu shard(s)",
                human(double(s.dims.num_params())).c_str(), s.dims.n_layer, s.dims.n_head,
                s.dims.d_model, s.dims.seq_len, s.dims.vocab_size, s.dims.padded_vocab,
                s.device.name.c_str(), dtype_name(s.dtype), s.cfg.train.micro_batch_size,
                s.dims.seq_len, s.micro_steps, (long long)s.tokens_per_step,
                human(double(s.train_data->num_tokens())).c_str(), s.train_data->num_shards());
  return buf;
}

double Trainer::evaluate() {
  State& s = *s_;
  if (!s.val_data) return NAN;
  const int B = s.cfg.train.micro_batch_size, T = s.dims.seq_len;
  double sum = 0;
  for (int b = 0; b < s.cfg.log.eval_batches; ++b) {
    s.val_data->eval_batch(b, B, 0, B, T, s.inputs.data(), s.targets.data());
    sum += s.model->forward(s.inputs.data(), s.targets.data());
  }
  return sum / (double(s.cfg.log.eval_batches) * B * T);
}

TrainHistory Trainer::run() {
  State& s = *s_;
  const auto& tc = s.cfg.train;
  const int B = tc.micro_batch_size, T = s.dims.seq_len;
  const float dloss = float(1.0 / double(s.tokens_per_step));
  TrainHistory history;
  using clock = std::chrono::steady_clock;

  for (int step = 0; step < tc.steps; ++step) {
    auto t0 = clock::now();
    ops::zero(s.model->grads());
    double loss_sum = 0;
    for (int micro = 0; micro < s.micro_steps; ++micro) {
      s.train_data->sample_batch(tc.seed, step, micro, 0, B, T, s.inputs.data(), s.targets.data());
      loss_sum += s.model->forward(s.inputs.data(), s.targets.data());
      s.model->backward(dloss);
    }
    const double loss = loss_sum / double(s.tokens_per_step);
    const double norm = std::sqrt(ops::sum_of_squares(s.model->grads()));
    const double lr = learning_rate(step, tc.steps, tc.lr, tc.warmup_steps, tc.min_lr_frac);
    s.optimizer->update(s.model->params(), s.model->grads(), lr, clip_scale(norm, tc.grad_clip),
                        step + 1);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    const double tok_per_s = double(s.tokens_per_step) / (ms / 1000.0);
    history.train_loss.push_back(loss);
    if (!std::isfinite(loss)) {
      throw Error("rank " + std::to_string(s.ctx.world_rank) + ": loss became " +
                      std::to_string(loss) + " at step " + std::to_string(step + 1) +
                      "; lower train.lr or check the data",
                  1);
    }

    const bool last = step + 1 == tc.steps;
    if ((step + 1) % s.cfg.log.every == 0 || step == 0 || last) {
      spdlog::info("step {:5d}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.1f} ms | {} tok/s",
                   step + 1, tc.steps, loss, lr, norm, ms, human(tok_per_s));
      s.metrics->write(JsonRecord()
                           .add("step", (long long)(step + 1))
                           .add("loss", loss)
                           .add("lr", lr)
                           .add("grad_norm", norm)
                           .add("ms", ms)
                           .add("tok_per_s", tok_per_s));
    }
    if (s.val_data &&
        ((s.cfg.log.eval_every > 0 && (step + 1) % s.cfg.log.eval_every == 0) || last)) {
      const double val = evaluate();
      history.val_loss.emplace_back(step + 1, val);
      spdlog::info("step {:5d}/{} | val loss {:.4f}", step + 1, tc.steps, val);
      s.metrics->write(JsonRecord().add("step", (long long)(step + 1)).add("val_loss", val));
    }
  }
  return history;
}

}  // namespace taco
