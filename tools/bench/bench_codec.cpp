// taco-bench codec: the device codecs (default where a GPU exists; bench_codec_gpu.cpp) or, with
// --cpu, every CPU codec on the synthetic activations of DESIGN.md §4.
//
// Per codec and distribution: wire bytes per element (header and scales included), the ratio
// against bf16, the relative L2 error, the mean per-channel relative error (channel = column of
// the [rows, cols] = tokens x hidden message), the pooled error of the small channels where a
// distribution has outlier channels, and the throughput in GB/s of bytes read + written of
// encode and decode of bf16 messages, encode and decode of fp32 messages and the fp32
// decode-accumulate (which reads its output too), and of the two-shot all-reduce's middle step
// (Codec::decode_sum_encode of two bf16 messages into an fp32 message: wire in, wire out), each
// also as a percentage of a bf16 memcpy of the same message timed in the same run.
#include <omp.h>  // omp_get_max_threads, omp_set_num_threads

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/stats.h"
#include "engine/runtime/device.h"
#include "kernels/check.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_codec_gpu.h"

namespace taco::bench {
namespace {

struct Args {
  bool cpu = false;
  bool gpu = false;
  int64_t rows = 1536;  // a multiple of 512, so every group size divides along tokens
  int64_t cols = 768;
  int reps = 3;
  uint64_t seed = 1234;
  int threads = 0;                       // 0: OpenMP's default
  int64_t min_bytes = int64_t(1) << 20;  // GPU: the message sizes
  int64_t max_bytes = int64_t(1) << 30;
  std::string json;
  std::vector<CodecKind> kinds;   // --codecs; empty: all
  std::vector<std::string> data;  // --data; empty: all distributions
};

Args parse_args(const std::vector<std::string>& a) {
  Args r;
  auto value = [&](size_t& i) -> const std::string& {
    if (i + 1 >= a.size()) throw UserError(a[i] + ": missing value");
    return a[++i];
  };
  auto positive = [&](const std::string& key, const std::string& v) {
    try {
      const long long n = std::stoll(v);
      if (n > 0) return int64_t(n);
    } catch (...) {
    }
    throw UserError(key + ": '" + v + "' is not a positive integer");
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == "--cpu") {
      r.cpu = true;
    } else if (a[i] == "--gpu") {
      r.gpu = true;
    } else if (a[i] == "--rows") {
      r.rows = positive("--rows", value(i));
    } else if (a[i] == "--cols") {
      r.cols = positive("--cols", value(i));
    } else if (a[i] == "--reps") {
      r.reps = int(positive("--reps", value(i)));
    } else if (a[i] == "--seed") {
      r.seed = uint64_t(positive("--seed", value(i)));
    } else if (a[i] == "--threads") {
      r.threads = int(positive("--threads", value(i)));
    } else if (a[i] == "--min-bytes") {
      r.min_bytes = parse_size("--min-bytes", value(i));
    } else if (a[i] == "--max-bytes") {
      r.max_bytes = parse_size("--max-bytes", value(i));
    } else if (a[i] == "--json") {
      r.json = value(i);
    } else if (a[i] == "--data") {
      r.data = split_list(value(i));
      for (const std::string& name : r.data) {
        if (name != "gaussian" && name != "outliers" && name != "channels" && name != "zeros" &&
            name != "constant") {
          throw UserError(
              "--data: '" + name +
              "' is not a distribution (gaussian, outliers, channels, zeros, constant)");
        }
      }
    } else if (a[i] == "--codecs") {
      for (const std::string& name : split_list(value(i))) {
        CodecKind kind;
        if (!parse_codec_kind(name, &kind)) {
          throw UserError("--codecs: '" + name +
                          "' is not a codec (none, fp8_tensor, fp8_block, taco)");
        }
        r.kinds.push_back(kind);
      }
    } else {
      throw UserError("unknown option '" + a[i] + "'; see taco-bench --help");
    }
  }
  if (r.cpu && r.gpu) throw UserError("--cpu and --gpu: pick one");
  if (r.max_bytes < r.min_bytes) throw UserError("--max-bytes is below --min-bytes");
  if (r.max_bytes > (int64_t(1) << 32)) throw UserError("--max-bytes: at most 4G");
  if (r.rows * r.cols > (int64_t(1) << 28)) {
    throw UserError("--rows x --cols: at most 2^28 elements");
  }
  return r;
}

struct Distribution {
  std::string name;
  std::vector<float> x;
  std::vector<bool> small_channels;  // empty: no outlier channels
};

std::vector<Distribution> distributions(const Args& a) {
  const size_t n = size_t(a.rows * a.cols);
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<float> normal(0.f, 1e-3f);
  std::vector<float> gaussian(n);
  for (float& v : gaussian) v = normal(rng);

  std::vector<Distribution> d;
  d.push_back({"gaussian", gaussian, {}});

  // 0.1% of the elements, each picked once, 100x larger.
  std::vector<float> outliers = gaussian;
  std::vector<bool> picked(n, false);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  for (size_t k = 0; k < n / 1000;) {
    const size_t i = pick(rng);
    if (picked[i]) continue;
    picked[i] = true;
    outliers[i] *= 100.f;
    ++k;
  }
  d.push_back({"outliers", outliers, {}});

  // 6 of every 768 channels 50x larger, spread evenly over the hidden dimension.
  const int64_t boosted = std::max<int64_t>(1, a.cols * 6 / 768);
  std::vector<bool> small(size_t(a.cols), true);
  for (int64_t k = 0; k < boosted; ++k) small[size_t((2 * k + 1) * a.cols / (2 * boosted))] = false;
  std::vector<float> channels = gaussian;
  for (size_t i = 0; i < n; ++i) {
    if (!small[i % size_t(a.cols)]) channels[i] *= 50.f;
  }
  d.push_back({"channels", channels, small});
  d.push_back({"zeros", std::vector<float>(n, 0.f), {}});
  d.push_back({"constant", std::vector<float>(n, 1e-3f), {}});
  return d;
}

CodecOptions opts(CodecKind kind, Fp8Format f = Fp8Format::e4m3, int group = 0,
                  Fp8Scales scales = Fp8Scales::single, GroupAxis axis = GroupAxis::hidden) {
  return canonical(CodecOptions{kind, f, group, scales, axis});
}

std::vector<CodecOptions> codecs() {
  const auto e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  const auto hid = GroupAxis::hidden, tok = GroupAxis::token;
  const auto dual = Fp8Scales::dual, single = Fp8Scales::single, e8m0 = Fp8Scales::e8m0;
  return {opts(CodecKind::none),
          opts(CodecKind::fp8_tensor, e4),
          opts(CodecKind::fp8_tensor, e5),
          opts(CodecKind::fp8_block, e4, 128, single, hid),
          opts(CodecKind::fp8_block, e4, 128, single, tok),
          opts(CodecKind::fp8_block, e4, 32, e8m0, hid),
          opts(CodecKind::taco, e4, 128, dual, hid),
          opts(CodecKind::taco, e4, 128, single, hid),
          opts(CodecKind::taco, e4, 128, e8m0, hid),
          opts(CodecKind::taco, e4, 128, dual, tok),
          opts(CodecKind::taco, e4, 32, dual, hid),
          opts(CodecKind::taco, e4, 64, dual, hid),
          opts(CodecKind::taco, e4, 256, dual, hid),
          opts(CodecKind::taco, e4, 512, dual, hid),
          opts(CodecKind::taco, e5, 128, dual, hid)};
}

struct Row {
  std::string distribution, codec;
  double bytes_per_element, ratio_vs_bf16;
  double rel_l2, mean_channel, small_channels;  // NaN: undefined (no signal / no channels)
  double encode_gbps, decode_gbps;              // bf16 in / bf16 out
  double encode_f32_gbps, decode_f32_gbps, accumulate_gbps;  // fp32
  double sum_gbps;  // decode_sum_encode of two bf16 messages
};

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Row measure(const Codec& codec, const Distribution& d, const Args& a) {
  const MessageShape shape{a.rows, a.cols};
  const size_t n = d.x.size();
  Row row{};
  row.distribution = d.name;
  row.codec = codec.name();

  // Error: the fp32 reference path.
  std::vector<uint8_t> buf(codec.max_encoded_size(shape, DType::f32));
  std::vector<float> xhat(n);
  const WireContext ctx{std::nullopt, -1, 0};
  codec.encode(d.x.data(), shape, buf.data(), buf.size());
  codec.decode(buf.data(), buf.size(), shape, xhat.data(), ctx);
  ChannelErrors e;
  e.add(d.x.data(), xhat.data(), a.rows, a.cols);
  const double nan = std::nan("");
  row.rel_l2 = e.has_signal() ? e.global() : (e.error_sq() == 0 ? 0.0 : nan);
  row.mean_channel = e.has_signal() ? e.mean_channel() : nan;
  row.small_channels = d.small_channels.empty() ? nan : e.pooled(d.small_channels);

  // Size and speed: bf16 in, bf16 out, as on the GPU.
  std::vector<bf16> xb(n), out(n);
  for (size_t i = 0; i < n; ++i) xb[i] = float_to_bf16(d.x[i]);
  std::vector<uint8_t> wire(codec.max_encoded_size(shape, DType::bf16));
  row.bytes_per_element = double(wire.size()) / double(n);
  row.ratio_vs_bf16 = 2.0 / row.bytes_per_element;
  const double moved = double(n * 2 + wire.size());
  const double te =
      best_seconds(a.reps, [&] { codec.encode(xb.data(), shape, wire.data(), wire.size()); });
  const double td =
      best_seconds(a.reps, [&] { codec.decode(wire.data(), wire.size(), shape, out.data(), ctx); });
  row.encode_gbps = moved / te / 1e9;
  row.decode_gbps = moved / td / 1e9;

  // fp32 in, fp32 out, and the decode-accumulate (reads and writes its fp32 output).
  const double moved_f32 = double(n * 4 + buf.size());
  const double te32 =
      best_seconds(a.reps, [&] { codec.encode(d.x.data(), shape, buf.data(), buf.size()); });
  const double td32 =
      best_seconds(a.reps, [&] { codec.decode(buf.data(), buf.size(), shape, xhat.data(), ctx); });
  const double ta32 = best_seconds(
      a.reps, [&] { codec.decode_accumulate(buf.data(), buf.size(), shape, xhat.data(), ctx); });
  row.encode_f32_gbps = moved_f32 / te32 / 1e9;
  row.decode_f32_gbps = moved_f32 / td32 / 1e9;
  row.accumulate_gbps = (moved_f32 + double(n * 4)) / ta32 / 1e9;

  // The all-reduce's middle step at p = 2: two bf16 messages in, their sum out (fp32 message).
  std::vector<uint8_t> two(2 * wire.size());
  codec.encode(xb.data(), shape, two.data(), wire.size());
  std::memcpy(two.data() + wire.size(), two.data(), wire.size());
  const double ts = best_seconds(a.reps, [&] {
    codec.decode_sum_encode(two.data(), wire.size(), 2, wire.size(), shape, xhat.data(), buf.data(),
                            buf.size(), ctx);
  });
  row.sum_gbps = double(two.size() + buf.size()) / ts / 1e9;
  return row;
}

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void write_json(const std::string& path, const Args& a, double copy_gbps,
                const std::vector<Row>& rows) {
  std::ofstream f(path);
  if (!f) throw UserError("--json " + path + ": cannot open for writing");
  f << "{\"bench\":\"codec\",\"backend\":\"cpu\",\"rows\":" << a.rows << ",\"cols\":" << a.cols
    << ",\"seed\":" << a.seed << ",\"threads\":" << omp_get_max_threads()
    << ",\"copy_gbps\":" << json_number(copy_gbps) << ",\"results\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << (i ? "," : "") << "\n{\"distribution\":\"" << r.distribution << "\",\"codec\":\""
      << r.codec << "\",\"bytes_per_element\":" << json_number(r.bytes_per_element)
      << ",\"ratio_vs_bf16\":" << json_number(r.ratio_vs_bf16)
      << ",\"rel_l2\":" << json_number(r.rel_l2)
      << ",\"mean_channel_error\":" << json_number(r.mean_channel)
      << ",\"small_channel_error\":" << json_number(r.small_channels)
      << ",\"encode_gbps\":" << json_number(r.encode_gbps)
      << ",\"decode_gbps\":" << json_number(r.decode_gbps)
      << ",\"encode_f32_gbps\":" << json_number(r.encode_f32_gbps)
      << ",\"decode_f32_gbps\":" << json_number(r.decode_f32_gbps)
      << ",\"decode_accumulate_gbps\":" << json_number(r.accumulate_gbps)
      << ",\"decode_sum_encode_gbps\":" << json_number(r.sum_gbps) << "}";
  }
  f << "\n]}\n";
  if (!f) throw UserError("--json " + path + ": write failed");
}

}  // namespace

