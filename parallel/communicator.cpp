#include "parallel/communicator.h"

#include <string>

#include "kernels/check.h"

namespace taco {

void Communicator::all_reduce_values(double*, size_t, ReduceOp) {
  TACO_CHECK(false, std::string("all_reduce_values on group ") + name() + ": backend " + backend() +
                        " does not reduce host values");
}

}  // namespace taco
