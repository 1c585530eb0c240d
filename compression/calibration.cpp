#include "compression/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "compression/codec.h"
#include "compression/policy.h"
#include "kernels/check.h"

namespace taco {

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

std::string candidate_name(const CalibrationCandidate& c) {
  std::string s = "g";
  return s.append(std::to_string(c.group)).append(" ").append(group_axis_name(c.axis));
}

}  // namespace

GroupCalibrator::GroupCalibrator(Site site, CodecOptions base, int steps, double tolerance)
    : site_(site), base_(base), steps_(steps), tolerance_(tolerance) {
  TACO_CHECK(base.kind == CodecKind::fp8_block || base.kind == CodecKind::taco,
             "only grouped codecs are calibrated, not " + describe(base));
  for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
    for (int g : kGroupSizes) {
      Accumulator a;
      a.candidate.group = g;
      a.candidate.axis = axis;
      acc_.push_back(std::move(a));
    }
  }
}

void GroupCalibrator::observe(const float* x, MessageShape shape) {
  const MessageShape sample{std::min(shape.rows, kMaxRows), shape.cols};
  measure(std::vector<float>(x, x + sample.count()), sample, shape);
}

void GroupCalibrator::observe(const bf16* x, MessageShape shape) {
  const MessageShape sample{std::min(shape.rows, kMaxRows), shape.cols};
  std::vector<float> v(size_t(sample.count()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_float(x[i]);
  measure(v, sample, shape);
}

void GroupCalibrator::measure(const std::vector<float>& x, MessageShape shape, MessageShape full) {
  if (shape.count() == 0) return;
  ++tensors_;
  all_flat_ &= full.rows == 1;
  std::vector<uint8_t> buf;
  std::vector<float> xhat(x.size());
  for (Accumulator& a : acc_) {
    CalibrationCandidate& c = a.candidate;
    const int64_t along = c.axis == GroupAxis::hidden ? full.cols : full.rows;
    c.valid &= along % c.group == 0;
    if (!c.valid) continue;
    CodecOptions o = base_;
    o.group = c.group;
    o.axis = c.axis;
    const auto codec = make_codec(canonical(o));
    buf.resize(codec->max_encoded_size(shape, DType::f32));
    codec->encode(x.data(), shape, buf.data(), buf.size());
    codec->decode(buf.data(), buf.size(), shape, xhat.data(), WireContext{site_, -1, -1});
    c.bytes_per_element = double(buf.size()) / double(shape.count());

    a.errors.add(x.data(), xhat.data(), shape.rows, shape.cols);
    c.global_error = a.errors.global();
    c.mean_channel_error = a.errors.mean_channel();
  }
}

CalibrationChoice GroupCalibrator::choice() const {
  CalibrationChoice ch;
  ch.site = site_name(site_);
  ch.tensors = tensors_;
  ch.steps = steps_seen_;
  auto score = [&](const CalibrationCandidate& c) {
    return all_flat_ ? c.global_error : c.mean_channel_error;
  };
  const CalibrationCandidate* best = nullptr;
  for (const Accumulator& a : acc_) {
    ch.candidates.push_back(a.candidate);
    if (a.candidate.valid && (!best || score(a.candidate) < score(*best))) best = &a.candidate;
  }
  ch.options = base_;
  if (tensors_ == 0 || !best) {
    ch.chosen.group = kUncalibratedGroup;
    ch.chosen.axis = GroupAxis::hidden;
    ch.chosen.valid = false;
  } else {
    const double limit = score(*best) * (1 + tolerance_);
    const CalibrationCandidate* pick = best;
    for (const Accumulator& a : acc_) {
      const CalibrationCandidate& c = a.candidate;
      if (!c.valid || score(c) > limit) continue;
      if (c.bytes_per_element < pick->bytes_per_element ||
          (c.bytes_per_element == pick->bytes_per_element && score(c) < score(*pick))) {
        pick = &c;
      }
    }
    ch.chosen = *pick;
  }
  ch.options.group = ch.chosen.group;
  ch.options.axis = ch.chosen.axis;
  ch.options = canonical(ch.options);
  return ch;
}

std::string CalibrationChoice::line() const {
  std::string s = "calibration " + site + ": " + describe(options);
  if (tensors == 0 || !chosen.valid) {
    return s + (tensors == 0 ? " (nothing observed" : " (no group size divides the tensors") +
           std::string("; uncalibrated default)");
  }
  char bytes[32];
  std::snprintf(bytes, sizeof bytes, "%.3f", chosen.bytes_per_element);
  s += " (mean channel error " + sci(chosen.mean_channel_error) + ", global " +
       sci(chosen.global_error) + ", " + bytes + " B/elem) over " + std::to_string(tensors) +
       " tensors";
  const CalibrationCandidate* best = nullptr;
  for (const CalibrationCandidate& c : candidates) {
    if (c.valid && (!best || c.mean_channel_error < best->mean_channel_error)) best = &c;
  }
  if (best && (best->group != chosen.group || best->axis != chosen.axis)) {
    s += "; lowest error " + candidate_name(*best) + " " + sci(best->mean_channel_error);
  }
  return s;
}

std::string CalibrationChoice::table() const {
  std::string s = "  candidate    mean channel err  global err  B/elem\n";
  for (const CalibrationCandidate& c : candidates) {
    char line[128];
    if (c.valid) {
      std::snprintf(line, sizeof line, "  %-12s %-17s %-11s %.4f%s\n", candidate_name(c).c_str(),
                    sci(c.mean_channel_error).c_str(), sci(c.global_error).c_str(),
                    c.bytes_per_element,
                    c.group == chosen.group && c.axis == chosen.axis ? "  <- chosen" : "");
    } else {
      std::snprintf(line, sizeof line, "  %-12s (does not divide the tensors)\n",
                    candidate_name(c).c_str());
    }
    s += line;
  }
  return s;
}

std::string CalibrationChoice::to_json() const {
  std::string s = "{\"site\":\"" + site + "\",\"codec\":\"" + describe(options) +
                  "\",\"group\":" + std::to_string(options.group) + ",\"axis\":\"" +
                  group_axis_name(options.axis) + "\",\"tensors\":" + std::to_string(tensors) +
                  ",\"steps\":" + std::to_string(steps) + ",\"candidates\":[";
  for (size_t i = 0; i < candidates.size(); ++i) {
    const CalibrationCandidate& c = candidates[i];
    s += std::string(i ? "," : "") + "{\"group\":" + std::to_string(c.group) + ",\"axis\":\"" +
         group_axis_name(c.axis) + "\",\"valid\":" + (c.valid ? "true" : "false");
    if (c.valid) {
      s += ",\"mean_channel_error\":" + sci(c.mean_channel_error) +
           ",\"global_error\":" + sci(c.global_error) +
           ",\"bytes_per_element\":" + std::to_string(c.bytes_per_element);
    }
    s += "}";
  }
  return s + "]}";
}

}  // namespace taco
