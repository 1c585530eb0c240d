// The CUDA flash attention (kernels/cuda/attention_*.cu) against the CPU reference
// (taco::cpu::attention_*), which runs in fp32 on the same bf16-rounded inputs.
//
// Tolerances (relative L2 over a whole tensor):
//   out < 1e-2: the GPU rounds P to bf16 before P V and rounds out to bf16 (2^-9 relative per
//               element); everything else accumulates in fp32.
//   dq, dk, dv < 2e-2: P and dS are also rounded to bf16 before the four gradient matmuls, and
//               dS = P (dP - D) loses digits where dP is close to D (sharp softmax rows).
//   lse, absolute < 1e-3 + 1e-5 |lse|: scores are exact bf16 products summed in fp32, so only
//               fp32 rounding (~1e-6 relative) and the approximate exp2/log2 remain.
// A lane-exact emulation of the kernels' fragments and roundings (numpy) gave out 2e-3,
// dq/dk/dv 2.6e-3 (5.6e-3 for the sharp-softmax case) and lse 6e-6 on these shapes, so the
// bounds leave a 4-5x margin for the hardware's own accumulation order; a broken tile, mask or
// fragment layout gives errors of order 1. Every output is filled with NaN before the kernels
// run, so an element they fail to write fails the test.
//
// Two engines run the CUDA attention (kernels/attention.h): our own kernels (the tile-shape
// tests below force them) and cuDNN's fused SDPA (GpuAttentionCudnn forces it, alone and paired
// with our kernels through the saved lse); the same tolerances apply to both. cuDNN 9 is a
// dependency of the project, so on a GPU machine a cuDNN that cannot run these shapes fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/check.h"
#include "kernels/dtype.h"
#include "tests/support/test_util.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace taco {
namespace {

struct Shape {
  int B, T, C, NH;
};

std::string shape_name(const Shape& s) {
  char name[64];
  std::snprintf(name, sizeof name, "B%d_T%d_NH%d_hs%d", s.B, s.T, s.NH, s.C / s.NH);
  return name;
}

void PrintTo(const Shape& s, std::ostream* os) { *os << shape_name(s); }

#if TACO_HAVE_CUDA

#define CUDA_OK(call)                                                                \
  do {                                                                               \
    cudaError_t status_ = (call);                                                    \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

// A device array filled with 0xff bytes (NaN as bf16 and as fp32) until written.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, bytes()) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    if (cudaMemset(ptr_, 0xff, bytes()) != cudaSuccess)
      throw std::runtime_error("cudaMemset failed");
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    if (cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to device failed");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to host failed");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

using test::to_bf16;
using test::to_float;

size_t count_nonfinite(const std::vector<float>& x) {
  size_t n = 0;
  for (float v : x) n += !std::isfinite(v);
  return n;
}

// Columns [part*C, (part+1)*C) of a [rows, 3C] tensor: part 0 = q, 1 = k, 2 = v.
std::vector<float> qkv_part(const std::vector<float>& x, size_t rows, int C, int part) {
  std::vector<float> y(rows * C);
  for (size_t r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) y[r * C + c] = x[r * 3 * C + size_t(part) * C + c];
  return y;
}

// lse[b, h, t] = ln sum_{s<=t} exp(q_t . k_s / sqrt(hs)), in double.
std::vector<float> reference_lse(const std::vector<float>& qkv, const Shape& s) {
  const int hs = s.C / s.NH;
  const size_t C3 = 3 * size_t(s.C);
  std::vector<float> lse(size_t(s.B) * s.NH * s.T);
  std::vector<double> score(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* q = &qkv[(size_t(b) * s.T + t) * C3 + h * hs];
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const float* k = &qkv[(size_t(b) * s.T + u) * C3 + s.C + h * hs];
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += double(q[d]) * k[d];
          score[u] = dot / std::sqrt(double(hs));
          mx = std::max(mx, score[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += std::exp(score[u] - mx);
        lse[(size_t(b) * s.NH + h) * s.T + t] = float(mx + std::log(sum));
      }
  return lse;
}

// One forward + backward on the GPU and on the CPU reference, from bf16-rounded random inputs
// (q, k scaled by qk_std, v and dout standard normal).
struct Comparison {
  std::vector<float> out, out_ref, lse, lse_ref, dqkv, dqkv_ref;
  bool dkv_repeatable = false;
};

// Selects an attention engine for the lifetime of this object, then restores the previous one.
class EngineScope {
 public:
  explicit EngineScope(cuda::AttentionEngine engine) : saved_(cuda::attention_selected_engine()) {
    cuda::attention_select_engine(engine);
  }
  ~EngineScope() { cuda::attention_select_engine(saved_); }
  EngineScope(const EngineScope&) = delete;
  EngineScope& operator=(const EngineScope&) = delete;

 private:
  cuda::AttentionEngine saved_;
};

const char* engine_name(cuda::AttentionEngine e) {
  return e == cuda::AttentionEngine::kCudnn ? "cudnn"
         : e == cuda::AttentionEngine::kOwn ? "own"
                                            : "auto";
}

// forward_engine runs the forward, backward_engine both backward calls.
void compare_with_reference(const Shape& s, float qk_std, Comparison& r,
                            cuda::AttentionEngine forward_engine = cuda::AttentionEngine::kOwn,
                            cuda::AttentionEngine backward_engine = cuda::AttentionEngine::kOwn) {
  SCOPED_TRACE(std::string("forward ") + engine_name(forward_engine) + ", backward " +
               engine_name(backward_engine));
  const size_t rows = size_t(s.B) * s.T;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<float> qkv = test::random_normal(rows * 3 * s.C, seed);
  for (size_t row = 0; row < rows; ++row)
    for (int c = 0; c < 2 * s.C; ++c) qkv[row * 3 * s.C + c] *= qk_std;
  const std::vector<bf16> qkv_h = to_bf16(qkv);
  qkv = to_float(qkv_h);
  const std::vector<bf16> dout_h = to_bf16(test::random_normal(rows * s.C, seed + 1));
  const std::vector<float> dout = to_float(dout_h);

  DeviceArray<bf16> qkv_d(qkv_h.size()), out_d(rows * s.C), dout_d(dout_h.size());
  DeviceArray<bf16> dqkv_d(qkv_h.size());
  DeviceArray<float> lse_d(size_t(s.B) * s.NH * s.T);
  DeviceArray<unsigned char> scratch_d(cuda::attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH));
  qkv_d.upload(qkv_h);
  dout_d.upload(dout_h);

  {
    EngineScope engine(forward_engine);
    cuda::attention_forward(out_d.get(), lse_d.get(), qkv_d.get(), s.B, s.T, s.C, s.NH, nullptr);
  }
  EngineScope engine(backward_engine);
  cuda::attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), lse_d.get(), s.B,
                           s.T, s.C, s.NH, scratch_d.get(), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  r.out = to_float(out_d.download());
  r.lse = lse_d.download();
  const std::vector<bf16> first = dqkv_d.download();
  r.dqkv = to_float(first);

  // dk and dv have no atomics: a second run must reproduce them bit for bit. The scratch is
  // poisoned again, so a backward that relies on zeroed scratch fails.
  CUDA_OK(cudaMemset(dqkv_d.get(), 0xff, dqkv_d.bytes()));
  CUDA_OK(cudaMemset(scratch_d.get(), 0xff, scratch_d.bytes()));
  cuda::attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), lse_d.get(), s.B,
                           s.T, s.C, s.NH, scratch_d.get(), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<bf16> again = dqkv_d.download();
  r.dkv_repeatable = true;
  for (size_t row = 0; row < rows; ++row)
    for (size_t c = s.C; c < 3 * size_t(s.C); ++c)
      r.dkv_repeatable &= again[row * 3 * s.C + c].bits == first[row * 3 * s.C + c].bits;

  std::vector<float> att(size_t(s.B) * s.NH * s.T * s.T);
  r.out_ref.assign(rows * s.C, 0.f);
  cpu::attention_forward(r.out_ref.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  r.dqkv_ref.assign(qkv.size(), 0.f);  // the CPU backward adds into dqkv
  cpu::attention_backward(r.dqkv_ref.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C,
                          s.NH);
  r.lse_ref = reference_lse(qkv, s);
}

void expect_forward_close(const Shape& s, const Comparison& r) {
  ASSERT_EQ(count_nonfinite(r.out), 0u) << "out has unwritten or non-finite elements";
  ASSERT_EQ(count_nonfinite(r.lse), 0u) << "lse has unwritten or non-finite elements";
  EXPECT_LT(test::relative_l2(r.out.data(), r.out_ref.data(), r.out.size()), 1e-2);
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < r.lse.size(); ++i) {
    const double err =
        std::fabs(double(r.lse[i]) - r.lse_ref[i]) / (1e-3 + 1e-5 * std::fabs(r.lse_ref[i]));
    if (err > worst) worst = err, worst_at = i;
  }
  EXPECT_LT(worst, 1.0) << "lse[" << worst_at << "] = " << r.lse[worst_at] << ", reference "
                        << r.lse_ref[worst_at] << " (" << shape_name(s) << ")";
}

void expect_backward_close(const Shape& s, const Comparison& r) {
  ASSERT_EQ(count_nonfinite(r.dqkv), 0u) << "dqkv has unwritten or non-finite elements";
  const size_t rows = size_t(s.B) * s.T;
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    const std::vector<float> got = qkv_part(r.dqkv, rows, s.C, part);
    const std::vector<float> want = qkv_part(r.dqkv_ref, rows, s.C, part);
    EXPECT_LT(test::relative_l2(got.data(), want.data(), got.size()), 2e-2)
        << names[part] << " (" << shape_name(s) << ")";
  }
  EXPECT_TRUE(r.dkv_repeatable) << "dk/dv differ between two identical backward calls";
}