int codec(const std::vector<std::string>& args) {
  const Args a = parse_args(args);
  if (!a.cpu) {
    if (built_with_cuda() && cuda_device_count() > 0) {
      GpuCodecArgs g;
      g.reps = a.reps;
      g.seed = a.seed;
      g.json = a.json;
      g.min_bytes = a.min_bytes;
      g.max_bytes = a.max_bytes;
      g.kinds = a.kinds;
      return codec_gpu(g);
    }
    if (a.gpu) throw UserError("--gpu: no CUDA device (or a build without CUDA)");
    std::printf("no CUDA device: benchmarking the CPU codecs (taco-bench codec --cpu)\n");
  }
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const std::vector<Distribution> dists = distributions(a);
  const size_t n = size_t(a.rows * a.cols);

  std::vector<uint16_t> src(n, 0x3c00), dst(n);
  const double tc = best_seconds(a.reps, [&] { std::memcpy(dst.data(), src.data(), n * 2); });
  const double copy_gbps = double(2 * n * 2) / tc / 1e9;

  std::printf(
      "taco-bench codec --cpu: message [%lld, %lld] = %zu elements, seed %llu, best of %d, "
      "%d threads\n",
      (long long)a.rows, (long long)a.cols, n, (unsigned long long)a.seed, a.reps,
      omp_get_max_threads());
  std::printf(
      "bf16 memcpy: %.1f GB/s (read + write); GB/s below count values in + wire out (encode), "
      "wire in + values out (decode), and for the fp32 decode-accumulate its output read too; "
      "sum: decode-sum-encode of two bf16 messages, wire in + wire out; (%%) of the memcpy\n",
      copy_gbps);
  std::printf(
      "B/elem: wire bytes per element of a bf16 message, header and scales included; vs bf16: "
      "2 / B/elem\n"
      "errors, of the fp32 message decoded: rel L2 = ||x^ - x|| / ||x|| over all elements; "
      "mean ch = mean over the channels\n"
      "  (columns: hidden units) of each channel's own relative L2 error, which a few large "
      "channels cannot hide;\n"
      "  small ch = relative L2 pooled over the channels that are not boosted (data 'channels' "
      "only: 6 of every 768\n"
      "  channels are 50x larger; nan for the other data)\n\n");
  std::printf("%-10s %-31s %7s %7s %9s %9s %9s  %-12s %-12s %-12s %-12s %-12s %-12s\n", "data",
              "codec", "B/elem", "vs bf16", "rel L2", "mean ch", "small ch", "enc bf16", "dec bf16",
              "enc f32", "dec f32", "acc f32", "sum");
  auto speed = [&](double gbps) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%6.2f (%3.0f%%)", gbps, 100.0 * gbps / copy_gbps);
    return std::string(buf);
  };

  std::vector<Row> rows;
  for (const Distribution& d : dists) {
    if (!a.data.empty() && std::find(a.data.begin(), a.data.end(), d.name) == a.data.end()) {
      continue;
    }
    for (const CodecOptions& o : codecs()) {
      if (!selected(a.kinds, o.kind)) continue;
      const Row r = measure(*make_codec(o), d, a);
      std::printf("%-10s %-31s %7.4f %6.2fx %9s %9s %9s  %s %s %s %s %s %s\n",
                  r.distribution.c_str(), r.codec.c_str(), r.bytes_per_element, r.ratio_vs_bf16,
                  fmt("%.3e", r.rel_l2).c_str(), fmt("%.3e", r.mean_channel).c_str(),
                  fmt("%.3e", r.small_channels).c_str(), speed(r.encode_gbps).c_str(),
                  speed(r.decode_gbps).c_str(), speed(r.encode_f32_gbps).c_str(),
                  speed(r.decode_f32_gbps).c_str(), speed(r.accumulate_gbps).c_str(),
                  speed(r.sum_gbps).c_str());
      std::fflush(stdout);
      rows.push_back(r);
    }
    std::printf("\n");
  }
  if (!a.json.empty()) {
    write_json(a.json, a, copy_gbps, rows);
    std::printf("wrote %s\n", a.json.c_str());
  }
  return 0;
}

}  // namespace taco::bench
