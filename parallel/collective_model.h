// How long a collective takes on a link: the alpha-beta model that taco-plan (tools/plan) and
// codec: auto (parallel/codec_autotune.h) both predict with, and its fit to measured times.
//
// A link has a latency alpha (seconds per message) and a bandwidth B (bytes per second one rank
// pushes in one direction). Over p ranks, for a message of n logical bytes (the whole buffer, as
// nccl-tests and CommOpStats count it):
//
//   all_reduce                       2 (p - 1) (alpha + n / (p B))   ring, or two-shot
//   reduce_scatter, all_gather,
//   all_to_all                         (p - 1) (alpha + n / (p B))
//   send, recv, send_recv, broadcast            alpha + n / B
//
// NCCL's ring and MPI's two-shot move the same bytes in as many steps; a compressed collective
// (parallel/compressed_collectives.h) is the same shapes over encoded chunks.
#pragma once

#include <vector>

#include "parallel/communicator.h"

namespace taco {

struct LinkModel {
  double latency_s = 0;      // alpha
  double bandwidth_Bps = 0;  // B; 0 or less reads as infinitely fast
};

// Seconds of one `op` of `bytes` over `ranks` ranks (0 for a group of one, or a barrier).
double collective_seconds(CommOp op, int ranks, double bytes, const LinkModel& link);

// A codec's speeds in native (uncompressed) bytes per second; 0 or less reads as free.
struct CodecThroughput {
  double encode_Bps = 0;
  double decode_Bps = 0;
};

// The parts of one compressed collective, in seconds.
struct CompressedSeconds {
  double encode_s = 0;
  double wire_s = 0;
  double decode_s = 0;
  double total() const { return encode_s + wire_s + decode_s; }
};

// One compressed `op` of a message of `native_bytes` over `ranks` ranks, as parallel/
// compressed_collectives.h runs it, for p = ranks and n = native_bytes:
//   all_reduce      all_to_all of p slots + all_gather of p sum slots; encode n + n/p (the
//                   message, then one's summed chunk), decode 2n (the chunks one sums, then
//                   every gathered sum)
//   reduce_scatter  all_to_all of p slots; encode n, decode n
//   all_gather      all_gather of p slots; encode n/p, decode n
//   send, recv, send_recv  one message of slot bytes; encode n and decode n (both ends)
// `slot_bytes`: one encoded chunk as it travels (send: the whole encoded message);
// `sum_slot_bytes`: all_reduce's second shot, one encoded chunk of sums (unused otherwise).
CompressedSeconds compressed_collective_seconds(CommOp op, int ranks, double native_bytes,
                                                double slot_bytes, double sum_slot_bytes,
                                                const CodecThroughput& codec,
                                                const LinkModel& link);

// (message bytes, seconds) of one timed call.
struct TimedCall {
  double bytes = 0;
  double seconds = 0;
};

// The link whose collective_seconds(op, ranks, .) best fits `calls` (at least two sizes), in
// relative error: a weighted least-squares line through (bytes, seconds) with weights 1/seconds^2,
// so a 4 KiB call counts as much as a 4 MiB one. A negative intercept is read as zero latency
// and a slope of zero or less as an infinitely fast link (bandwidth 0). ranks must be >= 2.
LinkModel fit_link(CommOp op, int ranks, const std::vector<TimedCall>& calls);

}  // namespace taco
