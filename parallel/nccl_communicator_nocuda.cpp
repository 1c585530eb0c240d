// A build without CUDA has no NCCL: asking for it is the one UserError; nothing waits.
#include "parallel/nccl_communicator.h"

#include <string>

#include "kernels/check.h"

namespace taco {

std::unique_ptr<Communicator> make_nccl_communicator(const MpiCommunicator&, std::string name,
                                                     double) {
  throw UserError("NCCL communicator for group " + name +
                  ": this build has no CUDA; set parallel.backend: mpi");
}

bool nccl_available() { return false; }

void wait_for_communicator(Communicator&, Stream) {}

}  // namespace taco
