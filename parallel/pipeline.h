// The 1F1B pipeline schedule (Megatron's non-interleaved schedule), over a stage's pp group.
//
// Stage s of P with M micro-batches runs min(P - s - 1, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. Activations move forward at
// site pp.act and gradients backward at pp.grad; where a stage both sends and receives in the
// same step it uses one combined exchange, so no pair of stages can block each other.
// Micro-batch m uses activation slot m % slots (1F1B keeps at most P - s in flight).
#pragma once

#include <functional>

#include "engine/runtime/tensor.h"
#include "parallel/site_comm.h"

namespace taco {

struct PipelineStage {
  std::function<void(int micro, int slot)> forward;   // forward of micro-batch `micro`
  std::function<void(int micro, int slot)> backward;  // backward of micro-batch `micro`
  std::function<Tensor(int slot)> input;              // [rows, C] received before forward
  std::function<Tensor(int slot)> output;             // [rows, C] sent after forward
  std::function<Tensor()> grad;  // d(output) before backward; d(input) after it
  // input, output and grad are asked for only where a tensor crosses to another stage: a
  // single stage may leave them empty.
};

// Runs every micro-batch's forward and backward on this stage. `pp` is the pipeline group
// (stage = group rank); with one stage it is a plain loop.
void run_1f1b(SiteComm* pp, int micro_batches, int slots, const PipelineStage& stage);

// Forward only (evaluation): each micro-batch flows through the stages in order.
void run_forward_only(SiteComm* pp, int micro_batches, const PipelineStage& stage);

}  // namespace taco