#endif  // TACO_HAVE_CUDA

class GpuAttention : public ::testing::TestWithParam<Shape> {};

TEST_P(GpuAttention, ForwardMatchesCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  Comparison r;
  compare_with_reference(GetParam(), 1.f, r);
  expect_forward_close(GetParam(), r);
#endif
}

TEST_P(GpuAttention, BackwardWritesGradientsMatchingCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  Comparison r;
  compare_with_reference(GetParam(), 1.f, r);
  expect_backward_close(GetParam(), r);
#endif
}

// hs 64 and 128; T below one tile, not a multiple of the tiles (64 keys; 128/64 queries
// forward, 64/32 queries backward), exact multiples, and a single token.
INSTANTIATE_TEST_SUITE_P(Shapes, GpuAttention,
                         ::testing::Values(Shape{2, 77, 128, 2}, Shape{2, 256, 192, 3},
                                           Shape{3, 1, 64, 1}, Shape{1, 300, 256, 2},
                                           Shape{2, 130, 512, 4}, Shape{1, 1000, 128, 1}),
                         [](const auto& info) { return shape_name(info.param); });

// Every tile shape of the backward kernel (attention_backward_variants), on T that fills no
// tile evenly, against the CPU reference; the default is restored afterwards.
TEST(GpuAttentionVariants, EveryBackwardTileShapeMatchesCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  for (Shape s : {Shape{2, 333, 128, 2}, Shape{1, 333, 256, 2}}) {
    const int hs = s.C / s.NH;
    struct Restore {
      int hs;
      ~Restore() { cuda::attention_backward_select(hs, 0); }
    } restore{hs};
    for (int v = 0; v < cuda::attention_backward_variants(hs); ++v) {
      SCOPED_TRACE(shape_name(s) + " " + cuda::attention_backward_variant_name(hs, v));
      cuda::attention_backward_select(hs, v);
      Comparison r;
      compare_with_reference(s, 1.f, r);
      expect_backward_close(s, r);
    }
  }
#endif
}

