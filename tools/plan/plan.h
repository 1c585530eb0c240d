// taco-plan's model: a cluster file (devices, link levels, measured compute and codec speeds)
// and the predicted step time of one layout (tp x pp x dp, SP on or off) under one codec policy.
//
// The prediction follows docs/architecture.md's step: per micro-batch and pipeline stage the
// tensor-parallel collectives of every block (sizes as the trainer's sites send them), the
// 1F1B pipeline's sends and its bubble, then the gradient sums (sp.grad, tied.grad, dp.grad).
// Collectives are alpha-beta models: an all-reduce over p ranks costs 2(p-1)(alpha + n/(p B))
// (NCCL's ring and MPI's two-shot move the same bytes in as many steps), a reduce-scatter or an
// all-gather half that, a send alpha + n/B; a compressed collective moves wire bytes
// (compression/wire_format.h) instead and adds its codec work at the measured codec speeds.
// taco's trainer does not overlap communication with compute, so all of it is exposed.
// docs/planner.md explains the inputs and the checks against measured runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/config/config.h"

namespace taco::plan {

// One link level (nvlink, pcie, nic, host_staged, shared_memory): per-rank bandwidth in GB/s
// (1e9 bytes/s, what one rank can push in one direction) and the latency of one message.
struct Link {
  double bandwidth_GBps = 0;
  double latency_us = 0;
};

// Measured speeds of one codec on this device, in GB/s of native (uncompressed) bytes.
struct CodecSpeed {
  double encode_GBps = 0;
  double decode_GBps = 0;
};

struct Cluster {
  std::string source;          // file, for messages
  int gpus_per_node_line = 0;  // where gpus_per_node is written, for a layout that does not fit
  std::string name;
  int nodes = 1;
  int gpus_per_node = 1;
  int ranks_per_gpu = 1;  // ranks that may share one device (time-sliced)
  int dtype_bytes = 2;    // 2: bf16 (GPU), 4: fp32 (CPU ranks)
  // Achieved model TFLOP/s of one device (6N + 6LTd FLOPs per token, taco-bench step's count):
  // one figure, or one per model width (the nearest d_model's is used).
  double compute_tflops = 0;
  std::map<int, double> compute_tflops_by_d_model;
  double peak_tflops = 0;  // the device's peak, for MFU (0: MFU against compute_tflops)
  std::map<std::string, Link> links;
  std::string intra_node;                    // link level between ranks of one node
  std::string inter_node;                    // between nodes ("" on one node)
  std::map<std::string, CodecSpeed> codecs;  // "taco"

  int devices() const { return nodes * gpus_per_node; }
  int rank_slots() const { return devices() * ranks_per_gpu; }
  double tflops_for(int d_model) const;
  // The link that carries a group whose ranks span `span` consecutive rank numbers.
  const Link& link_for_span(int span) const;
};

// Loads and checks a cluster file. Errors: taco::UserError "FILE:LINE: KEY: what is wrong;
// expected WHAT" (exit code 2), as the config loader's.
Cluster load_cluster_text(const std::string& yaml_text, const std::string& source_name);
Cluster load_cluster_file(const std::string& path);

// taco's speeds (E4M3, G = 128, dual scales, groups along hidden) from `taco-bench codec --json`
// output: the GPU benchmark's row whose message_bytes is nearest `message_bytes`, or the CPU
// benchmark's (`--cpu`) fp32 speeds when dtype_bytes is 4. `used` gets a description of the row.
// A file without such a row is a UserError naming it.
CodecSpeed taco_speed_from_bench_json(const std::string& path, double message_bytes,
                                      int dtype_bytes, std::string* used = nullptr);

// The bytes of one tensor-parallel message ([micro_batch_size x seq_len, d_model]).
double tp_message_bytes(const Config& config, const Cluster& cluster);

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  bool sp = false;
  int world() const { return tp * pp * dp; }
  std::string name() const;  // "tp2 pp1 dp4 sp"
};

// The codec policy. none: nothing compressed. taco: taco (G 128, dual scales) on every
// tensor-parallel site (embed, attn.in/out, mlp.in/out, head.in). automatic: codec: auto with
// taco as the candidate on every site, as `compression.default: {codec: auto}` runs: the
// tensor-parallel messages, the pipeline's and the data-parallel gradient sum, each decided as
// the trainer decides (parallel/codec_autotune.h: predicted encode + wire + decode below
// (1 - compression.auto_margin) x native), from the cluster's link and codec speeds.
enum class Policy { none, taco, automatic };
const char* policy_name(Policy p);  // "none", "taco", "auto"

struct Prediction {
  Layout layout;
  Policy policy = Policy::none;
  int microbatches = 1;  // per replica and step
  double step_ms = 0;
  double compute_ms = 0;       // on the critical path, bubble excluded
  double bubble_ms = 0;        // 1F1B: (pp - 1) stage slots, compute and their communication
  double comm_ms = 0;          // every collective on the critical path (bubble's share included)
  double exposed_comm_ms = 0;  // not overlapped with compute: all of it in taco today
  double tp_ms = 0, pp_ms = 0, dp_ms = 0;  // comm_ms split by group (tp includes sp.grad)
  double codec_ms = 0;                     // part of tp_ms, pp_ms and dp_ms
  bool tp_compressed = false, pp_compressed = false, dp_compressed = false;  // what it chose
  double tp_wire_mb = 0;  // bytes one rank sends on tp sites per step, MB (1e6)
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs / (step x devices x peak)
  double comm_share() const { return step_ms > 0 ? comm_ms / step_ms : 0; }
};

// Throws UserError naming the config key or the cluster key when the layout cannot run: tp must
// divide model.n_head, pp model.n_layer, dp x micro_batch_size x seq_len the global batch, and
// the layout's ranks must fit the cluster's devices (gpus_per_node, nodes, ranks_per_gpu).
void check_layout(const Config& config, const Cluster& cluster, const Layout& layout);

Prediction predict(const Config& config, const Cluster& cluster, const Layout& layout,
                   Policy policy);

// Every layout of `world` ranks that check_layout accepts, SP both ways where tp > 1.
std::vector<Layout> layouts_for(const Config& config, const Cluster& cluster, int world);

}  // namespace taco::plan
