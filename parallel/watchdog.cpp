#include "parallel/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/mpi_communicator.h"

namespace taco {

namespace {

using Clock = std::chrono::steady_clock;

// The one open outermost scope of the process (only the main thread communicates).
struct OpenCall {
  bool open = false;
  Clock::time_point since;
  const char* op = "";
  Site site = Site::startup;
  std::string group;
  int layer = -1;
  int group_rank = 0, group_size = 1;
  int peers[2] = {kNoPeer, kNoPeer};
  std::vector<int> world_of_group;  // world rank of each group rank; empty when unknown
};

// Never freed: the detached thread may still read it while the process exits.
struct State {
  std::mutex mu;
  std::condition_variable wake;
  double timeout_s = 0;
  int world_rank = 0;
  bool thread_started = false;
  OpenCall call;
  // World ranks of a group's ranks, per MPI communicator seen (a handful of groups per run).
  std::vector<std::pair<MPI_Comm, std::vector<int>>> world_ranks;
};

State& state() {
  static State* s = new State;
  return *s;
}

std::atomic<bool> g_enabled{false};
thread_local int t_depth = 0;

// World ranks of `comm`'s ranks through MPI_Group_translate_ranks (local), cached per handle.
const std::vector<int>& world_ranks_of(State& s, MPI_Comm comm) {
  for (const auto& [c, ranks] : s.world_ranks)
    if (c == comm) return ranks;
  std::vector<int> ranks;
  int size = 0;
  MPI_Group group, world;
  if (MPI_Comm_size(comm, &size) == MPI_SUCCESS && MPI_Comm_group(comm, &group) == MPI_SUCCESS) {
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> mine(size_t(size), 0);
    for (int i = 0; i < size; ++i) mine[size_t(i)] = i;
    ranks.resize(size_t(size));
    if (MPI_Group_translate_ranks(group, size, mine.data(), world, ranks.data()) != MPI_SUCCESS)
      ranks.clear();
    MPI_Group_free(&group);
    MPI_Group_free(&world);
  }
  s.world_ranks.emplace_back(comm, std::move(ranks));
  return s.world_ranks.back().second;
}

std::string peer_text(const OpenCall& c) {
  std::vector<int> peers;
  if (c.peers[0] == kNoPeer && c.peers[1] == kNoPeer) {
    for (int r = 0; r < c.group_size; ++r)
      if (r != c.group_rank) peers.push_back(r);
  } else {
    for (int p : c.peers)
      if (p != kNoPeer && std::find(peers.begin(), peers.end(), p) == peers.end())
        peers.push_back(p);
  }
  const bool world = c.world_of_group.size() == size_t(c.group_size);
  std::string text = world ? "world rank(s) " : "group rank(s) ";
  for (size_t i = 0; i < peers.size(); ++i) {
    if (i) text += ",";
    const int p = peers[i];
    text += std::to_string(world && p >= 0 && p < c.group_size ? c.world_of_group[size_t(p)] : p);
  }
  return peers.empty() ? "no peer" : text;
}

[[noreturn]] void fire(const State& s, double open_s) {
  const OpenCall& c = s.call;
  char head[160];
  std::snprintf(head, sizeof head, "taco: rank %d: watchdog: %.0f s inside ", s.world_rank, open_s);
  std::string line = std::string(head) + c.op + " at site " + site_name(c.site);
  if (c.layer >= 0) line += " (layer " + std::to_string(c.layer) + ")";
  line += " of group " + c.group + " (group rank " + std::to_string(c.group_rank) + " of " +
          std::to_string(c.group_size) + "), waiting on " + peer_text(c) +
          "; a peer died or hangs; stopping this rank (parallel.timeout_s = ";
  char tail[64];
  std::snprintf(tail, sizeof tail, "%g); resume from the last checkpoint\n", s.timeout_s);
  line += tail;
  // write(2), not stdio: the main thread may hold stdio's lock while it is stuck.
  const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  ::_exit(kWatchdogExitCode);
}

void watch_loop() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    // Poll at a twentieth of the timeout (between 20 ms and 1 s): it fires at most 5% late.
    const double poll = s.timeout_s > 0 ? std::clamp(s.timeout_s / 20, 0.02, 1.0) : 1.0;
    s.wake.wait_for(lock, std::chrono::duration<double>(poll));
    if (s.timeout_s <= 0 || !s.call.open) continue;
    const double open_s = std::chrono::duration<double>(Clock::now() - s.call.since).count();
    if (open_s > s.timeout_s) fire(s, open_s);
  }
}

// Opens the outermost scope; returns false where it is nested or the watchdog is off.
bool open_call(const char* op, Site site, int layer, const std::string& group, int group_rank,
               int group_size, MPI_Comm comm, int peer, int second_peer) {
  if (t_depth++ > 0 || !g_enabled.load(std::memory_order_relaxed)) return false;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  OpenCall& c = s.call;
  c.open = true;
  c.since = Clock::now();
  c.op = op;
  c.site = site;
  c.layer = layer;
  c.group = group;
  c.group_rank = group_rank;
  c.group_size = group_size;
  c.peers[0] = peer;
  c.peers[1] = second_peer;
  if (comm != MPI_COMM_NULL)
    c.world_of_group = world_ranks_of(s, comm);
  else
    c.world_of_group.clear();
  return true;
}

}  // namespace

void start_watchdog(double timeout_s, int world_rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.timeout_s = timeout_s > 0 ? timeout_s : 0;
  s.world_rank = world_rank;
  g_enabled.store(s.timeout_s > 0);
  if (s.timeout_s > 0 && !s.thread_started) {
    std::thread(watch_loop).detach();
    s.thread_started = true;
  }
  s.wake.notify_all();
}

double watchdog_timeout() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.timeout_s;
}

double watchdog_open_seconds() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.call.open) return 0;
  return std::chrono::duration<double>(Clock::now() - s.call.since).count();
}

WatchScope::WatchScope(const char* op, Site site, int layer, const Communicator& group, int peer,
                       int second_peer) {
  // Nested or disabled: one load and a branch, before anything else is looked at.
  const bool watched = t_depth == 0 && g_enabled.load(std::memory_order_relaxed);
  const auto* mpi = watched ? dynamic_cast<const MpiCommunicator*>(&group) : nullptr;
  armed_ = open_call(op, site, layer, group.name(), group.rank(), group.size(),
                     mpi ? mpi->comm() : MPI_COMM_NULL, peer, second_peer);
}

WatchScope::WatchScope(const char* op, Site site, int layer, MPI_Comm group, const char* group_name,
                       int peer, int second_peer) {
  int rank = 0, size = 1;
  if (g_enabled.load(std::memory_order_relaxed) && t_depth == 0) {
    MPI_Comm_rank(group, &rank);
    MPI_Comm_size(group, &size);
  }
  armed_ = open_call(op, site, layer, group_name, rank, size, group, peer, second_peer);
}

WatchScope::WatchScope(const char* op, Site site, int world_rank, int world_size) {
  armed_ =
      open_call(op, site, -1, "world", world_rank, world_size, MPI_COMM_NULL, kNoPeer, kNoPeer);
}

std::pair<int, int> launcher_rank_and_size() {
  for (const auto& [rank_var, size_var] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"PMI_RANK", "PMI_SIZE"}, std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
    const char* r = std::getenv(rank_var);
    const char* n = std::getenv(size_var);
    if (r && n) return {std::atoi(r), std::max(1, std::atoi(n))};
  }
  return {0, 1};
}

WatchScope::~WatchScope() {
  --t_depth;
  if (!armed_) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.call.open = false;
}

}  // namespace taco
