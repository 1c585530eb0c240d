// Causal flash attention through cuDNN's fused SDPA engines, built with the backend graph API
// (cudnn_graph.h; the C++ frontend is not used). The graphs are the composite ones cuDNN's
// runtime fusion recognises as flash attention (cuDNN 9.x on sm_80+):
//
//   forward:  S = scale * Q K^T, causal mask (query i sees keys 0..i), m = rowmax S,
//             E = exp(S - m), l = rowsum E, Stats = m + ln l (= our lse), O = (E / l) V
//   backward: D = rowsum(dO * O), P = exp(mask(scale * Q K^T) - Stats), dV = P^T dO,
//             dP = dO V^T, dS = scale * P * (dP - D), dK = dS^T Q, dQ = dS K (fp32 accumulator,
//             then bf16)
//
// Shapes as the kernels see them (element strides), for qkv [B, T, 3C] with C = H * hs:
//   Q, K, V, dQ, dK, dV  [B, H, T, hs]  strides [T*3C, hs, 3C, 1]  at offset 0, C, 2C
//   K^T, V^T             [B, H, hs, T]  strides [T*3C, hs, 1, 3C]  (the same memory)
//   O, dO                [B, H, T, hs]  strides [T*C, hs, C, 1]
//   Stats (lse)          [B, H, T, 1]   fp32, packed
// Stats is the natural-log log-sum-exp of the scaled scores, the same quantity our own forward
// saves, so either forward pairs with either backward.
//
// A plan (operation graph + engine config) is built once per shape and cached; building takes
// tens of milliseconds and happens at the first call. Where no engine accepts a graph the build
// reports why, and attention_forward / attention_backward fall back to our kernels (kAuto).
#include "kernels/cuda/attention_cudnn.h"

#include <cudnn.h>

#include <array>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/check.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/context.cuh"

namespace taco::cuda::detail {
namespace {

// Thrown while building a plan; caught in plan_for, where it becomes the plan's `failure`.
struct BuildFailure {
  std::string what;
};

void build_ok(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw BuildFailure{std::string(what) + ": " + cudnn_status_text(status)};
}

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    build_ok(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values) {
    build_ok(cudnnBackendSetAttribute(d_, name, type, count, values), "cudnnBackendSetAttribute");
  }
  void set_descriptor(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize(const char* what) { build_ok(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Tensor ids of the real (non-virtual) tensors; virtual ones count up from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kDO,
  kDQ,
  kDK,
  kDV,
  kRowDot,   // D = rowsum(dO * O), fp32 [B, H, T, 1]
  kDQAccum,  // fp32 [B, H, T, hs], packed
  kOne,
  kFirstVirtual = 100,
};

// Which of the graph forms cuDNN frontends have emitted for the same attention; the first that
// an engine accepts is used (they compute the same thing).
struct Recipe {
  bool gen_index_int32 = false;  // GEN_INDEX computes in INT32 (older frontends) or FLOAT
  bool k_view_bf16 = false;      // backward: the K view for dS K is bf16 (else fp32)
  bool dp_times_one = false;     // backward: dP multiplied by 1 (older frontends' dropout slot)
  std::string name() const {
    return std::string(gen_index_int32 ? "index-int32" : "index-float") +
           (k_view_bf16 ? ", K view bf16" : "") + (dp_times_one ? ", dP*1" : "");
  }
};

// Builds one operation graph: tensors, operations, and then the plan.
class GraphBuilder {
 public:
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides,
                                  bool is_virtual = false, bool by_value = false) {
    auto& t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    const int64_t alignment = 16;
    t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    t.finalize("tensor descriptor");
    return t.get();
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, Dims dims, Dims strides) {
    return tensor(next_virtual_++, type, dims, strides, true);
  }
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  // y = x (op) b, or y = t ? x : b for BINARY_SELECT, or y = index along `axis` for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t b = nullptr,
                 cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1) {
    auto& pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    pw.finalize("pointwise descriptor");
    auto& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw.get());
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    const float one = 1.f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    op.finalize("pointwise operation");
    ops_.push_back(op.get());
  }

