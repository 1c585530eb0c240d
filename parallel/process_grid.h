// ProcessGrid: world = dp x pp x tp with tp fastest (Megatron's order), and one communicator per
// group this rank belongs to.
//
//   world rank = (dp_i * pp + pp_i) * tp + tp_i
//
// so the tp ranks of one stage are neighbours (one node, the fastest links), a pipeline runs
// across tp-blocks, and data-parallel replicas are the slowest-varying index. Example, tp=2 pp=2
// dp=2: tp groups {0,1} {2,3} {4,5} {6,7}; pp groups {0,2} {1,3} {4,6} {5,7}; dp groups {0,4}
// {1,5} {2,6} {3,7}. In every group, the group rank is this rank's coordinate along it (tp rank
// = tp_i, pp rank = pp_i = stage, dp rank = dp_i).
//
// Groups (each an MpiCommunicator on host memory; NCCL communicators are bootstrapped from them):
//   world      all ranks
//   tp         same (dp_i, pp_i): the tensor-parallel collectives
//   pp         same (dp_i, tp_i): one pipeline, ordered by stage, for p2p between stages
//   dp         same (pp_i, tp_i): gradient all-reduce / ZeRO-1 between replicas
//   mp         same dp_i: one model replica (tp x pp), e.g. the global gradient norm
//   embedding  first + last stage of this pipeline (Megatron's embedding group): the tied
//              word-embedding gradient is summed here. Ranks of middle stages are not members;
//              with pp = 1 it is this rank alone.
//
// Validation happens before any communicator is created, from inputs every rank shares, so all
// ranks throw the same taco::UserError (exit code 2) and none waits for a peer.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/mpi_communicator.h"
#include "parallel/vocab_split.h"

namespace taco {

struct GridShape {
  int tp = 1;
  int pp = 1;
  int dp = 1;
};

// Model sizes the layout must split evenly. 0 skips a check.
struct GridModelSizes {
  int n_head = 0;      // % tp: each tp rank owns n_head/tp attention heads
  int d_model = 0;     // % tp: column/row-parallel shards of the hidden dimension
  int n_layer = 0;     // % pp: each stage owns n_layer/pp blocks
  int vocab_size = 0;  // the real vocabulary: padded_vocab_size splits it over any tp
  int seq_len = 0;     // % tp, only with sequence_parallel: each tp rank owns seq_len/tp tokens
  bool sequence_parallel = false;
};

// This rank's position along each axis.
struct GridCoord {
  int tp = 0;
  int pp = 0;
  int dp = 0;
};

// (dp_i * pp + pp_i) * tp + tp_i, and its inverse.
int grid_world_rank(const GridShape& shape, const GridCoord& c);
GridCoord grid_coord(const GridShape& shape, int world_rank);

// "tp=2 pp=1 dp=1 (world 2)"
std::string layout_string(const GridShape& shape);

// Throws taco::UserError with one line for the first problem: an axis below 1, world size !=
// dp*pp*tp, or a model size that the layout does not divide (the vocabulary always divides once
// padded).
void validate_grid(const GridShape& shape, int world_size, const GridModelSizes& model = {});

class ProcessGrid {
 public:
  // Collective over `world`: validates, then creates every group (MPI_Comm_split).
  ProcessGrid(MPI_Comm world, GridShape shape, const GridModelSizes& model = {});
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int world_rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  std::string layout_string() const { return taco::layout_string(shape_); }

  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == shape_.pp - 1; }
  // Ranks in pp() of the neighbouring stages; -1 past either end of the pipeline.
  int prev_stage() const { return is_first_stage() ? -1 : coord_.pp - 1; }
  int next_stage() const { return is_last_stage() ? -1 : coord_.pp + 1; }

  MpiCommunicator& world() const { return *world_; }
  MpiCommunicator& tp() const { return *tp_; }
  MpiCommunicator& pp() const { return *pp_; }
  MpiCommunicator& dp() const { return *dp_; }
  MpiCommunicator& mp() const { return *mp_; }
  // First or last stage (every rank when pp = 1).
  bool in_embedding_group() const { return embedding_ != nullptr; }
  // Throws taco::Error on a middle stage: check in_embedding_group() first.
  MpiCommunicator& embedding() const;

 private:
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<MpiCommunicator> world_, tp_, pp_, dp_, mp_, embedding_;
};

}  // namespace taco
