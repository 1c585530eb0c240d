// taco-plan's cluster loader and step-time model (tools/plan/plan.h).
#include "tools/plan/plan.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "compression/wire_format.h"
#include "engine/config/config_source.h"
#include "kernels/check.h"
#include "model/param_layout.h"
#include "parallel/codec_autotune.h"
#include "parallel/collective_model.h"

namespace taco::plan {
namespace {

// The config loader's own source map (engine/config/config_source.h) places each cluster-file
// error at its key's line, so a bad cluster file reads like a bad experiment file.
using config_detail::ConfigSource;
using config_detail::join_path;

const std::set<std::string> kLinkLevels = {"nvlink", "pcie", "nic", "host_staged", "shared_memory"};

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads one map of the cluster file: every key must be one of `known`.
class MapReader {
 public:
  MapReader(const ConfigSource& src, const YAML::Node& node, std::string path)
      : src_(src), node_(node), path_(std::move(path)) {}

  void only(const std::vector<std::string>& known) const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end())
        src_.fail(join_path(path_, key), "unknown key", "one of " + joined(known),
                  it->first.Mark());
    }
  }
  bool has(const std::string& key) const { return bool(node_[key]); }
  std::string key_path(const std::string& key) const { return join_path(path_, key); }

  double number(const std::string& key, double lowest, bool strict, bool required,
                double fallback) const {
    const YAML::Node v = node_[key];
    const std::string expected =
        std::string("a number ") + (strict ? "> " : ">= ") + config_detail::number_text(lowest);
    if (!v) {
      if (required) src_.fail(key_path(key), "missing", expected);
      return fallback;
    }
    double x = 0;
    if (!v.IsScalar() || !YAML::convert<double>::decode(v, x) || !std::isfinite(x))
      src_.fail(
          key_path(key),
          "'" + (v.IsScalar() ? v.Scalar() : std::string("a map or list")) + "' is not a number",
          expected);
    if (strict ? !(x > lowest) : !(x >= lowest))
      src_.fail(key_path(key), config_detail::number_text(x) + " is out of range", expected);
    return x;
  }
  int integer(const std::string& key, int lowest, int fallback) const {
    const YAML::Node v = node_[key];
    if (!v) return fallback;
    int x = 0;
    if (!v.IsScalar() || !YAML::convert<int>::decode(v, x))
      src_.fail(
          key_path(key),
          "'" + (v.IsScalar() ? v.Scalar() : std::string("a map or list")) + "' is not an integer",
          "an integer >= " + std::to_string(lowest));
    if (x < lowest)
      src_.fail(key_path(key), std::to_string(x) + " is out of range",
                "an integer >= " + std::to_string(lowest));
    return x;
  }
  std::string text(const std::string& key, bool required) const {
    const YAML::Node v = node_[key];
    if (!v) {
      if (required) src_.fail(key_path(key), "missing", "a name");
      return "";
    }
    if (!v.IsScalar()) src_.fail(key_path(key), "not a scalar", "a name");
    return v.Scalar();
  }
  YAML::Node map(const std::string& key, bool required) const {
    const YAML::Node v = node_[key];
    if (!v) {
      if (required) src_.fail(key_path(key), "missing", "a map");
      return YAML::Node(YAML::NodeType::Map);
    }
    if (!v.IsMap()) src_.fail(key_path(key), "not a map", "a map");
    return v;
  }

 private:
  const ConfigSource& src_;
  YAML::Node node_;
  std::string path_;
};

// Alpha-beta collective costs (parallel/collective_model.h, the model codec: auto predicts
// with), in seconds, for p ranks on `link` and a message of n bytes.
LinkModel link_model(const Link& l) { return {l.latency_us * 1e-6, l.bandwidth_GBps * 1e9}; }
double t_allreduce(const Link& l, int p, double n) {
  return collective_seconds(CommOp::all_reduce, p, n, link_model(l));
}
double t_send(const Link& l, double n) {
  return collective_seconds(CommOp::send, 2, n, link_model(l));
}

}  // namespace

double Cluster::tflops_for(int d_model) const {
  double best = compute_tflops, distance = 1e300;
  for (const auto& [d, rate] : compute_tflops_by_d_model) {
    const double dist = std::abs(std::log(double(d) / d_model));
    if (dist < distance) distance = dist, best = rate;
  }
  return best;
}

const Link& Cluster::link_for_span(int span) const {
  const int per_node = gpus_per_node * ranks_per_gpu;
  const std::string& level = span > per_node ? inter_node : intra_node;
  return links.at(level);
}

