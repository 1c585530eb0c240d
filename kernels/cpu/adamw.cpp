// AdamW (kernels/adamw.h), elementwise over one contiguous parameter range.
#include "kernels/adamw.h"

#include <cmath>

namespace taco::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWParams& hp) {
  // Bias corrections 1 - beta^t, formed in double: beta^t loses digits in float for large t.
  const float correction1 = float(1.0 - std::pow(double(hp.beta1), hp.step));
  const float correction2 = float(1.0 - std::pow(double(hp.beta2), hp.step));
#pragma omp parallel for schedule(static) if (n >= (1 << 14))
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i] * hp.grad_scale;
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * g;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / correction1;
    const float v_hat = vi / correction2;
    params[i] -= hp.lr * (m_hat / (std::sqrt(v_hat) + hp.eps) + hp.weight_decay * params[i]);
  }
}

}  // namespace taco::cpu