// Scores of standard deviation ~9 make each row's softmax nearly one-hot and move its maximum
// from tile to tile, which exercises the online rescaling of O and l.
TEST(GpuAttentionPeaked, SharpSoftmaxStaysAccurate) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  for (Shape s : {Shape{2, 333, 128, 2}, Shape{1, 333, 256, 2}}) {
    SCOPED_TRACE(shape_name(s));
    Comparison r;
    compare_with_reference(s, 3.f, r);
    expect_forward_close(s, r);
    expect_backward_close(s, r);
  }
#endif
}

// cuDNN's fused attention on T that are multiples of 128 (what it takes; other T fall back to our
// kernels under kAuto, see GpuAttentionCudnn.AutoFallsBackForOtherLengths): alone, and each
// direction paired with our kernel, which proves the two lse agree. Sharp softmax too.
TEST(GpuAttentionCudnn, MatchesCpuReferenceAloneAndPairedWithOwnKernels) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  using E = cuda::AttentionEngine;
  for (Shape s : {Shape{2, 256, 192, 3}, Shape{2, 128, 512, 4}, Shape{1, 384, 128, 2}}) {
    SCOPED_TRACE(shape_name(s));
    std::printf("[ engine ] %s forward: %s; backward: %s\n", shape_name(s).c_str(),
                cuda::attention_engine_description(false, s.B, s.T, s.C, s.NH).c_str(),
                cuda::attention_engine_description(true, s.B, s.T, s.C, s.NH).c_str());
    for (auto [fwd, bwd] : {std::pair{E::kCudnn, E::kCudnn}, std::pair{E::kCudnn, E::kOwn},
                            std::pair{E::kOwn, E::kCudnn}}) {
      Comparison r;
      compare_with_reference(s, 1.f, r, fwd, bwd);
      expect_forward_close(s, r);
      expect_backward_close(s, r);
    }
    Comparison sharp;
    compare_with_reference(s, 3.f, sharp, E::kCudnn, E::kCudnn);
    expect_forward_close(s, sharp);
    expect_backward_close(s, sharp);
  }
