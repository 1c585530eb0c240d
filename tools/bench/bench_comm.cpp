// taco-bench comm: compressed and native collectives across all ranks of the job, in the
// columns of nccl-tests (size, count, type, time, algbw, busbw, #wrong) plus wire bytes and
// error. Run it under mpirun with any number of ranks:
//
//   mpirun -np 8 build/taco-bench comm [--ops all_reduce,reduce_scatter,all_gather]
//       [--codecs none,taco,fp8_block] [--min-bytes 1M] [--max-bytes 1G] [--factor 4]
//       [--iters 20] [--warmup 5] [--cols 1024] [--device auto|cpu|cuda]
//       [--backend auto|nccl|mpi] [--chunks auto|N] [--stage-piece 4M] [--json FILE]
//
// Messages are [rows, cols] with cols = hidden size; size counts 2 bytes per element (bf16, as a
// GPU run's tensor-parallel traffic is), also on the CPU, where the buffers hold fp32: the header
// says so, and CPU rows then compare with GPU rows.
// The calls go through CompressedSiteComm, the trainer's door, at the site attn.out.fwd with the
// codec as default; `none` is the backend's native collective (NCCL's where it runs). On a GPU
// the buffers live on the device and the codec rows run DeviceCompressedCollectives (device
// codecs, pipelined in --chunks pieces: compression.chunks); on the CPU the host codecs.
// time: mean per call, the slowest rank's; algbw = size / time; busbw = algbw * 2(p-1)/p for
// all_reduce, (p-1)/p for the others (nccl-tests' factors). #wrong: elements that differ from
// the native collective's result (none: bit for bit; codecs: non-finite ones); error: relative
// L2 against that result. wire: the encoded bytes one rank sent per call. vs best: the fastest
// `none` row's time (same op and size; the none rows run first, each against those before it)
// over this row's: the speedup against the best baseline.
//
// Host-staged MPI on device buffers (--backend mpi on a GPU; parallel/staged_communicator.h):
// `none` runs three rows side by side, none:native (MPI's collective on the staged copies,
// summed on the host), none:two_shot (all-to-all, sum on the GPU, all-gather) and none:auto
// (what parallel.staged_reduce: auto picks, measured at its first call; the label names the
// pick), so codecs are quoted against the best baseline. The reference is none:native's result;
// two_shot rows match it bit for bit at p = 2 (one rounding of the same fp32 sum) and count only
// non-finite elements as wrong at p > 2, where the rounding order differs (their error column
// shows by how much). --stage-piece sets the staging pipeline's piece size for every row.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compression/policy.h"
#include "engine/config/config.h"
#include "engine/config/default_config.h"
#include "engine/runtime/arena.h"
#include "engine/runtime/device.h"
#include "engine/train/metrics.h"
#include "kernels/check.h"
#include "parallel/compressed_site_comm.h"
#include "parallel/mpi_communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/staged_communicator.h"
#include "tools/bench/bench.h"

