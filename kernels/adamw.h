// AdamW (decoupled weight decay, PyTorch semantics), one contiguous parameter range:
//   g = grad * grad_scale                       (grad_scale folds in clipping)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p)
// t is the 1-based step. Biases and LayerNorm parameters get weight_decay = 0 from the caller.
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace taco::cpu {

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float grad_scale;
  int step;
};

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp);

}  // namespace taco::cpu