Cluster load_cluster_text(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw UserError(source_name + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg +
                    "; expected a YAML map");
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    throw UserError(source_name +
                    ":1: the cluster file is not a map; expected keys such as "
                    "gpus_per_node and links");
  const ConfigSource src(source_name, root);
  const MapReader top(src, root, "");
  top.only({"name", "nodes", "gpus_per_node", "ranks_per_gpu", "dtype_bytes", "compute_tflops",
            "peak_tflops", "links", "intra_node", "inter_node", "codecs", "source"});
  Cluster c;
  c.source = source_name;
  c.name = top.text("name", false);
  c.nodes = top.integer("nodes", 1, 1);
  if (!top.has("gpus_per_node")) src.fail("gpus_per_node", "missing", "an integer >= 1");
  c.gpus_per_node = top.integer("gpus_per_node", 1, 1);
  c.gpus_per_node_line = root["gpus_per_node"].Mark().line + 1;
  c.ranks_per_gpu = top.integer("ranks_per_gpu", 1, 1);
  c.dtype_bytes = top.integer("dtype_bytes", 1, 2);
  if (c.dtype_bytes != 2 && c.dtype_bytes != 4)
    src.fail("dtype_bytes", std::to_string(c.dtype_bytes) + " is not a wire dtype",
             "2 (bf16, GPU ranks) or 4 (fp32, CPU ranks)");
  // compute_tflops: one number, or a map from d_model to the rate measured at that size.
  const YAML::Node rate = root["compute_tflops"];
  if (rate && rate.IsMap()) {
    const MapReader r(src, rate, "compute_tflops");
    for (auto it = rate.begin(); it != rate.end(); ++it) {
      int d_model = 0;
      if (!YAML::convert<int>::decode(it->first, d_model) || d_model < 1)
        src.fail(join_path("compute_tflops", it->first.Scalar()), "not a d_model",
                 "integer keys (d_model) >= 1", it->first.Mark());
      c.compute_tflops_by_d_model[d_model] = r.number(it->first.Scalar(), 0, true, true, 0);
    }
    if (c.compute_tflops_by_d_model.empty())
      src.fail("compute_tflops", "empty", "a number > 0 or a map from d_model to one");
    c.compute_tflops = c.compute_tflops_by_d_model.begin()->second;
  } else {
    c.compute_tflops = top.number("compute_tflops", 0, true, true, 0);
  }
  c.peak_tflops = top.number("peak_tflops", 0, true, false, 0);

  const YAML::Node links = top.map("links", true);
  const MapReader links_reader(src, links, "links");
  links_reader.only(std::vector<std::string>(kLinkLevels.begin(), kLinkLevels.end()));
  for (auto it = links.begin(); it != links.end(); ++it) {
    const std::string level = it->first.Scalar();
    const YAML::Node node = links_reader.map(level, true);
    const MapReader r(src, node, join_path("links", level));
    r.only({"bandwidth_GBps", "latency_us", "source"});
    c.links[level] = {r.number("bandwidth_GBps", 0, true, true, 0),
                      r.number("latency_us", 0, false, true, 0)};
  }
  auto level_of = [&](const std::string& key, bool required) {
    const std::string level = top.text(key, required);
    if (!level.empty() && !c.links.count(level)) {
      std::vector<std::string> have;
      for (const auto& [name, link] : c.links) have.push_back(name);
      src.fail(key, "'" + level + "' is not a level under links",
               "one of " + (have.empty() ? std::string("(none)") : joined(have)));
    }
    return level;
  };
  c.intra_node = level_of("intra_node", true);
  if (c.nodes > 1 && !top.has("inter_node"))
    src.fail("inter_node", "missing with nodes: " + std::to_string(c.nodes),
             "the level under links that joins nodes", root["nodes"].Mark());
  c.inter_node = level_of("inter_node", false);
  if (c.inter_node.empty()) c.inter_node = c.intra_node;

  const YAML::Node codecs = top.map("codecs", false);
  const MapReader codecs_reader(src, codecs, "codecs");
  codecs_reader.only({"taco"});
  for (auto it = codecs.begin(); it != codecs.end(); ++it) {
    const std::string name = it->first.Scalar();
    const MapReader r(src, codecs_reader.map(name, true), join_path("codecs", name));
    r.only({"encode_GBps", "decode_GBps", "source"});
    c.codecs[name] = {r.number("encode_GBps", 0, true, true, 0),
                      r.number("decode_GBps", 0, true, true, 0)};
  }
  return c;
}

Cluster load_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot read the cluster file");
  std::stringstream text;
  text << in.rdbuf();
  return load_cluster_text(text.str(), path);
}

