// taco-bench codec (GPU): the device codecs (kernels/cuda/) on bf16 messages [n / 1024, 1024]
// of 1 MB .. 1 GB. For each size and codec: encode (bf16 in + wire out), decode to bf16 (wire in +
// bf16 out), decode-accumulate into fp32 (wire in + fp32 in + fp32 out) and decode-sum-encode of
// two messages (the two-shot all-reduce's middle step: 2 wires in + wire out) and a measured
// call's self-check (Codec::decode_error_sums_async: this rank's encoding decoded to fp32 as the
// collectives decode it, and its error against the input summed on the device: wire in + bf16 in),
// in GB/s of bytes moved, next to a device-to-device cudaMemcpy of the bf16 message (read + write)
// timed in the same run, and the relative L2 error of the decoded message against the input, with
// the CPU codec's on the same elements. CUDA events around calls queued back to back (>= 1 ms of
// work per timing, so that launch latency is not counted), best of --reps after one warm-up.
#include "tools/bench/bench_codec_gpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "compression/codec.h"
#include "kernels/check.h"

#if TACO_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/runtime/cuda_check.h"
#endif

namespace taco::bench {

#if TACO_HAVE_CUDA
namespace {

constexpr int64_t kCols = 1024;
constexpr int64_t kErrorSample = int64_t(1) << 22;  // elements checked for the error

struct GpuRow {
  size_t message_bytes;
  std::string codec;
  double wire_bytes, copy_gbps, encode_gbps, decode_gbps, accumulate_gbps, reduce_gbps, check_gbps,
      rel_l2, cpu_rel_l2;
};

// GPU work per timing: enough calls back to back that the host's launch latency hides behind
// the queued work (as in nccl-tests' iteration loop), the copy timed the same way.
constexpr double kTimedSpanMs = 1.0;
constexpr int kMaxCallsPerTiming = 200;

// Milliseconds per call of f: after one warm-up call and one call timed alone (which sets how
// many calls go back to back between two events), the best of `reps` timings.
template <class F>
double best_ms(int reps, cudaEvent_t start, cudaEvent_t stop, F&& f) {
  auto time_calls = [&](int calls) {
    TACO_CHECK_CUDA(cudaEventRecord(start));
    for (int c = 0; c < calls; ++c) f();
    TACO_CHECK_CUDA(cudaEventRecord(stop));
    TACO_CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.f;
    TACO_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return double(ms) / calls;
  };
  f();  // warm-up
  const double alone = time_calls(1);
  const int calls = int(
      std::clamp(std::ceil(kTimedSpanMs / std::max(alone, 1e-6)), 1.0, double(kMaxCallsPerTiming)));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, time_calls(calls));
  return best;
}

std::vector<CodecOptions> gpu_codecs() {
  const auto e4 = Fp8Format::e4m3;
  const auto hid = GroupAxis::hidden, tok = GroupAxis::token;
  return {canonical({CodecKind::fp8_tensor, e4, 0, Fp8Scales::single, hid}),
          canonical({CodecKind::fp8_block, e4, 128, Fp8Scales::single, hid}),
          canonical({CodecKind::taco, e4, 128, Fp8Scales::dual, hid}),
          canonical({CodecKind::taco, e4, 128, Fp8Scales::single, hid}),
          canonical({CodecKind::taco, e4, 128, Fp8Scales::e8m0, hid}),
          canonical({CodecKind::taco, e4, 128, Fp8Scales::dual, tok}),
          canonical({CodecKind::taco, e4, 32, Fp8Scales::dual, hid}),
          canonical({CodecKind::taco, e4, 512, Fp8Scales::dual, hid})};
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

int codec_gpu(const GpuCodecArgs& a) {
  // Messages are [n / kCols, kCols] bf16: sizes are rounded down to whole rows (at least one).
  const size_t row_bytes = size_t(kCols) * 2;
  const size_t min_bytes = std::max(row_bytes, size_t(a.min_bytes) / row_bytes * row_bytes);
  const size_t max_bytes = std::max(min_bytes, size_t(a.max_bytes) / row_bytes * row_bytes);
  const int64_t max_n = int64_t(max_bytes / 2);
  // Gaussian (std 1e-3) bf16, a 1M-element random block repeated (generating 512M normals on the
  // host would dominate the run).
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<float> normal(0.f, 1e-3f);
  std::vector<bf16> block(size_t(1) << 20);
  for (bf16& v : block) v = float_to_bf16(normal(rng));
  bf16* x = nullptr;
  bf16* y = nullptr;
  float* acc = nullptr;
  uint8_t* wire = nullptr;
  uint8_t* slots = nullptr;  // decode-sum-encode: two received messages
  int64_t* counter = nullptr;
  uint32_t* status = nullptr;
  double* sums = nullptr;  // the self-check's three sums
  TACO_CHECK_CUDA(cudaMalloc(&x, size_t(max_n) * 2));
  TACO_CHECK_CUDA(cudaMalloc(&y, size_t(max_n) * 2));
  TACO_CHECK_CUDA(cudaMalloc(&acc, size_t(max_n) * 4));
  const size_t wire_capacity = size_t(max_n) * 2 + 4096;
  TACO_CHECK_CUDA(cudaMalloc(&wire, wire_capacity));
  TACO_CHECK_CUDA(cudaMalloc(&slots, 2 * wire_capacity));
  TACO_CHECK_CUDA(cudaMalloc(&counter, 8));
  TACO_CHECK_CUDA(cudaMalloc(&status, 4));
  TACO_CHECK_CUDA(cudaMalloc(&sums, 3 * sizeof(double)));
  for (int64_t i = 0; i < max_n; i += int64_t(block.size())) {
    const size_t count = std::min(block.size(), size_t(max_n - i));
    TACO_CHECK_CUDA(cudaMemcpy(x + i, block.data(), count * 2, cudaMemcpyHostToDevice));
  }
  TACO_CHECK_CUDA(cudaMemset(acc, 0, size_t(max_n) * 4));
  TACO_CHECK_CUDA(cudaMemset(counter, 0, 8));
  TACO_CHECK_CUDA(cudaMemset(status, 0, 4));
  cudaEvent_t start, stop;
  TACO_CHECK_CUDA(cudaEventCreate(&start));
  TACO_CHECK_CUDA(cudaEventCreate(&stop));

  std::printf(
      "taco-bench codec (GPU): bf16 messages [n / %lld, %lld], Gaussian std 1e-3, best of %d\n"
      "timings of calls queued back to back (>= %.0f ms of work each), copy and codecs alike\n"
      "GB/s = bytes moved / time: encode bf16 in + wire out; decode wire in + bf16 out;\n"
      "dec+acc wire in + fp32 in + fp32 out; reduce (decode 2, sum, re-encode: the all-reduce's\n"
      "middle step) 2 wires in + wire out; check (a measured call's self-check: decode to fp32\n"
      "and error sums, nothing written) wire in + bf16 in; copy = device-to-device memcpy,\n"
      "read + write ('-': the codec decodes and sums apart).\n"
      "rel L2: the GPU round trip's error on the first %lld elements; cpu L2: the CPU codec's on\n"
      "the same elements\n\n",
      (long long)kCols, (long long)kCols, a.reps, kTimedSpanMs, (long long)kErrorSample);
  std::printf("%9s %-29s %8s %9s %9s %9s %9s %9s %9s %9s %9s\n", "size", "codec", "B/elem", "copy",
              "encode", "decode", "dec+acc", "reduce", "check", "rel L2", "cpu L2");
  std::vector<GpuRow> rows;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = int64_t(bytes / 2);
    const MessageShape shape{n / kCols, kCols};
    const double copy_ms = best_ms(a.reps, start, stop, [&] {
      TACO_CHECK_CUDA(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice));
    });
    const double copy_gbps = 2.0 * double(bytes) / copy_ms / 1e6;
    for (const CodecOptions& o : gpu_codecs()) {
      if (!selected(a.kinds, o.kind)) continue;
      const auto codec = make_codec(o);
      const size_t wire_bytes = codec->max_encoded_size(shape, DType::bf16);
      GpuRow r{bytes, codec->name(), double(wire_bytes) / double(n), copy_gbps, 0, 0, 0, 0, NAN, 0,
               0};
      const double te = best_ms(a.reps, start, stop, [&] {
        codec->encode_async(x, DType::bf16, shape, wire, nullptr, counter);
      });
      const double td = best_ms(a.reps, start, stop, [&] {
        codec->decode_async(wire, wire_bytes, shape, y, DType::bf16, false, nullptr, status);
      });
      const double ta = best_ms(a.reps, start, stop, [&] {
        codec->decode_async(wire, wire_bytes, shape, acc, DType::f32, true, nullptr, status);
      });
      const size_t slot = (wire_bytes + 15) / 16 * 16;
      const size_t sum_bytes = codec->max_encoded_size(shape, DType::f32);
      TACO_CHECK_CUDA(cudaMemcpy(slots, wire, wire_bytes, cudaMemcpyDeviceToDevice));
      TACO_CHECK_CUDA(cudaMemcpy(slots + slot, wire, wire_bytes, cudaMemcpyDeviceToDevice));
      const double tr = best_ms(a.reps, start, stop, [&] {
        codec->decode_sum_encode_async(slots, slot, 2, wire_bytes, shape,
                                       reinterpret_cast<uint8_t*>(y), acc, nullptr, status);
      });
      r.reduce_gbps = double(2 * wire_bytes + sum_bytes) / tr / 1e6;
      auto check = [&] {
        return codec->decode_error_sums_async(wire, wire_bytes, shape, x, DType::bf16, DType::f32,
                                              sums, nullptr, status);
      };
      if (check()) {
        const double tc = best_ms(a.reps, start, stop, check);
        r.check_gbps = double(wire_bytes + bytes) / tc / 1e6;
      }
      // y held the re-encoded sum: decode into it again for the error below.
      codec->decode_async(wire, wire_bytes, shape, y, DType::bf16, false, nullptr, status);
      r.encode_gbps = double(bytes + wire_bytes) / te / 1e6;
      r.decode_gbps = double(wire_bytes + bytes) / td / 1e6;
      r.accumulate_gbps = double(wire_bytes + 4 * bytes) / ta / 1e6;
      uint32_t st = 0;
      TACO_CHECK_CUDA(cudaMemcpy(&st, status, 4, cudaMemcpyDeviceToHost));
      TACO_CHECK(st == 0,
                 "device decoder rejected its own message (status " + std::to_string(st) + ")");
      // Error of the bf16 decode on a prefix of the message.
      const size_t m = size_t(std::min(n, kErrorSample));
      std::vector<bf16> in(m), out(m);
      TACO_CHECK_CUDA(cudaMemcpy(in.data(), x, m * 2, cudaMemcpyDeviceToHost));
      TACO_CHECK_CUDA(cudaMemcpy(out.data(), y, m * 2, cudaMemcpyDeviceToHost));
      double err = 0, ref = 0;
      for (size_t i = 0; i < m; ++i) {
        const double u = bf16_to_float(in[i]), v = bf16_to_float(out[i]);
        err += (v - u) * (v - u);
        ref += u * u;
      }
      r.rel_l2 = std::sqrt(err / ref);
      {
        // The CPU codec on the same elements (whole rows; 2^22 elements is a multiple of every
        // token-axis group of rows).
        const MessageShape part{int64_t(m) / kCols, kCols};
        std::vector<uint8_t> cpu_wire(codec->max_encoded_size(part, DType::bf16));
        std::vector<bf16> back(m);
        codec->encode(in.data(), part, cpu_wire.data(), cpu_wire.size());
        codec->decode(cpu_wire.data(), cpu_wire.size(), part, back.data(),
                      WireContext{std::nullopt, -1, 0});
        double cpu_err = 0;
        for (size_t i = 0; i < m; ++i) {
          const double d = double(bf16_to_float(back[i])) - double(bf16_to_float(in[i]));
          cpu_err += d * d;
        }
        r.cpu_rel_l2 = std::sqrt(cpu_err / ref);
      }
      char check_text[16] = "-";
      if (std::isfinite(r.check_gbps))
        std::snprintf(check_text, sizeof check_text, "%.1f", r.check_gbps);
      std::printf("%6zu MB %-29s %8.4f %9.1f %9.1f %9.1f %9.1f %9.1f %9s %9.3e %9.3e\n",
                  bytes >> 20, r.codec.c_str(), r.wire_bytes, r.copy_gbps, r.encode_gbps,
                  r.decode_gbps, r.accumulate_gbps, r.reduce_gbps, check_text, r.rel_l2,
                  r.cpu_rel_l2);
      std::fflush(stdout);
      rows.push_back(r);
    }
    std::printf("\n");
  }
  TACO_CHECK_CUDA(cudaEventDestroy(start));
  TACO_CHECK_CUDA(cudaEventDestroy(stop));
  for (void* p : {(void*)x, (void*)y, (void*)acc, (void*)wire, (void*)slots, (void*)counter,
                  (void*)status, (void*)sums}) {
    TACO_CHECK_CUDA(cudaFree(p));
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    if (!f) throw UserError("--json " + a.json + ": cannot open for writing");
    f << "{\"bench\":\"codec\",\"backend\":\"gpu\",\"cols\":" << kCols << ",\"seed\":" << a.seed
      << ",\"reps\":" << a.reps << ",\"timed_span_ms\":" << kTimedSpanMs << ",\"results\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const GpuRow& r = rows[i];
      f << (i ? "," : "") << "\n{\"message_bytes\":" << r.message_bytes << ",\"codec\":\""
        << r.codec << "\",\"bytes_per_element\":" << json_number(r.wire_bytes)
        << ",\"copy_gbps\":" << json_number(r.copy_gbps)
        << ",\"encode_gbps\":" << json_number(r.encode_gbps)
        << ",\"decode_gbps\":" << json_number(r.decode_gbps)
        << ",\"decode_accumulate_gbps\":" << json_number(r.accumulate_gbps)
        << ",\"decode_sum_encode_gbps\":" << json_number(r.reduce_gbps)
        << ",\"self_check_gbps\":" << json_number(r.check_gbps)
        << ",\"rel_l2\":" << json_number(r.rel_l2)
        << ",\"cpu_rel_l2\":" << json_number(r.cpu_rel_l2) << "}";
    }
    f << "\n]}\n";
    if (!f) throw UserError("--json " + a.json + ": write failed");
    std::printf("wrote %s\n", a.json.c_str());
  }
  return 0;
}

#else

int codec_gpu(const GpuCodecArgs&) { throw UserError("taco-bench codec: built without CUDA"); }

#endif

}  // namespace taco::bench
