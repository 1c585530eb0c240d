#include "parallel/collective_model.h"

#include <string>

#include "kernels/check.h"

namespace taco {

namespace {

// A collective as `steps` messages of `slot` bytes one after the other: t = steps (alpha +
// slot / B). Every op of the model has this form.
struct Shape {
  double steps = 0;
  double slot_fraction = 0;  // slot / n
};

Shape shape_of(CommOp op, int ranks) {
  const double p = ranks;
  switch (op) {
    case CommOp::all_reduce:
      return {2 * (p - 1), 1 / p};
    case CommOp::reduce_scatter:
    case CommOp::all_gather:
    case CommOp::all_to_all:
      return {p - 1, 1 / p};
    case CommOp::send:
    case CommOp::recv:
    case CommOp::send_recv:
    case CommOp::broadcast:
      return {1, 1};
    case CommOp::barrier:
      return {};
  }
  return {};
}

}  // namespace

double collective_seconds(CommOp op, int ranks, double bytes, const LinkModel& link) {
  if (ranks <= 1) return 0;
  const Shape s = shape_of(op, ranks);
  const double transfer = link.bandwidth_Bps > 0 ? bytes * s.slot_fraction / link.bandwidth_Bps : 0;
  return s.steps * (link.latency_s + transfer);
}

CompressedSeconds compressed_collective_seconds(CommOp op, int ranks, double native_bytes,
                                                double slot_bytes, double sum_slot_bytes,
                                                const CodecThroughput& codec,
                                                const LinkModel& link) {
  CompressedSeconds out;
  if (ranks <= 1) return out;
  const double p = ranks, n = native_bytes;
  double encoded = 0, decoded = 0;  // native bytes through each side of the codec
  switch (op) {
    case CommOp::all_reduce:
      out.wire_s = collective_seconds(CommOp::all_to_all, ranks, p * slot_bytes, link) +
                   collective_seconds(CommOp::all_gather, ranks, p * sum_slot_bytes, link);
      encoded = n + n / p;
      decoded = 2 * n;
      break;
    case CommOp::reduce_scatter:
      out.wire_s = collective_seconds(CommOp::all_to_all, ranks, p * slot_bytes, link);
      encoded = decoded = n;
      break;
    case CommOp::all_gather:
      out.wire_s = collective_seconds(CommOp::all_gather, ranks, p * slot_bytes, link);
      encoded = n / p;
      decoded = n;
      break;
    case CommOp::send:
    case CommOp::recv:
    case CommOp::send_recv:
      out.wire_s = collective_seconds(CommOp::send, ranks, slot_bytes, link);
      encoded = decoded = n;
      break;
    default:
      TACO_CHECK(false, std::string("no compressed ") + comm_op_name(op));
  }
  out.encode_s = codec.encode_Bps > 0 ? encoded / codec.encode_Bps : 0;
  out.decode_s = codec.decode_Bps > 0 ? decoded / codec.decode_Bps : 0;
  return out;
}

LinkModel fit_link(CommOp op, int ranks, const std::vector<TimedCall>& calls) {
  TACO_CHECK(ranks >= 2 && calls.size() >= 2,
             "fit_link needs a group of two or more ranks and two or more calls, got " +
                 std::to_string(ranks) + " ranks and " + std::to_string(calls.size()) + " calls");
  // seconds = a + b * bytes, weighted least squares (w = 1 / seconds^2).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const TimedCall& c : calls) {
    const double w = c.seconds > 0 ? 1 / (c.seconds * c.seconds) : 0;
    sw += w;
    sx += w * c.bytes;
    sy += w * c.seconds;
    sxx += w * c.bytes * c.bytes;
    sxy += w * c.bytes * c.seconds;
  }
  const double det = sw * sxx - sx * sx;
  double a = 0, b = 0;
  if (det > 0) {
    b = (sw * sxy - sx * sy) / det;
    a = (sy - b * sx) / sw;
  }
  if (b <= 0) {  // no growth with size: latency only
    b = 0;
    a = sw > 0 ? sy / sw : 0;
  }
  if (a < 0) a = 0;
  // a = steps * alpha; b = steps * slot_fraction / B.
  const Shape s = shape_of(op, ranks);
  TACO_CHECK(s.steps > 0, std::string("fit_link: ") + comm_op_name(op) + " moves no data");
  LinkModel link;
  link.latency_s = a / s.steps;
  link.bandwidth_Bps = b > 0 ? s.steps * s.slot_fraction / b : 0;
  return link;
}

}  // namespace taco