  // c[b, h] = a[b, h] (m x k) times b[b, h] (k x n), fp32 accumulation.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    auto& mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    mm.finalize("matmul descriptor");
    auto& op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm.get());
    op.finalize("matmul operation");
    ops_.push_back(op.get());
  }

  // y = reduction of x over the axes where y has size 1.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    auto& red = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    red.finalize("reduction descriptor");
    auto& op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red.get());
    op.finalize("reduction operation");
    ops_.push_back(op.get());
  }

  // y is x seen through other dims/strides (here: a transposed view).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    auto& op = own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op.finalize("reshape operation");
    ops_.push_back(op.get());
  }

  // The causal mask on scores `s` [B, H, T, T]: keeps s where row >= column, -inf elsewhere.
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t s, cudnnBackendDescriptor_t neg_inf,
                                       Dims dims, Dims strides, const Recipe& recipe) {
    const cudnnDataType_t index_precision =
        recipe.gen_index_int32 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;
    auto row = virt(CUDNN_DATA_INT32, dims, strides);
    auto col = virt(CUDNN_DATA_INT32, dims, strides);
    auto keep = virt(CUDNN_DATA_BOOLEAN, dims, strides);
    auto masked = virt(CUDNN_DATA_FLOAT, dims, strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, index_precision, s, row, nullptr, nullptr, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, index_precision, s, col, nullptr, nullptr, 3);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, keep, col);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, masked, neg_inf, keep);
    return masked;
  }

  // The operation graph, cuDNN's heuristics (mode A) and the first engine config that finalizes.
  void build_plan(cudnnHandle_t handle, Descriptor*& plan_out, int64_t& workspace_bytes,
                  int64_t& engine_index) {
    auto& graph = own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
// cuDNN 9.14 (the H200 runtime) takes the handle on the graph and the plan; newer headers
// deprecate those attributes in favour of device properties.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
#pragma GCC diagnostic pop
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()),
              ops_.data());
    graph.finalize("operation graph");

    auto& heuristics = own(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph.get());
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    heuristics.finalize("engine heuristics");
    int64_t count = 0;
    build_ok(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
             "engine heuristics results");
    if (count <= 0) throw BuildFailure{"no engine config for this graph"};
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i)
      configs.push_back(own(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
    build_ok(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, configs.data()),
             "engine heuristics results");
    std::string rejected;
    for (int64_t i = 0; i < count; ++i) {
      auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
#pragma GCC diagnostic pop
      plan->set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)]);
      const cudnnStatus_t status = cudnnBackendFinalize(plan->get());
      if (status != CUDNN_STATUS_SUCCESS) {
        rejected = cudnn_status_text(status);
        continue;
      }
      int64_t n = 0;
      build_ok(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, &n, &workspace_bytes),
               "plan workspace size");
      engine_index = -1;
      auto& engine = own(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      cudnnBackendDescriptor_t engine_d = engine.get();
      if (cudnnBackendGetAttribute(configs[size_t(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   &engine_d) == CUDNN_STATUS_SUCCESS)
        cudnnBackendGetAttribute(engine_d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 &engine_index);
      owned_.push_back(std::move(plan));
      plan_out = owned_.back().get();
      return;
    }
    throw BuildFailure{"none of " + std::to_string(count) +
                       " engine configs finalized (last: " + rejected + ")"};
  }

  std::vector<std::unique_ptr<Descriptor>> release() { return std::move(owned_); }

 private:
  Descriptor& own(cudnnBackendDescriptorType_t type) {
    owned_.push_back(std::make_unique<Descriptor>(type));
    return *owned_.back();
  }

  std::vector<std::unique_ptr<Descriptor>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

struct Shape {
  int64_t B, T, H, hs;
  int64_t C() const { return H * hs; }
  Dims qkv_strides() const { return {T * 3 * C(), hs, 3 * C(), 1}; }
  Dims transposed_qkv_strides() const { return {T * 3 * C(), hs, 1, 3 * C()}; }
  Dims out_strides() const { return {T * C(), hs, C(), 1}; }
  Dims heads() const { return {B, H, T, hs}; }
  Dims heads_transposed() const { return {B, H, hs, T}; }
  Dims scores() const { return {B, H, T, T}; }
  Dims score_strides() const { return {H * T * T, T * T, T, 1}; }
  Dims transposed_score_strides() const { return {H * T * T, T * T, 1, T}; }
  Dims rows() const { return {B, H, T, 1}; }
  Dims row_strides() const { return {H * T, T, 1, 1}; }
};

// The tensors both directions use, and their scaled scores S = scale * Q K^T [B, H, T, T].
struct Scores {
  cudnnBackendDescriptor_t q, kt, stats, scale, neg_inf, scaled;
};

Scores scaled_scores(GraphBuilder& g, const Shape& s) {
  Scores r;
  r.q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, s.heads(), s.qkv_strides());
  r.kt = g.tensor(kK, CUDNN_DATA_BFLOAT16, s.heads_transposed(), s.transposed_qkv_strides());
  r.stats = g.tensor(kStats, CUDNN_DATA_FLOAT, s.rows(), s.row_strides());
  r.scale = g.scalar(kScale);
  r.neg_inf = g.scalar(kNegInf);
  auto qk = g.virt(CUDNN_DATA_FLOAT, s.scores(), s.score_strides());
  g.matmul(r.q, r.kt, qk);
  r.scaled = g.virt(CUDNN_DATA_FLOAT, s.scores(), s.score_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, qk, r.scaled, r.scale);
  return r;
}

