// codec: auto at run time (compression/policy.h): for one communicator group, whether a message
// at (site, layer) goes through its candidate codec or the native collective, decided from what
// this run measures on this group (docs/design.md §10).
//
// At the first message of each (site, layer, op, dtype, shape, candidate) the group, inside that
// very call (so every rank of the group does the same collectives in the same order):
//   1. link, once per group: the native all_reduce timed at three sizes up to the message's
//      (at least 256 KiB, at most 64 MiB), after a barrier, the fastest of kProbeRepeats calls
//      each; the slowest rank's times (max over the group) are fitted with fit_link
//      (parallel/collective_model.h). Groups across nodes and within one get their own fits.
//   2. codec, once per (candidate, dtype, shape, path): the candidate's encode and decode timed
//      on a made-up message of that shape (normal values), the fastest of kBenchRepeats, with
//      the device kernels where the message takes the device path, else the CPU codec.
//   3. prediction: compressed_collective_seconds (encode + wire of the encoded slots + decode)
//      against collective_seconds of the native op; the four numbers are replaced by their max
//      over the group (one all_reduce_values), so every rank holds the same numbers and makes
//      the same choice: compress where encode + wire + decode < (1 - margin) x native.
// Later messages of the same key reuse the decision; recheck() forgets them (and the link) so
// they are measured again at their next use.
//
// Point-to-point sites (pp.act, pp.grad) cannot decide inside a send: its two ends make
// different calls, and the other ranks of the group none, so nothing can be agreed there.
// They are decided ahead instead, by prepare_point_to_point(), in a call every rank of the
// group makes in the same order (the trainer makes it before the first step, for the shape the
// pipeline sends): link from a ring of send_recv calls (each rank to the next, at three sizes,
// fitted as one message: alpha + n / B), codec as above, prediction one message each way
// (encode, wire of the encoded message, decode), agreed the same way. A send and a receive of
// that (site, dtype, shape) then both read the one decision; a point-to-point message never
// prepared goes natively, and the table says so. A recheck() re-decides the prepared ones at
// once, so it too must be called by every rank of the group at the same point.
//
// Test hook (never set in production): TACO_AUTO_LINK="LATENCY_US:GBPS" replaces step 1's probe
// with that link on the ranks that have it (the max over the group still applies), so tests
// and demos can force either outcome on any machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/sites.h"
#include "engine/runtime/device.h"
#include "parallel/collective_model.h"
#include "parallel/communicator.h"

namespace taco {

// The pure decision: the predicted times of one message both ways and the choice.
struct AutoPrediction {
  CompressedSeconds compressed;
  double native_s = 0;
  bool compress = false;
};

// Whether `compressed` beats `native_s` by `margin` (a fraction in [0, 1)).
bool auto_compresses(const CompressedSeconds& compressed, double native_s, double margin);

// One message of `op` over `ranks` ranks: `native_bytes` as SiteComm counts it (the whole
// buffer), `slot_bytes` / `sum_slot_bytes` its encoded chunks (compressed_collective_seconds).
AutoPrediction predict_auto_codec(CommOp op, int ranks, double native_bytes, double slot_bytes,
                                  double sum_slot_bytes, const CodecThroughput& codec,
                                  const LinkModel& link, double margin);

// A message codec: auto is asked about.
struct AutoMessage {
  Site site = Site::embed_fwd;
  int layer = -1;  // -1: a model-wide site
  CommOp op = CommOp::all_reduce;
  DType dtype = DType::f32;
  MessageShape shape;                   // the whole message, [rows, cols]
  DeviceKind memory = DeviceKind::cpu;  // where its buffers live (the probe's go there too)
  bool device_codec = false;            // the candidate runs its device kernels on it
};

// One decision, as the table prints it.
struct AutoDecision {
  AutoMessage message;
  CodecOptions candidate;
  double native_bytes = 0;
  AutoPrediction prediction;  // agreed over the group
  bool tuned = true;          // false: a point-to-point message never prepared, sent natively
  // After a recheck(): the choice before it (a change is what gets logged).
  std::optional<bool> previous;
};

class CodecAutotune {
 public:
  static constexpr int kProbeRepeats = 5;
  static constexpr int kBenchRepeats = 3;

  CodecAutotune(Communicator& comm, double margin);

  // Whether `m` goes through `candidate` (true) or the native collective (false). The first
  // time for its key it measures and agrees over the group: every rank of the group must be in
  // the same call. A point-to-point `m` (send, recv, send_recv) only reads the decision
  // prepare_point_to_point made for it, and goes natively without one.
  bool compress(const AutoMessage& m, const Codec& candidate);

  // Decides a point-to-point message now (its op is ignored: a send and a receive of it share
  // the decision); every rank of the group must be in the same call. Deciding one twice keeps
  // the first decision.
  void prepare_point_to_point(const AutoMessage& m, const Codec& candidate);

  // Forgets every decision and the links: a collective's is measured and agreed again at its
  // next use, a prepared point-to-point message's right away (every rank of the group calls).
  void recheck();
  // Decisions made since the last call, in the order they were made.
  std::vector<AutoDecision> take_new_decisions();
  // Uses `link` instead of probing (tests).
  void set_link(const LinkModel& link) { link_ = link; }
  // The group's fitted (agreed) or set link; empty before the first tuned message. link() is
  // the collectives' (fitted to all_reduce), p2p_link() the point-to-point messages' (fitted to
  // send_recv).
  const std::optional<LinkModel>& link() const { return link_; }
  const std::optional<LinkModel>& p2p_link() const { return p2p_link_; }
  const std::string& group() const { return comm_.name(); }
  int ranks() const { return comm_.size(); }

 private:
  struct Entry {
    AutoMessage message;
    CodecOptions candidate;
    bool compress = false;
    bool tuned = true;  // false: a point-to-point message never prepared
  };
  struct Bench {
    CodecOptions options;
    DType dtype;
    MessageShape shape;
    bool device;
    CodecThroughput speed;
  };

  static constexpr int kProbeTag = 32701;  // the point-to-point probe's messages

  // `op`: all_reduce, or send_recv for the point-to-point link.
  LinkModel probe_link(CommOp op, DeviceKind memory, double message_bytes);
  CodecThroughput bench(const AutoMessage& m, const Codec& codec);
  AutoDecision decide(const AutoMessage& m, const Codec& candidate);
  const Entry* find(const AutoMessage& m, const CodecOptions& candidate) const;
  void record(const AutoDecision& d);

  Communicator& comm_;
  double margin_;
  std::optional<LinkModel> link_, p2p_link_;
  std::optional<LinkModel> injected_link_;  // TACO_AUTO_LINK, for both
  std::vector<Entry> decided_;
  std::vector<Bench> benches_;
  std::vector<AutoDecision> new_;
  std::vector<Entry> before_recheck_;
};

// The decisions as a table, in site order, one line per run of consecutive layers with the same
// site, op, shape, times and choice, under a heading that names the group and its link:
//
//   codec: auto on group tp (2 ranks, mpi): link 4.1 us + 6.20 GB/s; margin 10%
//     site          layers  op              bytes  encode ms   wire ms  decode ms  native ms choice
//     attn.out.fwd  0-3     all_reduce      4096       0.004     0.011      0.003      0.012  none
std::string auto_decision_table(const std::vector<AutoDecision>& decisions,
                                const CodecAutotune& tune, double margin);

}  // namespace taco
