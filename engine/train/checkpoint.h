// Checkpoints (docs/design.md §6). One folder per saved step, one file per rank:
//
//   <dir>/step_00000120/rank_00000.bin ... rank_<world-1>.bin, then COMPLETE
//
// Writing (collective over the world): rank 0 makes <dir>/step_N.tmp/; every rank writes its file
// there as rank_R.bin.part, flushes it to disk and renames it to rank_R.bin; once all ranks have,
// rank 0 renames the folder to step_N, writes the COMPLETE marker last, then applies retention.
// A crash at any point leaves either a folder without the marker (skipped on resume, with a
// warning) or the previous checkpoints untouched.
//
// Retention counts verified checkpoints only: the `keep` newest by step whose marker is there and
// whose every rank file checks out (size and checksum; each rank checks its own file, once per
// folder and run: the ones this run wrote or resumed from are known good). A damaged folder is
// reported and moved aside to step_N.damaged (never deleted, never counted); complete folders
// older than the keep-th verified one are deleted, marker-less ones too. So the newest verified
// checkpoint, the one just saved, and the one this run resumed from until a newer verified one
// exists, always stay.
//
// A rank file: "TACOCKP1", u32 version, u64 header length, the header (text lines "key=value",
// one "section=NAME BYTES" per section, in order), the sections' bytes, a u64 checksum of
// everything between the magic and the checksum, "TACOEND1". Truncation or a flipped bit fails
// the size or checksum check.
//
// Resuming picks the newest checkpoint whose marker is there and whose every rank file checks
// out; older ones are the fallback. A checkpoint of another layout (the `layout` text differs:
// parallel sizes, model, dtype or device) is refused with a one-line error.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace taco {

class MpiCommunicator;

// One named piece of a rank's state, as host bytes.
struct CheckpointPart {
  std::string name;
  std::vector<uint8_t> bytes;
};

// A rank file read back (checked), for loading and for tools (taco-generate).
struct RankCheckpoint {
  std::map<std::string, std::string> header;  // "layout", "step", "rank", ...
  std::vector<CheckpointPart> sections;
  const CheckpointPart* find(const std::string& name) const;
};

// Writes one rank file atomically (.part, fsync, rename). Throws Error on I/O failure.
void write_rank_checkpoint(const std::string& path,
                           const std::map<std::string, std::string>& header,
                           const std::vector<CheckpointPart>& sections);
// Reads and checks one rank file; throws UserError naming the file and what is wrong.
RankCheckpoint read_rank_checkpoint(const std::string& path);
// The same checks without keeping the data (reads in pieces of 4 MB).
void verify_rank_checkpoint(const std::string& path);

std::string checkpoint_step_name(int64_t step);  // "step_00000120"
std::string rank_file_name(int rank);            // "rank_00003.bin"

// The newest complete checkpoint folder under `dir` (marker present), or "" if none; `partial`
// collects folders without a marker. Single-process (tools).
std::string newest_complete_checkpoint(const std::string& dir, std::vector<std::string>* partial);
// Every complete checkpoint folder under `dir` (marker present), newest step first (tools that
// fall back to an older one when the newest is damaged, as the trainer does).
std::vector<std::string> complete_checkpoints(const std::string& dir);

// Collective. Refuses (UserError on every rank, naming the folder) a checkpoint folder that
// cannot be written: every rank creates and removes a file there, before training starts.
void check_checkpoint_dir_writable(const std::string& dir, MPI_Comm world);

class Checkpointer {
 public:
  // Collective over `world` (its communicator is duplicated: the agreements travel apart).
  Checkpointer(std::string dir, int keep, MPI_Comm world);
  ~Checkpointer();

  const std::string& dir() const { return dir_; }

  // Collective. Saves this rank's sections as step `step`; returns the folder. Every rank throws
  // the same Error if any rank failed.
  std::string save(int64_t step, const std::string& layout,
                   const std::map<std::string, std::string>& header,
                   const std::vector<CheckpointPart>& sections);

  // Collective. Loads the newest usable checkpoint into `out` (this rank's file) and returns its
  // step, or -1 when there is none. Marker-less folders and checkpoints with a bad rank file are
  // skipped with a warning; one written with another layout throws UserError on every rank.
  int64_t restore(const std::string& layout, RankCheckpoint* out);

  // Collective. The newest complete checkpoint's step (no file checks), or -1.
  int64_t newest_step();

  // The step restore() loaded, or -1.
  int64_t resumed_step() const { return resumed_step_; }

 private:
  // Collective: retention after the save of `saved_step` (see the top of this file).
  void apply_retention(int64_t saved_step);
  // Collective: every rank file of `folder` (written by `world` ranks) checks out; else false
  // and `message` says which one and why, on every rank.
  bool verify_folder(const std::string& folder, int world, std::string* message);

  std::string dir_;
  int keep_;
  std::unique_ptr<MpiCommunicator> world_;
  int rank_ = 0, size_ = 1;
  int64_t resumed_step_ = -1;
  std::set<int64_t> known_good_;  // steps of the folders this run wrote, loaded or verified
};

// SIGINT/SIGTERM: the handler only records the signal; the trainer checks stop_signal() after
// each step (agreeing over all ranks), saves a checkpoint and stops.
void install_stop_signal_handlers();
int stop_signal();             // 0 while none was received
void request_stop(int signo);  // what the handler does (tests)
void clear_stop_request();

}  // namespace taco
