// The training loop (DESIGN.md §3, §7): gradient accumulation to train.global_batch_tokens,
// AdamW with warmup + cosine LR, global grad-norm clipping, periodic validation, one log line
// and one metrics.jsonl record per logged step.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/device.h"

namespace taco {

struct RunContext {
  MPI_Comm world = MPI_COMM_WORLD;  // the ranks of this run (tests use MPI_COMM_SELF too)
  int local_rank = 0;               // rank on this node, for GPU selection
  std::string run_dir;              // "" = write no files (tests)
};

struct TrainHistory {
  std::vector<double> train_loss;                // per optimizer step (mean over the global batch)
  std::vector<double> grad_norm;                 // per optimizer step, before clipping
  std::vector<std::pair<int, double>> val_loss;  // (step, loss)
};

class Trainer {
 public:
  // Builds everything and validates the data; throws UserError on bad input before training.
  Trainer(const Config& config, const RunContext& ctx);
  ~Trainer();
  // Trains train.steps steps.
  TrainHistory run();
  // Mean validation loss over log.eval_batches batches.
  double evaluate();
  // One line describing what will be trained (model size, layout, device, batch).
  std::string describe() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace taco
