// Megatron's tensor-parallel mappings as named forward/backward pairs (STYLE.md), each taking
// the communication site and layer it serves (DESIGN.md §3):
//
//   copy_to_tp_region            fwd: identity              bwd: all-reduce      (*.in sites)
//   reduce_from_tp_region        fwd: all-reduce            bwd: identity        (*.out sites)
//   gather_from_sp_region        fwd: all-gather (SP)       bwd: reduce-scatter
//   reduce_scatter_to_sp_region  fwd: reduce-scatter (SP)   bwd: all-gather
//
// With tp = 1 every mapping is the identity and nothing communicates.
#pragma once

#include <string>

#include "engine/runtime/tensor.h"

namespace taco {

class TensorParallel {
 public:
  TensorParallel() = default;  // tp = 1
  virtual ~TensorParallel() = default;

  virtual int size() const { return 1; }
  virtual int rank() const { return 0; }

  // x is [rows, cols]; the mappings work in place.
  virtual void copy_to_tp_region_forward(const Tensor&, int /*rows*/, const char* /*site*/,
                                         int /*layer*/) {}
  virtual void copy_to_tp_region_backward(const Tensor&, int, const char*, int) {}
  virtual void reduce_from_tp_region_forward(const Tensor&, int, const char*, int) {}
  virtual void reduce_from_tp_region_backward(const Tensor&, int, const char*, int) {}

  // Small fp32 reductions of the vocab-parallel cross-entropy; never compressed.
  virtual void all_reduce_max(const Tensor&) {}
  virtual void all_reduce_sum(const Tensor&) {}
};

}  // namespace taco
