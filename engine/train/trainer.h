// The training loop (docs/design.md §3, §7): gradient accumulation to train.global_batch_tokens,
// AdamW with warmup + cosine LR, global grad-norm clipping, periodic validation, one log line
// and one metrics.jsonl record per logged step.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/device.h"
#include "kernels/check.h"

namespace taco {

struct RunContext {
  MPI_Comm world = MPI_COMM_WORLD;  // the ranks of this run (tests use MPI_COMM_SELF too)
  int local_rank = 0;               // rank on this node, for GPU selection
  std::string run_dir;              // "" = write no files and no checkpoints (tests)
  // Called on every rank after each optimizer step with the number of steps done (tests use it
  // to request a stop at a chosen step, as a signal would).
  std::function<void(int)> after_step;
};

// A failure that every rank meets at the same point with the same message (a non-finite step, a
// checkpoint refused for NaN/Inf values): no rank is left inside a call, so taco-train ends the
// run in order, rank 0 printing the one line, rather than aborting the job.
class CollectiveError : public Error {
 public:
  CollectiveError(std::string message, int exit_code) : Error(std::move(message), exit_code) {}
};

struct TrainHistory {
  int start_step = 0;         // steps already done when this run began (resumed from a checkpoint)
  int stopped_by_signal = 0;  // SIGINT/SIGTERM number if training stopped early, else 0
  int steps_done = 0;         // steps done when run() returned
  int skipped_steps = 0;      // non-finite steps not applied (train.nonfinite: skip)
  std::string checkpoint;     // the last checkpoint folder written, if any
  std::vector<double> train_loss;                // per optimizer step (mean over the global batch)
  std::vector<double> grad_norm;                 // per optimizer step, before clipping
  std::vector<std::pair<int, double>> val_loss;  // (step, loss)
};

class Trainer {
 public:
  // Builds everything and validates the data; throws UserError on bad input before training.
  Trainer(const Config& config, const RunContext& ctx);
  ~Trainer();
  // Trains from the resumed step (0 for a fresh run) to train.steps, saving checkpoints every
  // checkpoint.every steps, at the end, and when a SIGINT/SIGTERM arrives (then it stops early).
  TrainHistory run();
  // Steps already done (from the checkpoint resumed in the constructor; 0 when fresh).
  int start_step() const;
  // The schedule keys (train.steps, lr, warmup_steps, min_lr_frac) of the run that wrote the
  // checkpoint resumed from, as its header records them, into `out`; false when this run starts
  // fresh or the checkpoint predates that record.
  bool resumed_schedule(TrainSection* out) const;
  // Mean validation loss over log.eval_batches batches.
  double evaluate();
  // One line describing what will be trained (model size, layout, device, batch).
  std::string describe() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace taco