CodecSpeed taco_speed_from_bench_json(const std::string& path, double message_bytes,
                                      int dtype_bytes, std::string* used) {
  const std::string kRow = "taco e4m3 g128 dual hidden";
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);  // JSON is YAML
  } catch (const YAML::BadFile&) {
    throw UserError(path + ": cannot read the codec benchmark's JSON");
  } catch (const YAML::Exception& e) {
    throw UserError(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg +
                    "; expected taco-bench codec --json output");
  }
  const YAML::Node results = root.IsMap() ? root["results"] : YAML::Node();
  if (!results || !results.IsSequence())
    throw UserError(path + ": results: missing; expected taco-bench codec --json output");
  const bool f32 = dtype_bytes == 4;
  CodecSpeed best;
  double best_distance = 1e300;
  for (const auto& r : results) {
    if (!r.IsMap() || !r["codec"] || r["codec"].Scalar() != kRow) continue;
    const char* enc_key = f32 && r["encode_f32_gbps"] ? "encode_f32_gbps" : "encode_gbps";
    const char* dec_key = f32 && r["decode_f32_gbps"] ? "decode_f32_gbps" : "decode_gbps";
    if (!r[enc_key] || !r[dec_key]) continue;
    const double bytes = r["message_bytes"] ? r["message_bytes"].as<double>() : message_bytes;
    const double distance = std::abs(std::log(bytes / message_bytes));
    if (distance >= best_distance) continue;
    best_distance = distance;
    best = {r[enc_key].as<double>(), r[dec_key].as<double>()};
    if (used)
      *used = kRow + (r["message_bytes"] ? " at " + config_detail::number_text(bytes) + " B" : "") +
              ": encode " + config_detail::number_text(best.encode_GBps) + " GB/s (" + enc_key +
              "), decode " + config_detail::number_text(best.decode_GBps) + " GB/s";
  }
  if (!(best.encode_GBps > 0) || !(best.decode_GBps > 0))
    throw UserError(path + ": no '" + kRow +
                    "' row with positive encode and decode speeds; "
                    "expected taco-bench codec --json output that measured taco");
  return best;
}

double tp_message_bytes(const Config& cfg, const Cluster& cluster) {
  return double(cfg.train.micro_batch_size) * cfg.model.seq_len * cfg.model.d_model *
         cluster.dtype_bytes;
}

std::string Layout::name() const {
  return "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
         (sp ? " sp" : "");
}

const char* policy_name(Policy p) {
  return p == Policy::taco ? "taco" : p == Policy::automatic ? "auto" : "none";
}

void check_layout(const Config& cfg, const Cluster& cluster, const Layout& l) {
  const std::string& f = cfg.source;
  const std::string shape = "layout " + l.name();
  if (l.tp < 1 || l.pp < 1 || l.dp < 1) throw UserError(shape + ": tp, pp and dp must be >= 1");
  if (cfg.model.n_head % l.tp != 0)
    throw UserError(f + ": model.n_head: " + std::to_string(cfg.model.n_head) +
                    " heads do not split over tp " + std::to_string(l.tp) +
                    "; expected tp to divide n_head");
  if (cfg.model.n_layer % l.pp != 0)
    throw UserError(f + ": model.n_layer: " + std::to_string(cfg.model.n_layer) +
                    " layers do not split over pp " + std::to_string(l.pp) +
                    "; expected pp to divide n_layer");
  const int64_t per_replica_micro = int64_t(l.dp) * cfg.train.micro_batch_size * cfg.model.seq_len;
  if (cfg.train.global_batch_tokens % per_replica_micro != 0)
    throw UserError(
        f + ": train.global_batch_tokens: " + std::to_string(cfg.train.global_batch_tokens) +
        " is not a multiple of dp " + std::to_string(l.dp) + " x micro_batch_size x seq_len = " +
        std::to_string(per_replica_micro) + "; expected a multiple");
  if (l.sp && l.tp > 1 && (int64_t(cfg.train.micro_batch_size) * cfg.model.seq_len) % l.tp != 0)
    throw UserError(f + ": model.seq_len: micro_batch_size x seq_len does not split over tp " +
                    std::to_string(l.tp) + " under sequence parallelism; expected a multiple");
  if (l.world() > cluster.rank_slots())
    throw UserError(cluster.source +
                    (cluster.gpus_per_node_line > 0
                         ? ":" + std::to_string(cluster.gpus_per_node_line)
                         : std::string()) +
                    ": gpus_per_node: " + std::to_string(cluster.nodes) + " node(s) x " +
                    std::to_string(cluster.gpus_per_node) + " GPU(s) x " +
                    std::to_string(cluster.ranks_per_gpu) + " rank(s) per GPU hold " +
                    std::to_string(cluster.rank_slots()) + " ranks, " + shape + " needs " +
                    std::to_string(l.world()) + "; expected at least as many GPUs as ranks");
}

