// taco-plan: predicted step time, tokens/s, MFU and communication of a model config on a
// cluster, per layout (tp x pp x dp, SP on/off) and codec policy (none, taco on every TP site).
//
//   taco-plan CONFIG --cluster CLUSTER.yaml [--set KEY=VALUE]... [--world N]
//             [--layout TPxPPxDP[sp]]... [--codec-json FILE] [--json FILE]
//             [--sweep GBPS,GBPS,...]
//
// The model (tools/plan/plan.h) and its checks against measured runs: docs/planner.md.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "kernels/check.h"
#include "tools/plan/plan.h"
#include "tools/tool_main.h"

namespace {

using taco::UserError;
using namespace taco::plan;

const char* const kUsage =
    "usage: taco-plan CONFIG --cluster CLUSTER.yaml [--set KEY=VALUE]... [--world N]\n"
    "                 [--layout TPxPPxDP[sp]]... [--codec-json FILE] [--json FILE]\n"
    "                 [--sweep GBPS,GBPS,...]\n"
    "\n"
    "Predicts one training step of CONFIG's model on the cluster CLUSTER.yaml describes, per\n"
    "layout (tp x pp x dp, sequence parallelism on and off) and codec policy (none; taco, E4M3,\n"
    "G = 128, dual scales, on every tensor-parallel site; auto, codec: auto with taco as the\n"
    "candidate on every site, tensor-parallel, pipeline and data-parallel, the codec column\n"
    "saying what it compressed, with CONFIG's compression.auto_margin): step time, tokens/s,\n"
    "MFU, the communication share and the exposed (not overlapped) communication, from\n"
    "alpha-beta models of the collectives, the 1F1B bubble, the measured compute rate and the\n"
    "measured codec speeds the cluster file holds. Prints a table, best first.\n"
    "\n"
    "  CONFIG            a taco-train experiment (model and train sections; its parallel\n"
    "                    section is ignored: the planner tries every layout)\n"
    "  --cluster FILE    devices, link levels, compute and codec speeds (configs/clusters/)\n"
    "  --set KEY=VALUE   override a CONFIG key, as taco-train's --set\n"
    "  --world N         ranks to plan for (default: every rank slot, nodes x gpus_per_node\n"
    "                    x ranks_per_gpu)\n"
    "  --layout L        only this layout, e.g. 2x1x1 or 4x2x8sp (repeatable; its ranks may\n"
    "                    use up to ranks_per_gpu ranks per GPU)\n"
    "  --codec-json FILE taco's speeds from `taco-bench codec --json FILE` (GPU: the size\n"
    "                    nearest one tensor-parallel message; --cpu: the fp32 speeds) in place\n"
    "                    of the cluster file's codecs.taco\n"
    "  --json FILE       also write every prediction (and the sweep) as JSON\n"
    "  --sweep LIST      also predict each tp > 1 layout with the intra-node link's bandwidth\n"
    "                    set to each GB/s in LIST, for the speedup plot\n"
    "                    (python3 tools/bench/plan_plot.py FILE.json OUT.png)\n"
    "  --help            this text\n"
    "\n"
    "A bad cluster file (unknown key, negative bandwidth, a GPU count the layout does not fit)\n"
    "stops with one line naming the file, line, key and what is expected, and exit code 2.\n"
    "Cluster keys and the model: docs/planner.md; config keys: docs/config-reference.md.\n";

struct Options {
  std::string config, cluster, json, codec_json;
  std::vector<std::string> overrides;
  std::vector<Layout> layouts;
  std::vector<double> sweep;
  int world = 0;
  bool help = false;
};

Layout parse_layout(const std::string& text) {
  Layout l;
  std::string body = text;
  if (body.size() > 2 && body.substr(body.size() - 2) == "sp") {
    l.sp = true;
    body.resize(body.size() - 2);
  }
  char x1 = 0, x2 = 0;
  std::istringstream in(body);
  if (!(in >> l.tp >> x1 >> l.pp >> x2 >> l.dp) || x1 != 'x' || x2 != 'x' || !in.eof() ||
      l.tp < 1 || l.pp < 1 || l.dp < 1)
    throw UserError("--layout: '" + text + "' is not TPxPPxDP[sp] (such as 2x1x4 or 4x2x1sp)");
  return l;
}

double parse_double(const std::string& option, const std::string& text) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(x > 0))
    throw UserError(option + ": '" + text + "' is not a number > 0");
  return x;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(a + ": missing value (see --help)");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--cluster") {
      o.cluster = value();
    } else if (a == "--set") {
      o.overrides.push_back(value());
    } else if (a == "--codec-json") {
      o.codec_json = value();
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--world") {
      o.world = int(parse_double(a, value()));
    } else if (a == "--layout") {
      o.layouts.push_back(parse_layout(value()));
    } else if (a == "--sweep") {
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');)
        o.sweep.push_back(parse_double(a, item));
    } else if (!a.empty() && a[0] == '-') {
      throw UserError(a + ": unknown option (see --help)");
    } else if (o.config.empty()) {
      o.config = a;
    } else {
      throw UserError(a + ": only one CONFIG (see --help)");
    }
  }
  if (o.help) return o;
  if (o.config.empty()) throw UserError("missing CONFIG (see --help)");
  if (o.cluster.empty()) throw UserError("missing --cluster CLUSTER.yaml (see --help)");
  return o;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The codec column: none, taco, or auto with what it compressed ("auto:tp+pp", "auto:none").
