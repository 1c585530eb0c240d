#include "parallel/codec_autotune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/runtime/arena.h"
#include "kernels/check.h"
#include "parallel/compressed_collectives.h"
#include "parallel/staging_engine.h"
#include "parallel/watchdog.h"

namespace taco {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Waits for the device work queued so far (nothing to wait for on the CPU).
void synchronize(DeviceKind memory) {
  if (memory == DeviceKind::cuda) wait_for_stream(nullptr);
}

// Device or host memory freed on scope exit.
class Scratch {
 public:
  Scratch(DeviceKind memory, size_t bytes)
      : memory_(memory), p_(device_alloc(memory, std::max<size_t>(bytes, 16))) {
    device_memset_zero(memory_, p_, std::max<size_t>(bytes, 16));
  }
  ~Scratch() { device_free(memory_, p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  DeviceKind memory_;
  void* p_;
};

// TACO_AUTO_LINK="LATENCY_US:GBPS", or nothing.
std::optional<LinkModel> injected_link() {
  const char* text = std::getenv("TACO_AUTO_LINK");
  if (!text || !*text) return std::nullopt;
  double latency_us = 0, gbps = 0;
  if (std::sscanf(text, "%lf:%lf", &latency_us, &gbps) != 2 || latency_us < 0 || !(gbps > 0))
    throw UserError(std::string("TACO_AUTO_LINK='") + text +
                    "' is not a link; expected LATENCY_US:GBPS such as 5:12.5 (a test hook)");
  return LinkModel{latency_us * 1e-6, gbps * 1e9};
}

// A message of `count` values like the activations and gradients the sites carry: normal, with
// a fixed seed (codec speed hardly depends on the values, but NaN garbage would skew it).
std::vector<float> sample_values(int64_t count) {
  std::vector<float> x(static_cast<size_t>(count));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (double(state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  for (auto& v : x)
    v = float(std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
  return x;
}

// The fastest of `repeats` runs of fn, in seconds.
template <class Fn>
double fastest(int repeats, Fn fn) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, since(t0));
  }
  return best;
}

// Messages that share one decision: the same site, layer, op, dtype, shape and codec path.
bool same_key(const AutoMessage& a, const AutoMessage& b) {
  return a.site == b.site && a.layer == b.layer && a.op == b.op && a.dtype == b.dtype &&
         a.shape == b.shape && a.device_codec == b.device_codec;
}

bool point_to_point(CommOp op) {
  return op == CommOp::send || op == CommOp::recv || op == CommOp::send_recv;
}

// The one key a point-to-point message's two ends share: op send_recv.
AutoMessage shared_key(AutoMessage m) {
  m.op = CommOp::send_recv;
  return m;
}

}  // namespace

bool auto_compresses(const CompressedSeconds& compressed, double native_s, double margin) {
  return compressed.total() < (1 - margin) * native_s;
}

AutoPrediction predict_auto_codec(CommOp op, int ranks, double native_bytes, double slot_bytes,
                                  double sum_slot_bytes, const CodecThroughput& codec,
                                  const LinkModel& link, double margin) {
  AutoPrediction p;
  p.compressed = compressed_collective_seconds(op, ranks, native_bytes, slot_bytes, sum_slot_bytes,
                                               codec, link);
  p.native_s = collective_seconds(op, ranks, native_bytes, link);
  p.compress = auto_compresses(p.compressed, p.native_s, margin);
  return p;
}

CodecAutotune::CodecAutotune(Communicator& comm, double margin)
    : comm_(comm), margin_(margin), injected_link_(injected_link()) {}

const CodecAutotune::Entry* CodecAutotune::find(const AutoMessage& m,
                                                const CodecOptions& candidate) const {
  for (const Entry& e : decided_) {
    if (same_key(e.message, m) && e.candidate == candidate) return &e;
  }
  return nullptr;
}

void CodecAutotune::record(const AutoDecision& made) {
  AutoDecision d = made;
  for (const Entry& e : before_recheck_) {
    if (same_key(e.message, d.message)) d.previous = e.compress;
  }
  decided_.push_back({d.message, d.candidate, d.prediction.compress, d.tuned});
  new_.push_back(d);
}

bool CodecAutotune::compress(const AutoMessage& m, const Codec& candidate) {
  const bool p2p = point_to_point(m.op);
  const AutoMessage key = p2p ? shared_key(m) : m;
  if (const Entry* e = find(key, candidate.options())) return e->compress;
  AutoDecision d;
  if (p2p) {
    // Never prepared: deciding here could not be agreed, so natively, and said once.
    d.message = key;
    d.candidate = candidate.options();
    d.native_bytes = double(m.shape.count()) * double(dtype_size(m.dtype));
    d.tuned = false;
  } else {
    d = decide(m, candidate);
  }
  record(d);
  return d.prediction.compress;
}

void CodecAutotune::prepare_point_to_point(const AutoMessage& m, const Codec& candidate) {
  const AutoMessage key = shared_key(m);
  if (find(key, candidate.options())) return;
  record(decide(key, candidate));
}

AutoDecision CodecAutotune::decide(const AutoMessage& m, const Codec& candidate) {
  AutoDecision d;
  d.message = m;
  d.candidate = candidate.options();
  d.native_bytes = double(m.shape.count()) * double(dtype_size(m.dtype));
  const int p = comm_.size();
  if (point_to_point(m.op)) {
    if (!p2p_link_)
      p2p_link_ = injected_link_ ? *injected_link_
                                 : probe_link(CommOp::send_recv, m.memory, d.native_bytes);
    // One message each way: the whole encoded message on the wire (CompressedCollectives::send).
    const double encoded = double(candidate.max_encoded_size(m.shape, m.dtype));
    d.prediction = predict_auto_codec(CommOp::send_recv, p, d.native_bytes, encoded, 0,
                                      bench(m, candidate), *p2p_link_, margin_);
  } else {
    if (!link_)
      link_ = injected_link_ ? *injected_link_
                             : probe_link(CommOp::all_reduce, m.memory, d.native_bytes);
    const auto chunks = CompressedCollectives::split(m.shape, p);
    const double slot = double(CompressedCollectives::slot_size(candidate, chunks, m.dtype));
    const double sum_slot = double(CompressedCollectives::slot_size(candidate, chunks, DType::f32));
    d.prediction = predict_auto_codec(m.op, p, d.native_bytes, slot, sum_slot, bench(m, candidate),
                                      *link_, margin_);
  }
  // The slowest rank's numbers on every rank: the same inputs give the same choice.
  double agreed[4] = {d.prediction.compressed.encode_s, d.prediction.compressed.wire_s,
                      d.prediction.compressed.decode_s, d.prediction.native_s};
  {
    WatchScope watch("all_reduce", Site::codec_auto, m.layer, comm_);
    comm_.all_reduce_values(agreed, 4, ReduceOp::max);
  }
  d.prediction.compressed = {agreed[0], agreed[1], agreed[2]};
  d.prediction.native_s = agreed[3];
  d.prediction.compress = auto_compresses(d.prediction.compressed, agreed[3], margin_);
  return d;
}

LinkModel CodecAutotune::probe_link(CommOp op, DeviceKind memory, double message_bytes) {
  const int p = comm_.size(), me = comm_.rank();
  const bool ring = op == CommOp::send_recv;  // else all_reduce
  // Three sizes up to the message's, in f32 values that split evenly over the group.
  const double top = std::clamp(message_bytes, 256.0 * 1024, 64.0 * 1024 * 1024);
  const size_t unit = size_t(4 * p);
  std::vector<size_t> counts;
  for (double bytes : {top / 64, top / 8, top})
    counts.push_back(std::max<size_t>(1, size_t(bytes) / unit) * unit / 4);
  Scratch buf(memory, counts.back() * 4), from(memory, ring ? counts.back() * 4 : 0);
  double times[3];
  WatchScope watch(comm_op_name(op), Site::codec_auto_probe, -1, comm_);
  for (size_t i = 0; i < counts.size(); ++i) {
    auto call = [&] {
      if (ring) {
        // Every rank sends to the next and receives from the one before, all at once.
        comm_.send_recv(buf.get(), counts[i], (me + 1) % p, from.get(), counts[i], (me + p - 1) % p,
                        DType::f32, kProbeTag, nullptr);
      } else {
        comm_.all_reduce(buf.get(), buf.get(), counts[i], DType::f32, ReduceOp::sum, nullptr);
      }
      synchronize(memory);
    };
    call();  // warm-up: connections, buffers
    times[i] = std::numeric_limits<double>::infinity();
    for (int r = 0; r < kProbeRepeats; ++r) {
      comm_.barrier(nullptr);
      synchronize(memory);
      times[i] = std::min(times[i], fastest(1, call));
    }
  }
  comm_.all_reduce_values(times, 3, ReduceOp::max);
  std::vector<TimedCall> calls;
  for (size_t i = 0; i < counts.size(); ++i) calls.push_back({double(counts[i]) * 4, times[i]});
  return fit_link(op, p, calls);
}

CodecThroughput CodecAutotune::bench(const AutoMessage& m, const Codec& codec) {
  for (const Bench& b : benches_) {
    if (b.options == codec.options() && b.dtype == m.dtype && b.shape == m.shape &&
        b.device == m.device_codec)
      return b.speed;
  }
  const int64_t n = m.shape.count();
  const size_t bytes = size_t(n) * dtype_size(m.dtype);
  const size_t encoded = codec.max_encoded_size(m.shape, m.dtype);
  const std::vector<float> values = sample_values(n);
  std::vector<bf16> values_bf16;
  if (m.dtype == DType::bf16) {
    values_bf16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) values_bf16[size_t(i)] = float_to_bf16(values[size_t(i)]);
  }
  const void* host_x = m.dtype == DType::bf16 ? static_cast<const void*>(values_bf16.data())
                                              : static_cast<const void*>(values.data());
  double encode_s = 0, decode_s = 0;
  const WireContext where{m.site, m.layer, -1};
  if (m.device_codec) {
    Scratch x(DeviceKind::cuda, bytes), wire(DeviceKind::cuda, encoded),
        out(DeviceKind::cuda, bytes), words(DeviceKind::cuda, 16);
    device_copy(x.get(), host_x, bytes, DeviceKind::cuda, DeviceKind::cpu);
    auto encode = [&] {
      codec.encode_async(x.get(), m.dtype, m.shape, wire.get<uint8_t>(), nullptr,
                         words.get<int64_t>());
      synchronize(DeviceKind::cuda);
    };
    auto decode = [&] {
      codec.decode_async(wire.get<uint8_t>(), encoded, m.shape, out.get(), m.dtype, false, nullptr,
                         words.get<uint32_t>() + 2);
      synchronize(DeviceKind::cuda);
    };
    encode();
    decode();
    encode_s = fastest(kBenchRepeats, encode);
    decode_s = fastest(kBenchRepeats, decode);
  } else {
    std::vector<uint8_t> wire(encoded);
    std::vector<float> out_f32(m.dtype == DType::f32 ? size_t(n) : 0);
    std::vector<bf16> out_bf16(m.dtype == DType::bf16 ? size_t(n) : 0);
    auto encode = [&] {
      if (m.dtype == DType::bf16)
        codec.encode(values_bf16.data(), m.shape, wire.data(), wire.size());
      else
        codec.encode(values.data(), m.shape, wire.data(), wire.size());
    };
    auto decode = [&] {
      if (m.dtype == DType::bf16)
        codec.decode(wire.data(), wire.size(), m.shape, out_bf16.data(), where);
      else
        codec.decode(wire.data(), wire.size(), m.shape, out_f32.data(), where);
    };
    encode();
    decode();
    encode_s = fastest(kBenchRepeats, encode);
    decode_s = fastest(kBenchRepeats, decode);
  }
  const CodecThroughput speed{encode_s > 0 ? double(bytes) / encode_s : 0,
                              decode_s > 0 ? double(bytes) / decode_s : 0};
  benches_.push_back({codec.options(), m.dtype, m.shape, m.device_codec, speed});
  return speed;
}

void CodecAutotune::recheck() {
  before_recheck_ = decided_;
  decided_.clear();
  benches_.clear();
  link_.reset();
  p2p_link_.reset();
  // A prepared point-to-point message cannot be decided at its next use: decide it again now.
  for (const Entry& e : before_recheck_) {
    if (point_to_point(e.message.op) && e.tuned)
      record(decide(e.message, *make_codec(e.candidate)));
  }
}

std::vector<AutoDecision> CodecAutotune::take_new_decisions() {
  std::vector<AutoDecision> out;
  out.swap(new_);
  return out;
}

namespace {

std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", seconds * 1e3);
  return text;
}

bool same_row(const AutoDecision& a, const AutoDecision& b) {
  const AutoMessage &x = a.message, &y = b.message;
  return x.site == y.site && x.op == y.op && x.shape == y.shape && x.dtype == y.dtype &&
         a.candidate == b.candidate && a.tuned == b.tuned &&
         a.prediction.compress == b.prediction.compress &&
         a.prediction.native_s == b.prediction.native_s &&
         a.prediction.compressed.total() == b.prediction.compressed.total() &&
         a.previous == b.previous;
}

}  // namespace

