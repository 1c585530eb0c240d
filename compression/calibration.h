// group: auto. During the first calibrate_steps steps a site's real tensors [rows, cols]
// (tokens x hidden) are fed to its GroupCalibrator, which encodes and decodes each with every
// group size G in {32, ..., 512} along hidden and along tokens, and then picks one.
//
// Score: the mean over channels (columns) of the per-channel relative error
//   e_c = ||x^[:, c] - x[:, c]|| / ||x[:, c]||,  score = mean_c e_c   (channels with ||x_c|| > 0)
// accumulated over every observed tensor. A global ||x^ - x|| / ||x|| hides the damage that a
// transform along hidden does to small channels next to outlier channels (docs/design.md §4: 4.5x
// on small channels while the global error barely moves), so it is reported but not used. A flat
// message (rows = 1) has no channels; there the global error is the score.
//
// Choice: among the candidates whose G divides every observed tensor along the axis, those
// within `tolerance` (default 10%) of the best score; of these the one with the fewest wire
// bytes (larger G = fewer scales), ties to the lower score.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compression/codec_options.h"
#include "compression/stats.h"
#include "compression/wire_format.h"
#include "kernels/dtype.h"

namespace taco {

struct CalibrationCandidate {
  int group = 0;
  GroupAxis axis = GroupAxis::hidden;
  bool valid = true;              // G divided every observed tensor along the axis
  double mean_channel_error = 0;  // the score (global error for flat messages)
  double global_error = 0;        // ||x^ - x|| / ||x|| over everything observed
  double bytes_per_element = 0;   // wire bytes / elements at the last observed shape
};

struct CalibrationChoice {
  std::string site;
  CodecOptions options;  // the site's codec with the chosen group and axis
  int tensors = 0;       // tensors observed
  int steps = 0;         // steps observed
  CalibrationCandidate chosen;
  std::vector<CalibrationCandidate> candidates;  // every G x axis, in order

  // One line for the log: "calibration attn.out.fwd: taco e4m3 g128 dual token (mean channel
  // error 2.570e-02, global 2.582e-02, 1.063 B/elem) over 12 tensors; lowest error g32 token
  // 2.399e-02"
  std::string line() const;
  // Every candidate, one per line.
  std::string table() const;
  // The record the trainer saves with the run.
  std::string to_json() const;
};

class GroupCalibrator {
 public:
  // `base`: the site's codec (fp8_block or taco; its group and axis are what is chosen).
  GroupCalibrator(Site site, CodecOptions base, int steps, double tolerance = 0.10);

  // One tensor the site sent. Only the first kMaxRows rows are measured, to bound the cost.
  void observe(const float* x, MessageShape shape);
  void observe(const bf16* x, MessageShape shape);

  void end_step() { ++steps_seen_; }
  bool done() const { return steps_seen_ >= steps_; }
  int steps_seen() const { return steps_seen_; }

  // The choice from what was observed so far; with nothing observed, kUncalibrated along
  // hidden and tensors = 0.
  CalibrationChoice choice() const;

  static constexpr int64_t kMaxRows = 2048;  // a multiple of every G

 private:
  struct Accumulator {
    CalibrationCandidate candidate;
    ChannelErrors errors;
  };
  void measure(const std::vector<float>& x, MessageShape shape, MessageShape full);

  Site site_;
  CodecOptions base_;
  int steps_;
  double tolerance_;
  int steps_seen_ = 0;
  int tensors_ = 0;
  bool all_flat_ = true;
  std::vector<Accumulator> acc_;
};

}  // namespace taco
