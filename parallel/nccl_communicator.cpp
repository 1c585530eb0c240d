// The backend choice and the device-communicator factory of parallel/nccl_communicator.h, the
// same in every build (NCCL itself: nccl_communicator_cuda.cpp).
#include "parallel/nccl_communicator.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/runtime/device.h"
#include "kernels/check.h"
#include "parallel/mpi_communicator.h"
#include "parallel/staged_communicator.h"

namespace taco {

bool use_nccl_backend(MPI_Comm world, const std::string& backend, const std::string& source) {
  MPI_Comm node = MPI_COMM_NULL;
  int node_ranks = 1, mine = 0, fewest = 0;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_free(&node);
  // Every rank must decide alike: the node with the least room decides for all.
  mine = cuda_device_count() >= node_ranks ? 1 : 0;
  MPI_Allreduce(&mine, &fewest, 1, MPI_INT, MPI_MIN, world);
  const bool own_gpu = fewest == 1;
  if (backend == "nccl" && !own_gpu) {
    throw UserError(source + ": parallel.backend: nccl needs one GPU per rank, but " +
                    std::to_string(node_ranks) + " ranks share " +
                    std::to_string(cuda_device_count()) +
                    " GPU(s) on a node; use backend: mpi (or auto)");
  }
  return backend == "nccl" || (backend == "auto" && own_gpu);
}

int gpus_in_use(const MpiCommunicator& world, int device_index) {
  MPI_Comm node = MPI_COMM_NULL;
  TACO_CHECK_MPI(MPI_Comm_split_type(world.comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                 world.name(), "comm_split_type", 0);
  int local = 0, local_rank = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_rank(node, &local_rank);
  std::vector<int> devices(size_t(local), -1);
  TACO_CHECK_MPI(MPI_Allgather(&device_index, 1, MPI_INT, devices.data(), 1, MPI_INT, node),
                 world.name(), "all_gather (devices)", sizeof(int) * size_t(local));
  MPI_Comm_free(&node);
  std::sort(devices.begin(), devices.end());
  const int distinct = int(std::unique(devices.begin(), devices.end()) - devices.begin());
  int total = 0;
  const int mine = local_rank == 0 ? distinct : 0;
  TACO_CHECK_MPI(MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, world.comm()), world.name(),
                 "all_reduce (devices)", sizeof(int));
  return total;
}

std::unique_ptr<Communicator> make_device_communicator(MpiCommunicator& group, bool nccl,
                                                       StagedReduce staged_reduce,
                                                       size_t stage_piece_bytes) {
  if (nccl) return make_nccl_communicator(group, group.name());
  return std::make_unique<HostStagedCommunicator>(group, staged_reduce, stage_piece_bytes);
}

}  // namespace taco