void build_forward(GraphBuilder& g, const Shape& s, const Recipe& recipe) {
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  const Scores sc = scaled_scores(g, s);
  auto v = g.tensor(kV, bf16, s.heads(), s.qkv_strides());
  auto o = g.tensor(kO, bf16, s.heads(), s.out_strides());
  const Dims S = s.scores(), sS = s.score_strides(), R = s.rows(), sR = s.row_strides();

  auto masked = g.causal_mask(sc.scaled, sc.neg_inf, S, sS, recipe);
  auto row_max = g.virt(f32, R, sR);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, row_max);
  auto shifted = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, masked, shifted, row_max);
  auto e = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, shifted, e);
  auto row_sum = g.virt(f32, R, sR);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  auto log_sum = g.virt(f32, R, sR);
  g.pointwise(CUDNN_POINTWISE_LOG, f32, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, row_max, sc.stats, log_sum);
  auto p = g.virt(bf16, S, sS);  // the second GEMM's operand: bf16, as the engines require
  g.pointwise(CUDNN_POINTWISE_DIV, f32, e, p, row_sum);
  g.matmul(p, v, o);
}

void build_backward(GraphBuilder& g, const Shape& s, const Recipe& recipe) {
  const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
  auto vt = g.tensor(kV, bf16, s.heads_transposed(), s.transposed_qkv_strides());
  auto o = g.tensor(kO, bf16, s.heads(), s.out_strides());
  auto d_o = g.tensor(kDO, bf16, s.heads(), s.out_strides());
  auto dq = g.tensor(kDQ, bf16, s.heads(), s.qkv_strides());
  auto dk = g.tensor(kDK, bf16, s.heads(), s.qkv_strides());
  auto dv = g.tensor(kDV, bf16, s.heads(), s.qkv_strides());
  auto row_dot = g.tensor(kRowDot, f32, s.rows(), s.row_strides());
  auto dq_accum = g.tensor(kDQAccum, f32, s.heads(), {s.H * s.T * s.hs, s.T * s.hs, s.hs, 1});
  auto one = g.scalar(kOne);
  const Dims S = s.scores(), sS = s.score_strides(), sT = s.transposed_score_strides();
  const Dims R = s.rows(), sR = s.row_strides();

  // D = rowsum(dO * O)
  auto do_o = g.virt(f32, s.heads(), s.out_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, f32, d_o, do_o, o);
  auto dot = g.virt(f32, R, sR);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, dot);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, dot, row_dot, one);
  // P = exp(mask(S) - Stats), recomputed (after the ops above: the op order is the one cuDNN's
  // frontends emit)
  const Scores sc = scaled_scores(g, s);
  auto shifted = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, sc.scaled, shifted, sc.stats);
  auto masked = g.causal_mask(shifted, sc.neg_inf, S, sS, recipe);
  auto p = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_EXP, f32, masked, p);
  // dV = P^T dO
  auto pt = g.virt(bf16, S, sT);
  g.reshape(p, pt);
  g.matmul(pt, d_o, dv);
  // dS = scale * P * (dO V^T - D)
  auto dp = g.virt(f32, S, sS);
  g.matmul(d_o, vt, dp);
  if (recipe.dp_times_one) {
    auto dp1 = g.virt(f32, S, sS);
    g.pointwise(CUDNN_POINTWISE_MUL, f32, dp, dp1, one);
    dp = dp1;
  }
  auto centered = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_SUB, f32, dp, centered, row_dot);
  auto weighted = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, centered, weighted, p);
  auto ds = g.virt(f32, S, sS);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, weighted, ds, sc.scale);
  // dK = dS^T Q
  auto dst = g.virt(bf16, S, sT);
  g.reshape(ds, dst);
  g.matmul(dst, sc.q, dk);
  // dQ = dS K, accumulated in fp32, then bf16
  auto k_view = g.virt(recipe.k_view_bf16 ? bf16 : f32, s.heads(), s.qkv_strides());
  g.reshape(sc.kt, k_view);
  g.matmul(ds, k_view, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, f32, dq_accum, dq);
}

