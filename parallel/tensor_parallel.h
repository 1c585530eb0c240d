// Megatron's tensor-parallel mappings as named forward/backward pairs (docs/style.md). Each takes
// the base site it serves (compression/sites.h: TpSite::attn_out, ...) and the layer; its forward
// communicates at forward_site(site) and its backward at backward_site(site) (docs/design.md §3).
// Tensors are [rows, cols]; with sequence parallelism a rank holds rows / tp of the token rows
// between the parallel regions.
//
//   copy_to_tp_region            fwd: identity              bwd: all-reduce      (*.in sites)
//   reduce_from_tp_region        fwd: all-reduce            bwd: identity        (*.out sites)
//   gather_from_sp_region        fwd: all-gather rows       bwd: reduce-scatter  (*.in, SP)
//   reduce_scatter_to_sp_region  fwd: reduce-scatter rows   bwd: all-gather      (*.out, SP)
//
// Layers do not choose between the plain and the SP mapping: column_parallel_input_* (where a
// replicated input enters a column-parallel layer) and row_parallel_output_* (where a
// row-parallel layer's partial sums leave) take the one this object's sequence parallelism
// calls for, as Megatron's ColumnParallelLinear and RowParallelLinear do.
//
// With tp = 1 every mapping is the identity (gather and scatter copy) and nothing communicates.
#pragma once

#include "compression/sites.h"
#include "engine/runtime/tensor.h"
#include "parallel/site_comm.h"

namespace taco {

class TensorParallel {
 public:
  TensorParallel() = default;  // tp = 1
  TensorParallel(SiteComm* comm, bool sequence_parallel)
      : comm_(comm), sequence_parallel_(sequence_parallel) {}

  int size() const { return comm_ ? comm_->size() : 1; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  bool sequence_parallel() const { return sequence_parallel_; }
  SiteComm* comm() const { return comm_; }

  // x [rows, cols], in place.
  void copy_to_tp_region_forward(const Tensor&, int, TpSite, int) {}
  void copy_to_tp_region_backward(const Tensor& dx, int rows, TpSite site, int layer);
  void reduce_from_tp_region_forward(const Tensor& x, int rows, TpSite site, int layer);
  void reduce_from_tp_region_backward(const Tensor&, int, TpSite, int) {}

  // shard [rows / tp, cols] <-> full [rows, cols].
  void gather_from_sp_region_forward(const Tensor& shard, const Tensor& full, int rows, TpSite site,
                                     int layer);
  void gather_from_sp_region_backward(const Tensor& dfull, const Tensor& dshard, int rows,
                                      TpSite site, int layer);
  void reduce_scatter_to_sp_region_forward(const Tensor& full, const Tensor& shard, int rows,
                                           TpSite site, int layer);
  void reduce_scatter_to_sp_region_backward(const Tensor& dshard, const Tensor& dfull, int rows,
                                            TpSite site, int layer);

  // A column-parallel layer's input `full` [rows, cols], the same on every tp rank.
  //   forward: SP: this rank's rows `shard` [rows / tp, cols] all-gathered into `full`;
  //            otherwise `full` already holds them (shard is not read).
  //   backward: `dfull` [rows, cols] holds partial sums; returns the summed gradient of this
  //            rank's rows: SP: reduce-scattered into `dshard`; otherwise all-reduced in place,
  //            `dfull` itself (dshard is not touched).
  void column_parallel_input_forward(const Tensor& shard, const Tensor& full, int rows, TpSite site,
                                     int layer);
  Tensor column_parallel_input_backward(const Tensor& dfull, const Tensor& dshard, int rows,
                                        TpSite site, int layer);
  // A row-parallel layer's output: `partial` [rows, cols] holds this rank's partial sums.
  //   forward: returns the sums of this rank's rows: SP: reduce-scattered into `shard`
  //            [rows / tp, cols]; otherwise all-reduced in place, `partial` itself.
  //   backward: returns the gradient of the full output: SP: `dshard` all-gathered into
  //            `dfull`; otherwise `dshard` itself, which holds every row (dfull is not touched).
  Tensor row_parallel_output_forward(const Tensor& partial, const Tensor& shard, int rows,
                                     TpSite site, int layer);
  Tensor row_parallel_output_backward(const Tensor& dshard, const Tensor& dfull, int rows,
                                      TpSite site, int layer);

  // Small exact reductions of the vocab-parallel cross-entropy (sites ce.max, ce.sum); never
  // compressed.
  void all_reduce_max(const Tensor& x);
  void all_reduce_sum(const Tensor& x);

 private:
  SiteComm* comm_ = nullptr;
  bool sequence_parallel_ = false;
};

}  // namespace taco
