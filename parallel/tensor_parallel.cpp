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

void TensorParallel::copy_to_tp_region_backward(const Tensor& dx, int rows, const char* site,
                                                int layer) {
  if (comm_) comm_->all_reduce(dx, rows, site, layer);
}

void TensorParallel::reduce_from_tp_region_forward(const Tensor& x, int rows, const char* site,
                                                   int layer) {
  if (comm_) comm_->all_reduce(x, rows, site, layer);
}

void TensorParallel::gather_from_sp_region_forward(const Tensor& shard, const Tensor& full,
                                                   int rows, const char* site, int layer) {
  if (comm_)
    comm_->all_gather(shard, full, rows, site, layer);
  else
    copy_view(full, shard);
}

void TensorParallel::gather_from_sp_region_backward(const Tensor& dfull, const Tensor& dshard,
                                                    int rows, const char* site, int layer) {
  if (comm_)
    comm_->reduce_scatter(dfull, dshard, rows, site, layer);
  else
    copy_view(dshard, dfull);
}

void TensorParallel::reduce_scatter_to_sp_region_forward(const Tensor& full, const Tensor& shard,
                                                         int rows, const char* site, int layer) {
  if (comm_)
    comm_->reduce_scatter(full, shard, rows, site, layer);
  else
    copy_view(shard, full);
}

void TensorParallel::reduce_scatter_to_sp_region_backward(const Tensor& dshard, const Tensor& dfull,
                                                          int rows, const char* site, int layer) {
  if (comm_)
    comm_->all_gather(dshard, dfull, rows, site, layer);
  else
    copy_view(dfull, dshard);
}

void TensorParallel::all_reduce_max(const Tensor& x) {
  if (comm_) comm_->all_reduce_exact(x, ReduceOp::max);
}

void TensorParallel::all_reduce_sum(const Tensor& x) {
  if (comm_) comm_->all_reduce_exact(x, ReduceOp::sum);
}

}  // namespace taco