#endif
}

TEST(GpuAttentionCudnn, AutoFallsBackForOtherLengths) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  EngineScope automatic(cuda::AttentionEngine::kAuto);
  const Shape s{2, 200, 128, 2};
  const std::string forward = cuda::attention_engine_description(false, s.B, s.T, s.C, s.NH);
  EXPECT_EQ(forward.rfind("own kernel", 0), 0u) << forward;
  Comparison r;
  compare_with_reference(s, 1.f, r, cuda::AttentionEngine::kAuto, cuda::AttentionEngine::kAuto);
  expect_forward_close(s, r);
  expect_backward_close(s, r);
  EngineScope forced(cuda::AttentionEngine::kCudnn);
  EXPECT_THROW(cuda::attention_forward(nullptr, nullptr, nullptr, s.B, s.T, s.C, s.NH, nullptr),
               UserError);
#endif
}

TEST(GpuAttentionInput, RejectsUnsupportedHeadSize) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  // hs = 96: rejected before any memory is touched, so null pointers are fine here.
  EXPECT_THROW(cuda::attention_forward(nullptr, nullptr, nullptr, 1, 8, 192, 2, nullptr),
               UserError);
  EXPECT_THROW(cuda::attention_backward_scratch_bytes(1, 8, 192, 2), UserError);
  EXPECT_THROW(cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 8, 192, 2,
                                        nullptr, nullptr),
               UserError);
#endif
}

#if TACO_HAVE_CUDA
// Fills n bf16 with uniform values of unit variance from a counter-based hash: fast enough for
// the hundred million elements of the large shapes.
std::vector<bf16> fast_uniform_bf16(size_t n, uint64_t seed) {
  std::vector<bf16> x(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.f / 16777216.f);  // [0, 1)
    x[i] = float_to_bf16((2.f * u - 1.f) * 1.7320508f);
  }
  return x;
}
#endif

