// Learning-rate schedule: linear warmup to train.lr over warmup_steps, then cosine decay to
// lr * min_lr_frac at the last step (as llm.c and nanoGPT do). `step` is 0-based.
#pragma once

#include <cmath>

namespace taco {

inline double learning_rate(int step, int total_steps, double lr, int warmup_steps,
                            double min_lr_frac) {
  const double min_lr = lr * min_lr_frac;
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  if (total_steps <= warmup_steps + 1) return lr;
  double progress = double(step - warmup_steps) / double(total_steps - 1 - warmup_steps);
  if (progress > 1.0) progress = 1.0;
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace taco
