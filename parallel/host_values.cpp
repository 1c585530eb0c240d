#include "parallel/host_values.h"

#include <cstdint>

#include "parallel/watchdog.h"

namespace taco {

double sum_over(Communicator& group, double x, Site site) {
  WatchScope watch("all_reduce", site, -1, group);
  group.all_reduce_values(&x, 1, ReduceOp::sum);
  return x;
}

int max_over(Communicator& group, int x, Site site) {
  double v = x;
  WatchScope watch("all_reduce", site, -1, group);
  group.all_reduce_values(&v, 1, ReduceOp::max);
  return int(v);
}

bool agree(Communicator& group, bool ok, std::string* message, Site site) {
  // The lowest failing rank as the largest -rank (the values reduce by sum or max only); a rank
  // that went well offers less than any rank can.
  const int rank = group.rank();
  const int none = -(1 << 30);
  const int first = -max_over(group, ok ? none : -rank, site);
  if (first == -none) return true;
  *message = broadcast_string(group, rank == first ? *message : std::string(), first, site);
  return false;
}

std::string broadcast_string(Communicator& group, const std::string& s, int root, Site site) {
  WatchScope watch("broadcast", site, -1, group, root);
  uint64_t len = s.size();
  group.broadcast(&len, sizeof len, DType::u8, root, nullptr);
  std::string out = s;
  out.resize(size_t(len));
  if (len > 0) group.broadcast(out.data(), size_t(len), DType::u8, root, nullptr);
  return out;
}

}  // namespace taco
