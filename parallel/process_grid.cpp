#include "parallel/process_grid.h"

#include <string>
#include <vector>

#include "kernels/check.h"

namespace taco {

int grid_world_rank(const GridShape& s, const GridCoord& c) {
  return (c.dp * s.pp + c.pp) * s.tp + c.tp;
}

GridCoord grid_coord(const GridShape& s, int world_rank) {
  GridCoord c;
  c.tp = world_rank % s.tp;
  c.pp = (world_rank / s.tp) % s.pp;
  c.dp = world_rank / (s.tp * s.pp);
  return c;
}

std::string layout_string(const GridShape& s) {
  return "tp=" + std::to_string(s.tp) + " pp=" + std::to_string(s.pp) +
         " dp=" + std::to_string(s.dp) + " (world " + std::to_string(s.tp * s.pp * s.dp) + ")";
}

namespace {

// "launch with mpirun -np 2 or change parallel.tp" (naming the axes that are not 1), and the dp
// that would fit this world when there is one.
std::string world_mismatch(const GridShape& s, int world_size) {
  const int product = s.dp * s.pp * s.tp;
  std::string keys;
  for (auto [key, value] :
       {std::pair{"parallel.tp", s.tp}, {"parallel.pp", s.pp}, {"parallel.dp", s.dp}}) {
    if (value != 1) keys += (keys.empty() ? "" : "/") + std::string(key);
  }
  if (keys.empty()) keys = "parallel.dp";
  std::string msg = "world size " + std::to_string(world_size) +
                    " != dp*pp*tp = " + std::to_string(s.dp) + "*" + std::to_string(s.pp) + "*" +
                    std::to_string(s.tp) + "; launch with mpirun -np " + std::to_string(product) +
                    " or change " + keys;
  const int model_parallel = s.tp * s.pp;
  if (world_size % model_parallel == 0) {
    msg += " (parallel.dp = " + std::to_string(world_size / model_parallel) + " fits)";
  }
  return msg;
}

void check_divides(const char* model_key, int value, const char* axis_key, int axis,
                   const char* why) {
  if (value > 0 && value % axis != 0) {
    throw UserError(std::string(model_key) + " = " + std::to_string(value) +
                    " is not divisible by " + axis_key + " = " + std::to_string(axis) + " (" + why +
                    "); choose " + axis_key + " dividing " + std::to_string(value) + " or change " +
                    model_key);
  }
}

}  // namespace

void validate_grid(const GridShape& s, int world_size, const GridModelSizes& m) {
  for (auto [key, value] :
       {std::pair{"parallel.tp", s.tp}, {"parallel.pp", s.pp}, {"parallel.dp", s.dp}}) {
    if (value < 1) {
      throw UserError(std::string(key) + " = " + std::to_string(value) + " must be at least 1");
    }
  }
  if (int64_t(s.dp) * s.pp * s.tp != world_size) throw UserError(world_mismatch(s, world_size));
  check_divides("model.n_head", m.n_head, "parallel.tp", s.tp,
                "each tensor-parallel rank holds n_head/tp heads");
  check_divides("model.d_model", m.d_model, "parallel.tp", s.tp,
                "each tensor-parallel rank holds d_model/tp columns");
  // No vocab_size % tp check: the layout pads the vocabulary (padded_vocab_size), so 50257
  // splits over any tp. The padded size must split; a change of the padding rule that broke it
  // would be our bug, not the user's.
  TACO_CHECK(padded_vocab_size(m.vocab_size, s.tp) % s.tp == 0,
             "padded vocabulary " + std::to_string(padded_vocab_size(m.vocab_size, s.tp)) +
                 " does not split over tp = " + std::to_string(s.tp));
  if (m.sequence_parallel) {
    check_divides("model.seq_len", m.seq_len, "parallel.tp", s.tp,
                  "with parallel.sequence_parallel each tp rank holds seq_len/tp tokens");
  }
  check_divides("model.n_layer", m.n_layer, "parallel.pp", s.pp,
                "each pipeline stage holds n_layer/pp blocks");
}

ProcessGrid::ProcessGrid(MPI_Comm world, GridShape shape, const GridModelSizes& model)
    : shape_(shape) {
  int world_size = 0, world_rank = 0;
  TACO_CHECK_MPI(MPI_Comm_size(world, &world_size), "world", "comm_size", 0);
  TACO_CHECK_MPI(MPI_Comm_rank(world, &world_rank), "world", "comm_rank", 0);
  validate_grid(shape_, world_size, model);  // before anything is created

  coord_ = grid_coord(shape_, world_rank);
  const GridShape& s = shape_;
  const GridCoord& c = coord_;
  world_ = std::make_unique<MpiCommunicator>(world, "world");
  // Every rank runs the same splits in the same order (they are collective over world).
  tp_ = world_->split(c.dp * s.pp + c.pp, c.tp, "tp");
  pp_ = world_->split(c.dp * s.tp + c.tp, c.pp, "pp");
  dp_ = world_->split(c.pp * s.tp + c.tp, c.dp, "dp");
  mp_ = world_->split(c.dp, c.pp * s.tp + c.tp, "mp");
  const bool end_stage = is_first_stage() || is_last_stage();
  embedding_ = world_->split(end_stage ? c.dp * s.tp + c.tp : MPI_UNDEFINED, c.pp, "embedding");

  TACO_CHECK(tp_->size() == s.tp && tp_->rank() == c.tp, "tp group does not match the layout");
  TACO_CHECK(pp_->size() == s.pp && pp_->rank() == c.pp, "pp group does not match the layout");
  TACO_CHECK(dp_->size() == s.dp && dp_->rank() == c.dp, "dp group does not match the layout");
}

MpiCommunicator& ProcessGrid::embedding() const {
  TACO_CHECK(embedding_ != nullptr,
             "stage " + std::to_string(coord_.pp) + " of " + std::to_string(shape_.pp) +
                 " is not in the embedding group (first and last stages only)");
  return *embedding_;
}

}  // namespace taco
