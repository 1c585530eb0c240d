#include "parallel/tensor_parallel.h"

#include "engine/runtime/arena.h"
#include "kernels/check.h"

namespace taco {

namespace {
// tp = 1: a gather or scatter is a copy between two views of the same shape.
void copy_view(const Tensor& dst, const Tensor& src) {
  if (dst.data == src.data) return;
  TACO_CHECK(dst.bytes() == src.bytes(), "tp=1 region copy: sizes differ");
  device_copy(dst.data, src.data, src.bytes(), dst.device, src.device);
}
}  // namespace

void TensorParallel::copy_to_tp_region_backward(const Tensor& dx, int rows, TpSite site,
                                                int layer) {
  if (comm_) comm_->all_reduce(dx, rows, backward_site(site), layer);
}

void TensorParallel::reduce_from_tp_region_forward(const Tensor& x, int rows, TpSite site,
                                                   int layer) {
  if (comm_) comm_->all_reduce(x, rows, forward_site(site), layer);
}

void TensorParallel::gather_from_sp_region_forward(const Tensor& shard, const Tensor& full,
                                                   int rows, TpSite site, int layer) {
  if (comm_)
    comm_->all_gather(shard, full, rows, forward_site(site), layer);
  else
    copy_view(full, shard);
}

void TensorParallel::gather_from_sp_region_backward(const Tensor& dfull, const Tensor& dshard,
                                                    int rows, TpSite site, int layer) {
  if (comm_)
    comm_->reduce_scatter(dfull, dshard, rows, backward_site(site), layer);
  else
    copy_view(dshard, dfull);
}

void TensorParallel::reduce_scatter_to_sp_region_forward(const Tensor& full, const Tensor& shard,
                                                         int rows, TpSite site, int layer) {
  if (comm_)
    comm_->reduce_scatter(full, shard, rows, forward_site(site), layer);
  else
    copy_view(shard, full);
}

void TensorParallel::reduce_scatter_to_sp_region_backward(const Tensor& dshard, const Tensor& dfull,
                                                          int rows, TpSite site, int layer) {
  if (comm_)
    comm_->all_gather(dshard, dfull, rows, backward_site(site), layer);
  else
    copy_view(dfull, dshard);
}

void TensorParallel::column_parallel_input_forward(const Tensor& shard, const Tensor& full,
                                                   int rows, TpSite site, int layer) {
  if (sequence_parallel_)
    gather_from_sp_region_forward(shard, full, rows, site, layer);
  else
    copy_to_tp_region_forward(full, rows, site, layer);
}

Tensor TensorParallel::column_parallel_input_backward(const Tensor& dfull, const Tensor& dshard,
                                                      int rows, TpSite site, int layer) {
  if (!sequence_parallel_) {
    copy_to_tp_region_backward(dfull, rows, site, layer);
    return dfull;
  }
  gather_from_sp_region_backward(dfull, dshard, rows, site, layer);
  return dshard;
}

Tensor TensorParallel::row_parallel_output_forward(const Tensor& partial, const Tensor& shard,
                                                   int rows, TpSite site, int layer) {
  if (!sequence_parallel_) {
    reduce_from_tp_region_forward(partial, rows, site, layer);
    return partial;
  }
  reduce_scatter_to_sp_region_forward(partial, shard, rows, site, layer);
  return shard;
}

Tensor TensorParallel::row_parallel_output_backward(const Tensor& dshard, const Tensor& dfull,
                                                    int rows, TpSite site, int layer) {
  if (!sequence_parallel_) {
    reduce_from_tp_region_backward(dshard, rows, site, layer);
    return dshard;
  }
  reduce_scatter_to_sp_region_backward(dshard, dfull, rows, site, layer);
  return dfull;
}

void TensorParallel::all_reduce_max(const Tensor& x) {
  if (comm_) comm_->all_reduce_exact(x, ReduceOp::max, Site::ce_max);
}

void TensorParallel::all_reduce_sum(const Tensor& x) {
  if (comm_) comm_->all_reduce_exact(x, ReduceOp::sum, Site::ce_sum);
}

}  // namespace taco