std::string policy_label(const Prediction& p) {
  if (p.policy != Policy::automatic) return policy_name(p.policy);
  std::string parts;
  for (const auto& [on, name] : {std::pair{p.tp_compressed, "tp"}, std::pair{p.pp_compressed, "pp"},
                                 std::pair{p.dp_compressed, "dp"}})
    if (on) parts += (parts.empty() ? "" : "+") + std::string(name);
  return "auto:" + (parts.empty() ? std::string("none") : parts);
}

std::string json_prediction(const Prediction& p, double speedup) {
  char buf[896];
  std::snprintf(buf, sizeof buf,
                "{\"layout\": %s, \"tp\": %d, \"pp\": %d, \"dp\": %d, \"sp\": %s, "
                "\"policy\": \"%s\", \"microbatches\": %d, \"step_ms\": %.4f, "
                "\"tokens_per_s\": %.1f, \"mfu\": %.5f, \"compute_ms\": %.4f, "
                "\"bubble_ms\": %.4f, \"comm_ms\": %.4f, \"exposed_comm_ms\": %.4f, "
                "\"comm_share\": %.5f, \"tp_ms\": %.4f, \"pp_ms\": %.4f, \"dp_ms\": %.4f, "
                "\"codec_ms\": %.4f, \"tp_wire_mb\": %.4f, \"tp_compressed\": %s, "
                "\"pp_compressed\": %s, \"dp_compressed\": %s, \"speedup_vs_none\": %.5f}",
                json_string(p.layout.name()).c_str(), p.layout.tp, p.layout.pp, p.layout.dp,
                p.layout.sp ? "true" : "false", policy_name(p.policy), p.microbatches, p.step_ms,
                p.tokens_per_s, p.mfu, p.compute_ms, p.bubble_ms, p.comm_ms, p.exposed_comm_ms,
                p.comm_share(), p.tp_ms, p.pp_ms, p.dp_ms, p.codec_ms, p.tp_wire_mb,
                p.tp_compressed ? "true" : "false", p.pp_compressed ? "true" : "false",
                p.dp_compressed ? "true" : "false", speedup);
  return buf;
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const taco::Config config = taco::load_config_file(o.config, o.overrides);
  Cluster cluster = load_cluster_file(o.cluster);
  std::string codec_row;
  if (!o.codec_json.empty())
    cluster.codecs["taco"] = taco_speed_from_bench_json(
        o.codec_json, tp_message_bytes(config, cluster), cluster.dtype_bytes, &codec_row);
  std::vector<Layout> layouts = o.layouts;
  if (layouts.empty()) {
    const int world = o.world > 0 ? o.world : cluster.rank_slots();
    if (world > cluster.rank_slots())
      throw UserError("--world: " + std::to_string(world) + " ranks do not fit " + o.cluster +
                      "'s " + std::to_string(cluster.rank_slots()) + " rank slots");
    layouts = layouts_for(config, cluster, world);
    if (layouts.empty())
      throw UserError(o.config + ": no layout of " + std::to_string(world) +
                      " ranks fits this model (tp must divide model.n_head, pp model.n_layer, "
                      "dp x micro_batch_size x seq_len train.global_batch_tokens)");
  }
  const bool can_compress = cluster.codecs.count("taco") > 0;
  struct Row {
    Prediction p;
    double speedup;
  };
  std::vector<Row> rows;
  for (const Layout& l : layouts) {
    const Prediction none = predict(config, cluster, l, Policy::none);
    rows.push_back({none, 1.0});
    if (l.tp > 1 && can_compress) {
      const Prediction taco = predict(config, cluster, l, Policy::taco);
      rows.push_back({taco, none.step_ms / taco.step_ms});
    }
    if ((l.tp > 1 || l.pp > 1 || l.dp > 1) && can_compress) {
      const Prediction automatic = predict(config, cluster, l, Policy::automatic);
      rows.push_back({automatic, none.step_ms / automatic.step_ms});
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.p.step_ms < b.p.step_ms; });

  std::printf("taco-plan: %s on %s (%s), %lld tokens per step%s\n", o.config.c_str(),
              cluster.name.c_str(), o.cluster.c_str(), (long long)config.train.global_batch_tokens,
              can_compress ? "" : "; no codec speeds in the cluster file, taco not planned");
  if (!codec_row.empty())
    std::printf("codec speeds from %s: %s\n", o.codec_json.c_str(), codec_row.c_str());
  std::printf("%-18s %-13s %4s %10s %12s %6s %6s %10s %9s %9s %9s %9s %8s\n", "layout", "codec",
              "mb", "ms/step", "tokens/s", "MFU", "comm", "exposed", "tp ms", "pp ms", "dp ms",
              "bubble", "speedup");
  for (const Row& r : rows) {
    const Prediction& p = r.p;
    std::printf(
        "%-18s %-13s %4d %10.2f %12.0f %5.1f%% %5.1f%% %10.2f %9.2f %9.2f %9.2f %9.2f "
        "%7.2fx\n",
        p.layout.name().c_str(), policy_label(p).c_str(), p.microbatches, p.step_ms, p.tokens_per_s,
        100 * p.mfu, 100 * p.comm_share(), p.exposed_comm_ms, p.tp_ms, p.pp_ms, p.dp_ms,
        p.bubble_ms, r.speedup);
  }

  if (o.json.empty()) return 0;
  std::ofstream out(o.json);
  if (!out) throw UserError("--json: cannot write " + o.json);
  out << "{\"tool\": \"taco-plan\", \"config\": " << json_string(o.config)
      << ", \"cluster\": " << json_string(o.cluster)
      << ", \"cluster_name\": " << json_string(cluster.name)
      << ", \"tokens_per_step\": " << config.train.global_batch_tokens << ",\n \"predictions\": [";
  for (size_t i = 0; i < rows.size(); ++i)
    out << (i ? ",\n  " : "\n  ") << json_prediction(rows[i].p, rows[i].speedup);
  out << "],\n \"sweep_link\": " << json_string(cluster.intra_node) << ",\n \"sweep\": [";
  bool first = true;
  for (double gbps : o.sweep) {
    Cluster swept = cluster;
    swept.links[cluster.intra_node].bandwidth_GBps = gbps;
    for (const Layout& l : layouts) {
      if (l.tp < 2 || !can_compress) continue;
      const Prediction none = predict(config, swept, l, Policy::none);
      const Prediction taco = predict(config, swept, l, Policy::taco);
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "{\"bandwidth_GBps\": %.4g, \"layout\": %s, \"none_ms\": %.4f, "
                    "\"taco_ms\": %.4f, \"speedup\": %.5f}",
                    gbps, json_string(l.name()).c_str(), none.step_ms, taco.step_ms,
                    none.step_ms / taco.step_ms);
      out << (first ? "\n  " : ",\n  ") << buf;
      first = false;
    }
  }
  out << "]}\n";
  if (!out) throw UserError("--json: cannot write " + o.json);
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return taco::run_tool("taco-plan", [&] { return run(argc, argv); });
}