Prediction predict(const Config& cfg, const Cluster& cl, const Layout& l, Policy policy) {
  check_layout(cfg, cl, l);
  const auto& m = cfg.model;
  const GptDims dims = GptDims::make(m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, l.tp);
  const double flops_per_token =
      6.0 * double(dims.num_params()) + 6.0 * m.n_layer * double(m.seq_len) * m.d_model;
  const double tokens = double(cfg.train.global_batch_tokens);
  const int64_t micro_tokens = int64_t(cfg.train.micro_batch_size) * m.seq_len;
  Prediction p;
  p.layout = l;
  p.policy = policy;
  p.microbatches = int(cfg.train.global_batch_tokens / (micro_tokens * l.dp));

  // Ranks that share one device run their work one after the other.
  const double share = std::max(1.0, double(l.world()) / cl.devices());
  const double devices_used = double(l.world()) / share;
  const double rate = cl.tflops_for(m.d_model) * 1e12;
  const double compute_rank_s = flops_per_token * tokens / l.world() / rate * share;
  const double stage_mb_s = compute_rank_s / p.microbatches;

  // Tensor-parallel traffic of one micro-batch on one stage (the first: embed.fwd; a one-stage
  // model also head.in.bwd). Every message is [B T, C] in the run's dtype.
  const Link& tp_link = cl.link_for_span(l.tp);
  const double n = double(micro_tokens) * m.d_model * cl.dtype_bytes;
  const int collectives = 4 * m.n_layer / l.pp + (l.pp == 1 ? 2 : 1);
  const DType dtype = cl.dtype_bytes == 4 ? DType::f32 : DType::bf16;
  CodecOptions taco_opts;
  taco_opts.kind = CodecKind::taco;
  taco_opts.group = 128;
  taco_opts.scales = Fp8Scales::dual;
  // The wire size of one compressed chunk of `rows` rows (what the trainer's collectives send).
  auto wire = [&](int64_t rows) {
    return double(wire_layout(canonical(taco_opts), {rows, m.d_model}, dtype).total_bytes);
  };
  const int t = l.tp;
  if (policy != Policy::none && (t > 1 || l.pp > 1 || l.dp > 1) && !cl.codecs.count("taco"))
    throw UserError(cl.source +
                    ": codecs: no taco speeds; expected codecs.taco with "
                    "encode_GBps and decode_GBps (taco-bench codec --json)");
  const CodecThroughput taco_speed = policy == Policy::none
                                         ? CodecThroughput{}
                                         : CodecThroughput{cl.codecs.at("taco").encode_GBps * 1e9,
                                                           cl.codecs.at("taco").decode_GBps * 1e9};
  const double margin = cfg.compression.auto_margin;
  double tp_s = 0, codec_s = 0, wire_bytes = 0;
  if (t > 1) {
    const int64_t chunk_rows = micro_tokens / t;
    // An all-reduce (all-to-all of chunks, sum, all-gather of the sums) and, under SP, the
    // reduce-scatter plus all-gather that replace it move the same slots in as many steps.
    // Codec work of a compressed one: encode the message and one's summed chunk, decode the p
    // chunks one sums and the p sums one gathers (native bytes at the measured speeds). auto
    // compresses where that is predicted to pay, as the trainer decides an all-reduce.
    const double taco_slot = wire(chunk_rows);
    const AutoPrediction choice = predict_auto_codec(CommOp::all_reduce, t, n, taco_slot, taco_slot,
                                                     taco_speed, link_model(tp_link), margin);
    const bool compress =
        policy == Policy::taco || (policy == Policy::automatic && choice.compress);
    p.tp_compressed = compress;
    // What p ranks move per rank: the chunk a rank sends in each of its (p - 1) steps.
    const double slot = compress ? taco_slot : n / t;
    const CompressedSeconds& compressed = choice.compressed;
    const double per_collective = compress ? compressed.wire_s : t_allreduce(tp_link, t, n);
    const double per_wire = 2.0 * (t - 1) * slot;
    const double per_codec = compress ? (compressed.encode_s + compressed.decode_s) * share : 0.0;
    const double ce = t_allreduce(tp_link, t, double(micro_tokens) * 4) * 2;  // row max, sum exp
    tp_s = p.microbatches * (collectives * (per_collective + per_codec) + ce);
    codec_s = p.microbatches * collectives * per_codec;
    wire_bytes = p.microbatches * collectives * per_wire;
    if (l.sp) {  // sp.grad: LayerNorm weights and biases, the final LayerNorm, the positions
      const double replicated =
          (4.0 * m.d_model * m.n_layer / l.pp + 2.0 * m.d_model + double(m.seq_len) * m.d_model) *
          cl.dtype_bytes;
      tp_s += t_allreduce(tp_link, t, replicated);
    }
  }
  // Pipeline: one activation forward and one gradient back per micro-batch and stage boundary.
  // Under auto each is decided as the trainer decides a prepared pipeline message: one encoded
  // message each way against the native one.
  double pp_mb_s = 0, tied_s = 0, pp_codec_mb_s = 0;
  if (l.pp > 1) {
    const Link& pp_link = cl.link_for_span(l.tp * l.pp);
    const double pp_bytes = n / (l.sp ? l.tp : 1);
    pp_mb_s = 2.0 * t_send(pp_link, pp_bytes);
    if (policy == Policy::automatic) {
      const double encoded = wire(micro_tokens / (l.sp ? l.tp : 1));
      const AutoPrediction choice = predict_auto_codec(CommOp::send_recv, 2, pp_bytes, encoded, 0,
                                                       taco_speed, link_model(pp_link), margin);
      if (choice.compress) {
        p.pp_compressed = true;
        const CompressedSeconds& c = choice.compressed;
        pp_codec_mb_s = 2.0 * (c.encode_s + c.decode_s) * share;
        pp_mb_s = 2.0 * c.wire_s + pp_codec_mb_s;
      }
    }
    tied_s = t_allreduce(pp_link, 2, double(dims.padded_vocab) / l.tp * m.d_model * cl.dtype_bytes);
  }
  // Data parallel: one all-reduce of this rank's gradients.
  // Under auto decided like the tensor-parallel all-reduce, on the flat [1, N] message the
  // trainer sends (its p chunks of N / p values each).
  const double grads = double(dims.num_params()) / (l.tp * l.pp) * cl.dtype_bytes;
  const Link& dp_link = cl.link_for_span(l.world());
  double dp_s = t_allreduce(dp_link, l.dp, grads), dp_codec_s = 0;
  if (policy == Policy::automatic && l.dp > 1) {
    const int64_t count = int64_t(grads / cl.dtype_bytes);
    const int64_t chunk = (count + l.dp - 1) / l.dp;
    const double slot = double(wire_layout(canonical(taco_opts), {1, chunk}, dtype).total_bytes);
    const AutoPrediction choice = predict_auto_codec(CommOp::all_reduce, l.dp, grads, slot, slot,
                                                     taco_speed, link_model(dp_link), margin);
    if (choice.compress) {
      p.dp_compressed = true;
      dp_codec_s = (choice.compressed.encode_s + choice.compressed.decode_s) * share;
      dp_s = choice.compressed.wire_s + dp_codec_s;
    }
  }

  const double tp_mb_s = tp_s / p.microbatches;
  const double slot_s = stage_mb_s + tp_mb_s + pp_mb_s;
  const double slots = p.microbatches + l.pp - 1;  // 1F1B: (m + pp - 1) slots
  const double step_s = slots * slot_s + tied_s + dp_s;
  p.step_ms = step_s * 1e3;
  p.compute_ms = p.microbatches * stage_mb_s * 1e3;
  p.bubble_ms = (l.pp - 1) * slot_s * 1e3;
  p.tp_ms = slots * tp_mb_s * 1e3;
  p.pp_ms = (slots * pp_mb_s + tied_s) * 1e3;
  p.dp_ms = dp_s * 1e3;
  p.codec_ms = ((codec_s / p.microbatches + pp_codec_mb_s) * slots + dp_codec_s) * 1e3;
  p.comm_ms = p.tp_ms + p.pp_ms + p.dp_ms;
  p.exposed_comm_ms = p.comm_ms;
  p.tp_wire_mb = wire_bytes / 1e6;
  p.tokens_per_s = tokens / step_s;
  const double peak = cl.peak_tflops > 0 ? cl.peak_tflops * 1e12 : rate;
  p.mfu = flops_per_token * tokens / step_s / (devices_used * peak);
  return p;
}

std::vector<Layout> layouts_for(const Config& cfg, const Cluster& cluster, int world) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; tp * pp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
        const Layout l{tp, pp, world / (tp * pp), sp == 1};
        try {
          check_layout(cfg, cluster, l);
        } catch (const UserError&) {
          continue;
        }
        // A tensor-parallel group that leaves its node is never worth planning.
        if (tp > cluster.gpus_per_node * cluster.ranks_per_gpu) continue;
        out.push_back(l);
      }
    }
  return out;
}

}  // namespace taco::plan