struct Plan {
  std::vector<std::unique_ptr<Descriptor>> descriptors;  // keeps the graph alive
  Descriptor* plan = nullptr;                            // null: `failure` says why
  cudnnHandle_t handle = nullptr;                        // of the plan's device
  int64_t workspace_bytes = 0;
  int64_t engine = -1;
  std::string recipe;
  std::string failure;
};

using PlanKey =
    std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t>;  // device, backward, B T H hs
std::mutex g_plans_mutex;
std::map<PlanKey, Plan> g_plans;

bool cudnn_runtime_ok(std::string& why) {
  const size_t version = cudnnGetVersion();
  if (version < 90000) {
    why = "cuDNN " + std::to_string(version) + " is older than 9.0";
    return false;
  }
  return true;
}

Plan& plan_for(bool backward, const Shape& s) {
  const PlanKey key{current_device(), backward, s.B, s.T, s.H, s.hs};
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second;
  Plan& plan = g_plans[key];
  if (!cudnn_runtime_ok(plan.failure)) return plan;
  // The backward engines of cuDNN <= 9.15 need T % 128 == 0 without a padding mask (the frontend
  // adds one otherwise); we take our own kernels for such T instead, in both directions (the
  // forward was only measured on such T).
  if (s.T % 128 != 0) {
    plan.failure = "T = " + std::to_string(s.T) + " is not a multiple of 128";
    return plan;
  }
  const std::vector<Recipe> recipes =
      backward ? std::vector<Recipe>{{false, false, false},
                                     {false, true, false},
                                     {false, false, true},
                                     {true, true, true}}
               : std::vector<Recipe>{{false, false, false}, {true, false, false}};
  cudnnHandle_t handle = nullptr;
  try {
    handle = cudnn_handle();  // fails where cuDNN's libraries cannot be loaded
  } catch (const ::taco::Error& e) {
    plan.failure = e.what();
    return plan;
  }
  std::string failures;
  for (const Recipe& recipe : recipes) {
    try {
      GraphBuilder g;
      if (backward)
        build_backward(g, s, recipe);
      else
        build_forward(g, s, recipe);
      g.build_plan(handle, plan.plan, plan.workspace_bytes, plan.engine);
      plan.descriptors = g.release();
      plan.handle = handle;
      plan.recipe = recipe.name();
      plan.failure.clear();
      return plan;
    } catch (const BuildFailure& f) {
      plan.plan = nullptr;
      failures += (failures.empty() ? "" : "; ") + recipe.name() + ": " + f.what;
    }
  }
  plan.failure = failures;
  return plan;
}

Shape shape_of(int B, int T, int C, int NH) { return {B, T, NH, C / NH}; }