namespace taco::bench {
namespace {

struct Args {
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather"};
  std::vector<std::string> codecs = {"none", "taco", "fp8_block"};
  int64_t min_bytes = int64_t(1) << 20, max_bytes = int64_t(1) << 30;
  int factor = 4, iters = 20, warmup = 5, cols = 1024;
  std::string device = "auto", backend = "auto", json;
  std::string chunks = "auto";  // compression.chunks: auto or a piece count
  int64_t stage_piece = int64_t(staging::kDefaultPieceBytes);
};

int parse_int(const std::string& option, const std::string& text, int min) {
  int v = 0;
  try {
    size_t used = 0;
    v = std::stoi(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw UserError(option + ": '" + text + "' is not an integer");
  }
  if (v < min) throw UserError(option + ": must be >= " + std::to_string(min));
  return v;
}

Args parse_args(const std::vector<std::string>& a) {
  Args r;
  for (size_t i = 0; i < a.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 >= a.size()) throw UserError(a[i] + ": missing value");
      return a[++i];
    };
    const std::string& k = a[i];
    if (k == "--ops") {
      r.ops = split_list(value());
      for (const auto& o : r.ops)
        if (o != "all_reduce" && o != "reduce_scatter" && o != "all_gather")
          throw UserError("--ops: '" + o + "' is not all_reduce, reduce_scatter or all_gather");
    } else if (k == "--codecs") {
      r.codecs = split_list(value());
    } else if (k == "--min-bytes") {
      r.min_bytes = parse_size(k, value());
    } else if (k == "--max-bytes") {
      r.max_bytes = parse_size(k, value());
    } else if (k == "--factor") {
      r.factor = parse_int(k, value(), 2);
    } else if (k == "--iters") {
      r.iters = parse_int(k, value(), 1);
    } else if (k == "--warmup") {
      r.warmup = parse_int(k, value(), 0);
    } else if (k == "--cols") {
      r.cols = parse_int(k, value(), 8);
    } else if (k == "--device") {
      r.device = value();
      if (r.device != "auto" && r.device != "cpu" && r.device != "cuda")
        throw UserError("--device: '" + r.device + "' is not auto, cpu or cuda");
    } else if (k == "--backend") {
      r.backend = value();
      if (r.backend != "auto" && r.backend != "nccl" && r.backend != "mpi")
        throw UserError("--backend: '" + r.backend + "' is not auto, nccl or mpi");
    } else if (k == "--chunks") {
      r.chunks = value();
      if (r.chunks != "auto") r.chunks = std::to_string(parse_int(k, r.chunks, 1));
    } else if (k == "--stage-piece") {
      r.stage_piece = parse_size(k, value());
      if (r.stage_piece <= 0) throw UserError("--stage-piece: must be > 0");
    } else if (k == "--json") {
      r.json = value();
    } else {
      throw UserError(k + ": unknown option (see taco-bench --help)");
    }
  }
  if (r.max_bytes < r.min_bytes) throw UserError("--max-bytes is below --min-bytes");
  return r;
}

// The codec `name` as the default of a policy that compresses every message, in `chunks`
// pipeline pieces on the device.
CompressionPolicy policy_for(const std::string& name, const std::string& chunks) {
  const Config cfg = load_config_text(kDefaultConfigYaml, "taco-bench comm --codecs",
                                      {"compression.default={codec: " + name + "}",
                                       "compression.min_bytes=0", "compression.chunks=" + chunks});
  return CompressionPolicy(cfg.compression, cfg.model.n_layer, cfg.model.d_model,
                           "taco-bench comm");
}

// The bench's own agreements travel on a communicator of their own (`ranks`), so the measured
// one's stats count only the measured calls.
double max_over_ranks(Communicator& ranks, double x) {
  ranks.all_reduce_values(&x, 1, ReduceOp::max);
  return x;
}

int64_t sum_over_ranks(Communicator& ranks, int64_t x) {
  double v = double(x);  // counts of wrong elements: exact in a double
  ranks.all_reduce_values(&v, 1, ReduceOp::sum);
  return int64_t(v);
}

struct Row {
  std::string op, codec, path;
  int64_t bytes = 0, count = 0, wire = 0, wrong = 0;
  double us = 0, algbw = 0, busbw = 0, error = 0, staging_us = 0, vs_best = 0;
};

// One row's setup: the codec, the communicator it runs on and, for the staged backend's
// baselines, the reduction path.
struct Variant {
  std::string codec, path;  // path: "native", "two_shot", "auto" or "" (not a staged baseline)
  Communicator* comm = nullptr;
  HostStagedCommunicator* staged = nullptr;
};

}  // namespace

