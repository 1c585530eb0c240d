#include "parallel/grad_sync.h"

#include <cmath>

#include "kernels/check.h"
#include "parallel/host_values.h"

namespace taco {

GradSync::GradSync(const GradSyncGroups& groups, const ZeroShard& shard, bool zero)
    : groups_(groups), shard_(shard), zero_(zero) {
  TACO_CHECK(groups.tp && groups.dp && groups.world && groups.model,
             "GradSync needs the tp, dp, world and model groups");
  TACO_CHECK(!zero || shard.ranks() == groups.dp->size(),
             "GradSync: the ZeRO-1 shard is split over another number of ranks than dp");
}

void GradSync::plan(Arena& arena, DType dtype) {
  if (zero_) grad_shard_handle_ = arena.reserve("grad_shard", dtype, shard_.slot());
}

void GradSync::bind(const Arena& arena) {
  if (zero_) grad_shard_ = arena.get(grad_shard_handle_);
}

void GradSync::reduce(const std::vector<PartialGrad>& sp, const Tensor& tied, const Tensor& grads,
                      const Tensor& grads_padded) {
  for (const PartialGrad& g : sp) groups_.tp->all_reduce(g.grad, g.rows, Site::sp_grad, g.layer);
  if (groups_.embedding) groups_.embedding->all_reduce(tied, 0, Site::tied_grad, -1);
  if (!zero_) {
    groups_.dp->all_reduce(grads, 0, Site::dp_grad, -1);
    return;
  }
  // ZeRO-1: the padded buffer splits into one equal slot per dp rank; this rank receives the
  // sum of its own and copies its real elements back into place for the optimizer.
  TACO_CHECK(grads_padded.numel == shard_.padded_total() && grads.numel == shard_.total(),
             "GradSync: the gradient buffers are not the shard's");
  groups_.dp->reduce_scatter(grads_padded, grad_shard_, shard_.ranks(), Site::dp_grad, -1);
  const Tensor dst = grads.slice(shard_.begin(), shard_.size());
  const Tensor src = grad_shard_.slice(0, shard_.size());
  TACO_CHECK(dst.bytes() == src.bytes(), "GradSync: shard copy size mismatch");
  device_copy(dst.data, src.data, src.bytes(), dst.device, src.device);
}

double GradSync::norm(double local_sumsq) const {
  return std::sqrt(sum_over(zero_ ? *groups_.world : *groups_.model, local_sumsq, Site::grad_norm));
}

void GradSync::gather_params(const Tensor& params_padded) {
  if (!zero_) return;
  TACO_CHECK(params_padded.numel == shard_.padded_total(),
             "GradSync: the parameter buffer is not the shard's");
  groups_.dp->all_gather(params_padded.slice(shard_.slot_offset(), shard_.slot()), params_padded,
                         shard_.ranks(), Site::dp_param, -1);
}

}  // namespace taco
