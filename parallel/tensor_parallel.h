// Megatron's tensor-parallel mappings as named forward/backward pairs (docs/style.md), each taking
// the communication site and layer it serves (docs/design.md §3). Tensors are [rows, cols]; with
// sequence parallelism a rank holds rows / tp of the token rows between the parallel regions.
//
//   copy_to_tp_region            fwd: identity              bwd: all-reduce      (*.in sites)
//   reduce_from_tp_region        fwd: all-reduce            bwd: identity        (*.out sites)
//   gather_from_sp_region        fwd: all-gather rows       bwd: reduce-scatter  (*.in, SP)
//   reduce_scatter_to_sp_region  fwd: reduce-scatter rows   bwd: all-gather      (*.out, SP)
//
// With tp = 1 every mapping is the identity (gather and scatter copy) and nothing communicates.
#pragma once

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
  void copy_to_tp_region_forward(const Tensor&, int, const char*, int) {}
  void copy_to_tp_region_backward(const Tensor& dx, int rows, const char* site, int layer);
  void reduce_from_tp_region_forward(const Tensor& x, int rows, const char* site, int layer);
  void reduce_from_tp_region_backward(const Tensor&, int, const char*, int) {}

  // shard [rows / tp, cols] <-> full [rows, cols].
  void gather_from_sp_region_forward(const Tensor& shard, const Tensor& full, int rows,
                                     const char* site, int layer);
  void gather_from_sp_region_backward(const Tensor& dfull, const Tensor& dshard, int rows,
                                      const char* site, int layer);
  void reduce_scatter_to_sp_region_forward(const Tensor& full, const Tensor& shard, int rows,
                                           const char* site, int layer);
  void reduce_scatter_to_sp_region_backward(const Tensor& dshard, const Tensor& dfull, int rows,
                                            const char* site, int layer);

  // Small exact reductions of the vocab-parallel cross-entropy; never compressed.
  void all_reduce_max(const Tensor& x);
  void all_reduce_sum(const Tensor& x);

 private:
  SiteComm* comm_ = nullptr;
  bool sequence_parallel_ = false;
};

}  // namespace taco