// Runs `plan` with the real tensors' pointers (by-value scalars point to host floats).
void execute(const Plan& plan, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             cudaStream_t stream) {
  cudnnHandle_t handle = plan.handle;
  // The handle is shared per device and carries the stream: one execute at a time.
  static std::mutex execute_mutex;
  std::lock_guard<std::mutex> lock(execute_mutex);
  TACO_CUDNN_OK(cudnnSetStream(handle, stream));
  void* workspace =
      plan.workspace_bytes > 0 ? scratch(stream, size_t(plan.workspace_bytes)) : nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  TACO_CUDNN_OK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  struct Destroy {
    cudnnBackendDescriptor_t d;
    ~Destroy() { cudnnBackendDestroyDescriptor(d); }
  } destroy{pack};
  TACO_CUDNN_OK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                         int64_t(uids.size()), uids.data()));
  TACO_CUDNN_OK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                         CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()),
                                         pointers.data()));
  TACO_CUDNN_OK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                         CUDNN_TYPE_VOID_PTR, 1, &workspace));
  TACO_CUDNN_OK(cudnnBackendFinalize(pack));
  TACO_CUDNN_OK(cudnnBackendExecute(handle, plan.plan->get(), pack));
}

std::string describe(const Plan& plan) {
  if (!plan.plan) return "own kernel (cuDNN: " + plan.failure + ")";
  return "cuDNN engine " + std::to_string(plan.engine) + " (" + plan.recipe + ", workspace " +
         std::to_string(plan.workspace_bytes) + " B)";
}

std::atomic<AttentionEngine> g_engine{AttentionEngine::kAuto};

// The plan to run this shape with, by the selected engine; null where our kernels run instead.
const Plan* selected_plan(bool backward, int B, int T, int C, int NH) {
  const AttentionEngine engine = g_engine.load();
  if (engine == AttentionEngine::kOwn) return nullptr;
  const Plan& plan = plan_for(backward, shape_of(B, T, C, NH));
  if (engine == AttentionEngine::kCudnn && !plan.plan)
    throw ::taco::UserError(
        std::string("attention_") + (backward ? "backward" : "forward") +
        ": the cuDNN engine was selected but cannot run B=" + std::to_string(B) +
        " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " (" +
        plan.failure + "); select the auto or own attention engine");
  return plan.plan ? &plan : nullptr;
}

}  // namespace

std::string cudnn_attention_describe(bool backward, int B, int T, int C, int NH) {
  return describe(plan_for(backward, shape_of(B, T, C, NH)));
}

bool cudnn_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                             cudaStream_t stream) {
  const Plan* plan = selected_plan(false, B, T, C, NH);
  if (!plan) return false;
  float scale = 1.f / std::sqrt(float(C / NH));
  float neg_inf = -INFINITY;
  bf16* x = const_cast<bf16*>(qkv);
  execute(*plan, {kQ, kK, kV, kO, kStats, kScale, kNegInf},
          {x, x + C, x + 2 * C, out, lse, &scale, &neg_inf}, stream);
  return true;
}

bool cudnn_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, int B, int T, int C, int NH, float* row_dot,
                              float* dq_accum, cudaStream_t stream) {
  const Plan* plan = selected_plan(true, B, T, C, NH);
  if (!plan) return false;
  // No memset of the fp32 dQ accumulator: cuDNN >= 9.6 zeroes it itself (its frontend stopped
  // doing so at 9.6). gpu_attention poisons the scratch with NaN before every backward, so a
  // cuDNN that did not would fail there. Measured on the H200: 124M 542.3k -> 546.0k tok/s.
  float scale = 1.f / std::sqrt(float(C / NH));
  float neg_inf = -INFINITY;
  float one = 1.f;
  bf16* x = const_cast<bf16*>(qkv);
  execute(*plan,
          {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kRowDot, kDQAccum, kScale, kNegInf, kOne},
          {x, x + C, x + 2 * C, const_cast<bf16*>(out), const_cast<bf16*>(dout),
           const_cast<float*>(lse), dqkv, dqkv + C, dqkv + 2 * C, row_dot, dq_accum, &scale,
           &neg_inf, &one},
          stream);
  return true;
}

}  // namespace taco::cuda::detail

namespace taco::cuda {

void attention_select_engine(AttentionEngine engine) { detail::g_engine.store(engine); }

AttentionEngine attention_selected_engine() { return detail::g_engine.load(); }

std::string attention_engine_description(bool backward, int B, int T, int C, int NH) {
  if (attention_selected_engine() == AttentionEngine::kOwn) return "own kernel (selected)";
  return detail::cudnn_attention_describe(backward, B, T, C, NH);
}

}  // namespace taco::cuda
