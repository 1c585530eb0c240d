// GradSync: what happens to a rank's gradients between the last backward and the optimizer step
// (Megatron's finalize_model_grads), and the all-gather of parameters after it under ZeRO-1.
//
// After backward, some gradients are partial sums:
//   sp.grad    under sequence parallelism, each tp rank saw only its own tokens, so the
//              LayerNorm and position gradients are summed over tp;
//   tied.grad  with pp > 1 the tied word embedding has a copy on the first and one on the last
//              stage; the embedding group (those two stages) sums them;
//   dp.grad    every data-parallel replica saw its own samples: all gradients are summed over dp
//              (all_reduce), or, under ZeRO-1, reduce-scattered so each dp rank receives the sum
//              of its ZeroShard only (parallel/zero_shard.h) and updates only that;
//   dp.param   ZeRO-1's all-gather of the updated shards into every replica's parameters.
// All of them go through the groups' site doors (SiteComm: per-site stats are counted, calls are
// watched); dp.grad takes its compression rules there, the other three are never compressed
// (compression/sites.h). The gradient norm for clipping is
// the cross-rank sum of every rank's sum of squares: over the world under ZeRO-1 (shards are
// disjoint over dp), over one model replica (tp x pp) otherwise (dp replicas hold the same sum).
//
// Use: plan(arena) before arena.allocate(), bind(arena) after; each step reduce(), norm(),
// then the optimizer step and gather_params().
#pragma once

#include <vector>

#include "engine/runtime/arena.h"
#include "parallel/site_comm.h"
#include "parallel/zero_shard.h"

namespace taco {

// A gradient the tp group holds partial sums of (site sp.grad): `rows` for the message shape,
// `layer` for the per-layer accounting (-1: none).
struct PartialGrad {
  Tensor grad;
  int rows = 0;
  int layer = -1;
};

struct GradSyncGroups {
  SiteComm* tp = nullptr;         // sp.grad
  SiteComm* dp = nullptr;         // dp.grad, dp.param
  SiteComm* embedding = nullptr;  // tied.grad; nullptr where no tied copy is summed
  Communicator* world = nullptr;  // the norm under ZeRO-1 (host values)
  Communicator* model = nullptr;  // the norm otherwise: this rank's model replica (tp x pp)
};

class GradSync {
 public:
  // `zero`: ZeRO-1 (parallel.zero: 1), with `shard` this dp rank's part of the flat buffer;
  // without it `shard` is ZeroShard(total). The groups must outlive this object.
  GradSync(const GradSyncGroups& groups, const ZeroShard& shard, bool zero);

  const ZeroShard& shard() const { return shard_; }
  bool zero() const { return zero_; }

  // ZeRO-1's reduced-gradient slot (nothing without ZeRO-1).
  void plan(Arena& arena, DType dtype);
  void bind(const Arena& arena);

  // Sums every partial gradient. `grads` is the flat gradient buffer (shard().total()
  // elements), `grads_padded` the same memory padded to shard().padded_total() (ZeRO-1);
  // `sp` the sequence-parallel partial sums; `tied` the tied embedding's gradient (summed when
  // the groups have an embedding group). Under ZeRO-1 only the shard's range of `grads` holds
  // reduced values afterwards.
  void reduce(const std::vector<PartialGrad>& sp, const Tensor& tied, const Tensor& grads,
              const Tensor& grads_padded);
  // The global gradient norm from this rank's share of the sum of squares (every rank calls it;
  // every rank gets the same value).
  double norm(double local_sumsq) const;
  // ZeRO-1: every dp rank's updated shard into `params_padded` everywhere (nothing without it).
  void gather_params(const Tensor& params_padded);

 private:
  GradSyncGroups groups_;
  ZeroShard shard_;
  bool zero_;
  size_t grad_shard_handle_ = 0;
  Tensor grad_shard_;  // ZeRO-1: the reduce-scatter's output, shard_.slot() elements
};

}  // namespace taco
