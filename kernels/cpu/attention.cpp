// Causal multi-head self-attention (kernels/attention.h), after llm.c's train_gpt2.c.
//
// Per batch b, head h and query t, with q_t, k_s, v_s the head's hs-wide slices of qkv and
// scale = 1/sqrt(hs):
//   forward:  p_ts = softmax_{s<=t}(scale q_t . k_s),  out_t = sum_{s<=t} p_ts v_s
//   backward: dp_ts = dout_t . v_s,  dv_s += p_ts dout_t,
//             dscore_ts = p_ts (dp_ts - sum_{s'<=t} p_ts' dp_ts'),
//             dq_t += scale sum_s dscore_ts k_s,  dk_s += scale dscore_ts q_t
// Backward needs only the saved p (att) and qkv, plus one row of dp (T values) per thread.
// It runs one thread per (b, h), which owns that head's slices of dqkv for every t, and walks t
// in order: every sum has a fixed order and no two threads write the same element.
#include "kernels/attention.h"

#include <cmath>
#include <vector>

namespace taco::cpu {
namespace {

template <typename Real>
void attention_forward_impl(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const size_t C3 = size_t(3) * C;
  const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < NH; ++h) {
        const Real* base = qkv + size_t(b) * T * C3;
        const Real* q = base + t * C3 + h * hs;
        Real* p = att + ((size_t(b) * NH + h) * T + t) * T;

        Real max_score = -INFINITY;
        for (int s = 0; s <= t; ++s) {
          const Real* k = base + s * C3 + C + h * hs;
          Real dot = 0;
          for (int i = 0; i < hs; ++i) dot += q[i] * k[i];
          p[s] = dot * scale;
          if (p[s] > max_score) max_score = p[s];
        }
        Real sum = 0;
        for (int s = 0; s <= t; ++s) {
          p[s] = std::exp(p[s] - max_score);
          sum += p[s];
        }
        const Real inv_sum = Real(1) / sum;
        for (int s = 0; s <= t; ++s) p[s] *= inv_sum;
        for (int s = t + 1; s < T; ++s) p[s] = 0;

        Real* o = out + (size_t(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) o[i] = 0;
        for (int s = 0; s <= t; ++s) {
          const Real* v = base + s * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; ++i) o[i] += p[s] * v[i];
        }
      }
    }
  }
}

template <typename Real>
void attention_backward_impl(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B,
                             int T, int C, int NH) {
  const int hs = C / NH;
  const size_t C3 = size_t(3) * C;
  const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel
  {
    std::vector<Real> dp(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const Real* base = qkv + size_t(b) * T * C3;
        Real* dbase = dqkv + size_t(b) * T * C3;
        for (int t = 0; t < T; ++t) {
          const Real* p = att + ((size_t(b) * NH + h) * T + t) * T;
          const Real* d = dout + (size_t(b) * T + t) * C + h * hs;
          const Real* q = base + t * C3 + h * hs;
          Real* dq = dbase + t * C3 + h * hs;

          Real p_dot_dp = 0;
          for (int s = 0; s <= t; ++s) {
            const Real* v = base + s * C3 + 2 * C + h * hs;
            Real* dv = dbase + s * C3 + 2 * C + h * hs;
            Real dot = 0;
            for (int i = 0; i < hs; ++i) {
              dot += d[i] * v[i];
              dv[i] += p[s] * d[i];
            }
            dp[s] = dot;
            p_dot_dp += p[s] * dot;
          }
          for (int s = 0; s <= t; ++s) {
            const Real dscore = p[s] * (dp[s] - p_dot_dp) * scale;
            const Real* k = base + s * C3 + C + h * hs;
            Real* dk = dbase + s * C3 + C + h * hs;
            for (int i = 0; i < hs; ++i) {
              dq[i] += dscore * k[i];
              dk[i] += dscore * q[i];
            }
          }
        }
      }
    }
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attention_forward_impl(out, att, qkv, B, T, C, NH);
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int C, int NH) {
  attention_backward_impl(dqkv, dout, qkv, att, B, T, C, NH);
}
void attention_forward(double* out, double* att, const double* qkv, int B, int T, int C, int NH) {
  attention_forward_impl(out, att, qkv, B, T, C, NH);
}
void attention_backward(double* dqkv, const double* dout, const double* qkv, const double* att,
                        int B, int T, int C, int NH) {
  attention_backward_impl(dqkv, dout, qkv, att, B, T, C, NH);
}

}  // namespace taco::cpu