// The model's shapes (GPT-2 124M: B16 T1024 NH12 hs64; the 1.3B config: B8 T2048 NH16 hs128):
// the last head of the last sequence (the largest offsets) must match the reference, and the
// timings are printed in the units of tools/bench/attention_vs_torch.py.
TEST(GpuAttentionModelShapes, LastHeadMatchesReferenceAndTimingIsReported) {
  TACO_SKIP_WITHOUT_GPU();
#if TACO_HAVE_CUDA
  for (Shape s : {Shape{16, 1024, 768, 12}, Shape{8, 2048, 2048, 16}}) {
    SCOPED_TRACE(shape_name(s));
    const int hs = s.C / s.NH;
    const size_t rows = size_t(s.B) * s.T;
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<bf16> qkv_h = fast_uniform_bf16(rows * 3 * s.C, seed);
    const std::vector<bf16> dout_h = fast_uniform_bf16(rows * s.C, seed ^ 0x5bd1e995u);

    DeviceArray<bf16> qkv_d(qkv_h.size()), out_d(rows * s.C), dout_d(dout_h.size());
    DeviceArray<bf16> dqkv_d(qkv_h.size());
    DeviceArray<float> lse_d(size_t(s.B) * s.NH * s.T);
    DeviceArray<unsigned char> scratch_d(
        cuda::attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH));
    qkv_d.upload(qkv_h);
    dout_d.upload(dout_h);

    auto forward = [&] {
      cuda::attention_forward(out_d.get(), lse_d.get(), qkv_d.get(), s.B, s.T, s.C, s.NH, nullptr);
    };
    auto backward = [&] {
      cuda::attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), lse_d.get(),
                               s.B, s.T, s.C, s.NH, scratch_d.get(), nullptr);
    };

    // Timing: mean of 20 launches after a warm-up.
    cudaEvent_t start, stop;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    auto time_ms = [&](auto&& op) {
      op();
      const int reps = 20;
      cudaEventRecord(start);
      for (int i = 0; i < reps; ++i) op();
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      return double(ms) / reps;
    };
    const double fwd_flop = 4.0 * s.B * s.NH * double(s.T) * s.T * hs / 2;  // causal half
    auto report = [&](double fwd_ms, double bwd_ms, const std::string& engine) {
      std::printf(
          "[ timing ] taco attention %s bf16 causal: fwd %.3f ms %.1f TFLOP/s | bwd %.3f ms "
          "%.1f TFLOP/s | fwd+bwd %.3f ms %.1f TFLOP/s | %s\n",
          shape_name(s).c_str(), fwd_ms, fwd_flop / fwd_ms * 1e-9, bwd_ms,
          2.5 * fwd_flop / bwd_ms * 1e-9, fwd_ms + bwd_ms,
          3.5 * fwd_flop / (fwd_ms + bwd_ms) * 1e-9, engine.c_str());
    };

    // Reference for head NH-1 of sequence B-1, as a one-head problem of width hs, against what
    // the last forward and backward left in out, lse and dqkv.
    auto expect_last_head_matches = [&] {
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> out = to_float(out_d.download());
      const std::vector<float> lse = lse_d.download();
      const std::vector<float> dqkv = to_float(dqkv_d.download());
      ASSERT_EQ(count_nonfinite(out), 0u);
      ASSERT_EQ(count_nonfinite(lse), 0u);
      ASSERT_EQ(count_nonfinite(dqkv), 0u);
      const Shape one{1, s.T, hs, 1};
      const size_t off = size_t(s.B - 1) * s.T;
      const int h = s.NH - 1;
      std::vector<float> qkv1(size_t(s.T) * 3 * hs), dout1(size_t(s.T) * hs);
      std::vector<float> got_out(dout1.size()), got_dqkv(qkv1.size()), got_lse(s.T);
      for (int t = 0; t < s.T; ++t) {
        for (int part = 0; part < 3; ++part)
          for (int d = 0; d < hs; ++d) {
            const size_t src = (off + t) * 3 * s.C + size_t(part) * s.C + h * hs + d;
            qkv1[(size_t(t) * 3 + part) * hs + d] = bf16_to_float(qkv_h[src]);
            got_dqkv[(size_t(t) * 3 + part) * hs + d] = dqkv[src];
          }
        for (int d = 0; d < hs; ++d) {
          dout1[size_t(t) * hs + d] = bf16_to_float(dout_h[(off + t) * s.C + h * hs + d]);
          got_out[size_t(t) * hs + d] = out[(off + t) * s.C + h * hs + d];
        }
        got_lse[t] = lse[(size_t(s.B - 1) * s.NH + h) * s.T + t];
      }
      Comparison r;
      r.out = got_out;
      r.lse = got_lse;
      r.dqkv = got_dqkv;
      r.dkv_repeatable = true;
      std::vector<float> att(size_t(s.T) * s.T);
      r.out_ref.assign(got_out.size(), 0.f);
      cpu::attention_forward(r.out_ref.data(), att.data(), qkv1.data(), 1, s.T, hs, 1);
      r.dqkv_ref.assign(qkv1.size(), 0.f);
      cpu::attention_backward(r.dqkv_ref.data(), dout1.data(), qkv1.data(), att.data(), 1, s.T, hs,
                              1);
      r.lse_ref = reference_lse(qkv1, one);
      expect_forward_close(one, r);
      expect_backward_close(one, r);
    };

    {
      // Our kernels: every backward tile shape, the default (0) last so that its output is the
      // one checked.
      EngineScope own(cuda::AttentionEngine::kOwn);
      const double fwd_ms = time_ms(forward);
      for (int v = cuda::attention_backward_variants(hs) - 1; v >= 0; --v) {
        cuda::attention_backward_select(hs, v);
        report(fwd_ms, time_ms(backward),
               std::string("own kernels, bwd tiles ") +
                   cuda::attention_backward_variant_name(hs, v) + (v == 0 ? " (default)" : ""));
      }
      SCOPED_TRACE("own kernels");
      expect_last_head_matches();
    }
    {
      EngineScope cudnn(cuda::AttentionEngine::kCudnn);
      CUDA_OK(cudaMemset(out_d.get(), 0xff, out_d.bytes()));
      CUDA_OK(cudaMemset(lse_d.get(), 0xff, lse_d.bytes()));
      CUDA_OK(cudaMemset(dqkv_d.get(), 0xff, dqkv_d.bytes()));
      const double fwd_ms = time_ms(forward);
      const double bwd_ms = time_ms(backward);
      report(fwd_ms, bwd_ms,
             "cuDNN: fwd " + cuda::attention_engine_description(false, s.B, s.T, s.C, s.NH) +
                 ", bwd " + cuda::attention_engine_description(true, s.B, s.T, s.C, s.NH));
      SCOPED_TRACE("cuDNN");
      expect_last_head_matches();
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
#endif
}

}  // namespace
}  // namespace taco