int comm(const std::vector<std::string>& args) {
  const Args a = parse_args(args);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  MpiCommunicator world(MPI_COMM_WORLD, "world");
  MpiCommunicator ranks(MPI_COMM_WORLD, "bench");
  const int p = world.size(), rank = world.rank();

  const bool want_gpu = a.device != "cpu";
  const DeviceInfo dev = select_device(want_gpu, rank % std::max(1, cuda_device_count()));
  if (a.device == "cuda" && dev.kind != DeviceKind::cuda)
    throw UserError("--device cuda: no CUDA device found");
  const bool gpu = dev.kind == DeviceKind::cuda;
  // No silent fallback: NCCL moves device memory only.
  if (a.backend == "nccl" && !gpu)
    throw UserError(std::string("--backend nccl: NCCL moves device memory, but this run is on ") +
                    (a.device == "cpu" ? "--device cpu" : "the CPU (no CUDA device found)") +
                    "; use --backend mpi or auto");
  const DType dtype = gpu ? DType::bf16 : DType::f32;
  std::unique_ptr<Communicator> device_comm;
  if (gpu)
    device_comm =
        make_device_communicator(world, use_nccl_backend(MPI_COMM_WORLD, a.backend, "--backend"));
  Communicator& comm = gpu ? *device_comm : static_cast<Communicator&>(world);
  // Host-staged: the auto communicator above, and one per forced path for the baselines.
  auto* staged_auto = dynamic_cast<HostStagedCommunicator*>(device_comm.get());
  std::unique_ptr<HostStagedCommunicator> staged_native, staged_two_shot;
  if (staged_auto) {
    staged_auto->set_piece_bytes(size_t(a.stage_piece));
    staged_native = std::make_unique<HostStagedCommunicator>(world, StagedReduce::native,
                                                             size_t(a.stage_piece));
    staged_two_shot = std::make_unique<HostStagedCommunicator>(world, StagedReduce::two_shot,
                                                               size_t(a.stage_piece));
  }
  // The reference every row is checked against: the native collective.
  Communicator& reference = staged_auto ? *staged_native : comm;
  // The baselines first, so every codec row is quoted against the best of them.
  std::vector<Variant> variants;
  for (const std::string& codec : a.codecs) {
    if (codec != "none") continue;
    if (staged_auto) {
      variants.push_back({codec, "native", staged_native.get(), staged_native.get()});
      variants.push_back({codec, "two_shot", staged_two_shot.get(), staged_two_shot.get()});
      variants.push_back({codec, "auto", staged_auto, staged_auto});
    } else {
      variants.push_back({codec, "", &comm, nullptr});
    }
  }
  for (const std::string& codec : a.codecs)
    if (codec != "none") variants.push_back({codec, "", &comm, nullptr});

  if (rank == 0) {
    std::printf(
        "# taco-bench comm: %d ranks, %s buffers holding %s, backend %s, cols %d, %d iters after "
        "%d warmup\n",
        p, gpu ? "device" : "host", dtype_name(dtype), comm.backend(), a.cols, a.iters, a.warmup);
    if (gpu)
      std::printf("# size(B) = count x 2: the bf16 message's bytes\n");
    else
      std::printf(
          "# size(B) = count x 2: each element counted as 2 B (bf16, what a GPU run moves) so "
          "rows compare with GPU runs; these host buffers hold fp32, so none moves twice that\n");
    std::printf(
        "# algbw = size / time; busbw = algbw x 2(p-1)/p (all_reduce) or (p-1)/p (others)\n"
        "# wire(B): bytes one rank sends per call (none: the native collective's share of size; "
        "codecs: encoded, headers and scales included)\n"
        "# error: relative L2 against the native result; #wrong: elements that differ from it "
        "(none) or are not finite (codecs); vs best: the fastest none row's time / this row's\n");
    if (gpu)
      std::printf("# codecs: device buffers, device codecs, pipeline chunks %s\n",
                  a.chunks.c_str());
    else
      std::printf("# codecs: host buffers, host codecs\n");
    if (staged_auto)
      std::printf("# host staging: pieces of %lld bytes; none as native, two_shot and auto\n",
                  (long long)a.stage_piece);
    std::printf("%-14s %-18s %12s %12s %10s %9s %9s %7s %12s %10s %8s\n", "op", "codec", "size(B)",
                "count", "time(us)", "algbw", "busbw", "#wrong", "wire(B)", "error", "vs best");
    std::printf("%-14s %-18s %12s %12s %10s %9s %9s %7s %12s %10s %8s\n", "", "", "", "(elements)",
                "", "(GB/s)", "(GB/s)", "", "per rank", "rel L2", "none");
  }

  std::vector<Row> rows;
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
    // [rows, cols] with rows a multiple of p (reduce-scatter and all-gather split them).
    const int64_t elems = bytes / 2;
    const int64_t nrows = std::max<int64_t>(p, (elems / a.cols) / p * p);
    const size_t n = size_t(nrows) * size_t(a.cols), chunk = n / size_t(p);
    Arena arena(dev.kind);
    const size_t h_x = arena.reserve("x", dtype, n), h_ref = arena.reserve("ref", dtype, n);
    const size_t h_part = arena.reserve("part", dtype, chunk);
    arena.allocate();
    const Tensor x = arena.get(h_x), ref = arena.get(h_ref), part = arena.get(h_part);
    // Fresh activations-like data per rank (Gaussian, seeded by size and rank).
    std::vector<float> host(n);
    std::mt19937_64 rng(uint64_t(bytes) * 131 + uint64_t(rank));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float& v : host) v = normal(rng);
    auto upload = [&](const Tensor& t, const float* src, size_t count) {
      if (dtype == DType::f32) {
        device_copy(t.data, src, count * sizeof(float), dev.kind, DeviceKind::cpu);
      } else {
        std::vector<bf16> b(count);
        for (size_t i = 0; i < count; ++i) b[i] = float_to_bf16(src[i]);
        device_copy(t.data, b.data(), count * sizeof(bf16), dev.kind, DeviceKind::cpu);
      }
    };
    auto download = [&](const Tensor& t, size_t count) {
      std::vector<float> out(count);
      if (dtype == DType::f32) {
        device_copy(out.data(), t.data, count * sizeof(float), DeviceKind::cpu, dev.kind);
      } else {
        std::vector<bf16> b(count);
        device_copy(b.data(), t.data, count * sizeof(bf16), DeviceKind::cpu, dev.kind);
        for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(b[i]);
      }
      return out;
    };

    for (const std::string& op : a.ops) {
      // The native result this op must reproduce, on this rank.
      const Tensor out = op == "reduce_scatter" ? part : ref;
      const size_t out_n = op == "reduce_scatter" ? chunk : n;
      upload(x, host.data(), n);
      if (op == "all_reduce")
        reference.all_reduce(x.data, ref.data, n, dtype, ReduceOp::sum, nullptr);
      else if (op == "reduce_scatter")
        reference.reduce_scatter(x.data, part.data, chunk, dtype, ReduceOp::sum, nullptr);
      else
        reference.all_gather(static_cast<char*>(x.data) + rank * chunk * dtype_size(dtype),
                             ref.data, chunk, dtype, nullptr);
      wait_for_communicator(reference, nullptr);
      const std::vector<float> expected = download(out, out_n);
      double best_none_us = 0;  // the fastest none row of this op and size so far

      for (const Variant& variant : variants) {
        const std::string& codec = variant.codec;
        Communicator& comm = *variant.comm;
        const CompressionPolicy policy = policy_for(codec, a.chunks);
        CompressedSiteComm door(comm, policy);
        door.measure_errors(false);
        const Tensor xin = x.slice(0, n);
        auto call = [&] {
          if (op == "all_reduce") {
            door.all_reduce(xin, int(nrows), Site::attn_out_fwd, 0);
          } else if (op == "reduce_scatter") {
            door.reduce_scatter(xin, part, int(nrows), Site::attn_out_fwd, 0);
          } else {
            door.all_gather(x.slice(rank * chunk, chunk), ref, int(nrows), Site::attn_out_fwd, 0);
          }
        };
        // Correctness first, on the data itself (an all-reduce works in place).
        upload(x, host.data(), n);
        call();
        wait_for_communicator(comm, nullptr);
        const std::vector<float> got = download(op == "all_reduce" ? x : out, out_n);
        // The staged path this row's sums took (auto: decided by the call above).
        std::string path = variant.path;
        if (path == "auto" && op != "all_gather") {
          const CommOp cop = op == "all_reduce" ? CommOp::all_reduce : CommOp::reduce_scatter;
          path = "auto=";
          path += variant.staged->reduce_path(cop, dtype, n * dtype_size(dtype));
        }
        // Bit for bit against native unless the sum's rounding order legitimately differs.
        const bool exact = codec == "none" && (p == 2 || op == "all_gather" || path == "native" ||
                                               path == "auto=native");
        double err = 0, sig = 0;
        int64_t wrong = 0;
        for (size_t i = 0; i < out_n; ++i) {
          const double d = double(got[i]) - expected[i];
          err += d * d;
          sig += double(expected[i]) * expected[i];
          wrong += exact ? got[i] != expected[i] : !std::isfinite(got[i]);
        }
        // Timing: warmup, then iters calls between barriers (an all-reduce keeps summing in
        // place; the values grow by p per call, which costs the same).
        for (int i = 0; i < a.warmup; ++i) call();
        wait_for_communicator(comm, nullptr);
        ranks.barrier(nullptr);
        door.reset_stats();
        comm.reset_stats();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < a.iters; ++i) call();
        wait_for_communicator(comm, nullptr);
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        Row row;
        row.op = op;
        row.codec = codec;
        row.path = path;
        row.staging_us =
            max_over_ranks(ranks, comm.stats().total().staging_seconds / a.iters) * 1e6;
        row.bytes = int64_t(n) * 2;
        row.count = int64_t(n);
        row.us = max_over_ranks(ranks, secs / a.iters) * 1e6;
        row.algbw = double(row.bytes) / (row.us * 1e-6) / 1e9;
        row.busbw = row.algbw * (op == "all_reduce" ? 2.0 * (p - 1) / p : double(p - 1) / p);
        row.wrong = sum_over_ranks(ranks, wrong);
        row.error = std::sqrt(max_over_ranks(ranks, sig > 0 ? err / sig : 0));
        row.wire = door.total().wire_bytes / std::max(1, a.iters);
        if (codec == "none")
          row.wire = bytes_sent_estimate(op == "all_reduce"       ? CommOp::all_reduce
                                         : op == "reduce_scatter" ? CommOp::reduce_scatter
                                                                  : CommOp::all_gather,
                                         size_t(row.bytes), p);
        if (codec == "none" && (best_none_us == 0 || row.us < best_none_us)) best_none_us = row.us;
        row.vs_best = best_none_us > 0 ? best_none_us / row.us : 0;
        rows.push_back(row);
        if (rank == 0) {
          std::string label = codec;
          if (!path.empty()) label.append(":").append(path);
          char vs[16] = "-";
          if (row.vs_best > 0) std::snprintf(vs, sizeof(vs), "%.2fx", row.vs_best);
          std::printf("%-14s %-18s %12lld %12lld %10.1f %9.2f %9.2f %7lld %12lld %10.3e %8s\n",
                      op.c_str(), label.c_str(), (long long)row.bytes, (long long)row.count, row.us,
                      row.algbw, row.busbw, (long long)row.wrong, (long long)row.wire, row.error,
                      vs);
          std::fflush(stdout);
        }
      }
    }
  }

  if (rank == 0 && !a.json.empty()) {
    std::string json = "[";
    for (const Row& r : rows) {
      if (json.size() > 1) json += ",\n";
      json += JsonRecord()
                  .add("op", r.op)
                  .add("codec", r.codec)
                  .add("path", r.path)
                  .add("ranks", (long long)p)
                  .add("device", std::string(gpu ? "cuda" : "cpu"))
                  .add("backend", std::string(comm.backend()))
                  .add("chunks", gpu ? a.chunks : std::string("host"))
                  .add("size_bytes", (long long)r.bytes)
                  .add("count", (long long)r.count)
                  .add("time_us", r.us)
                  .add("algbw_gbs", r.algbw)
                  .add("busbw_gbs", r.busbw)
                  .add("wrong", (long long)r.wrong)
                  .add("wire_bytes", (long long)r.wire)
                  .add("rel_err", r.error)
                  .add("staging_us", r.staging_us)
                  .add("vs_best_none", r.vs_best)
                  .str();
    }
    std::FILE* f = std::fopen(a.json.c_str(), "w");
    if (!f) throw UserError(a.json + ": cannot write");
    std::fputs((json + "]\n").c_str(), f);
    std::fclose(f);
  }
  int wrong_none = 0;
  for (const Row& r : rows) wrong_none += r.codec == "none" && r.wrong > 0;
  staged_native.reset();
  staged_two_shot.reset();
  device_comm.reset();
  if (!initialized) MPI_Finalize();
  return wrong_none > 0 ? 1 : 0;
}

}  // namespace taco::bench