std::string auto_decision_table(const std::vector<AutoDecision>& made, const CodecAutotune& tune,
                                double margin) {
  // In site order, then by op and size, layers ascending: a site's layers with the same choice
  // become one row however the step interleaved them.
  std::vector<AutoDecision> decisions = made;
  std::stable_sort(decisions.begin(), decisions.end(),
                   [](const AutoDecision& a, const AutoDecision& b) {
                     const AutoMessage &x = a.message, &y = b.message;
                     if (x.site != y.site) return x.site < y.site;
                     if (x.op != y.op) return x.op < y.op;
                     if (x.shape.count() != y.shape.count())
                       return x.shape.count() < y.shape.count();
                     return x.layer < y.layer;
                   });
  char line[256];
  std::string link;
  auto add_link = [&](const char* name, const std::optional<LinkModel>& l) {
    if (!l) return;
    std::snprintf(line, sizeof line, "%s%s %.1f us + %.3g GB/s", link.empty() ? "" : ", ", name,
                  l->latency_s * 1e6, l->bandwidth_Bps / 1e9);
    link += line;
  };
  add_link("link", tune.link());
  add_link("send_recv link", tune.p2p_link());
  if (link.empty()) link = "no link measured (point-to-point messages never prepared)";
  std::snprintf(line, sizeof line, "codec: auto on group %s (%d ranks): %s; margin %g%%\n",
                tune.group().c_str(), tune.ranks(), link.c_str(), margin * 100);
  std::string out = line;
  std::snprintf(line, sizeof line, "  %-13s %-7s %-15s %10s %10s %10s %10s %10s  %s\n", "site",
                "layers", "op", "bytes", "encode ms", "wire ms", "decode ms", "native ms",
                "choice");
  out += line;
  for (size_t i = 0; i < decisions.size();) {
    size_t end = i;
    while (end + 1 < decisions.size() && same_row(decisions[i], decisions[end + 1]) &&
           decisions[end + 1].message.layer == decisions[end].message.layer + 1)
      ++end;
    const AutoDecision& d = decisions[i];
    const int first = d.message.layer, last = decisions[end].message.layer;
    const std::string layers = first < 0       ? "-"
                               : first == last ? std::to_string(first)
                                               : std::to_string(first) + "-" + std::to_string(last);
    std::string choice = !d.tuned                ? "none (point-to-point: not prepared)"
                         : d.prediction.compress ? describe(d.candidate)
                                                 : std::string("none");
    if (d.previous && *d.previous != d.prediction.compress)
      choice +=
          std::string("  (changed; was ") + (*d.previous ? describe(d.candidate) : "none") + ")";
    const CompressedSeconds& c = d.prediction.compressed;
    std::snprintf(line, sizeof line, "  %-13s %-7s %-15s %10.0f %10s %10s %10s %10s  %s\n",
                  site_name(d.message.site), layers.c_str(), comm_op_name(d.message.op),
                  d.native_bytes, d.tuned ? ms(c.encode_s).c_str() : "-",
                  d.tuned ? ms(c.wire_s).c_str() : "-", d.tuned ? ms(c.decode_s).c_str() : "-",
                  d.tuned ? ms(d.prediction.native_s).c_str() : "-", choice.c_str());
    out += line;
    i = end + 1;
  }
  return out;
}

}  // namespace taco
