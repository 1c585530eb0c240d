// tools/plan (taco-plan): the cluster file's checks and one-line errors, and the step-time
// model on a model small enough to predict by hand (the arithmetic is in each test's comments).
#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"
#include "tools/plan/plan.h"

namespace taco::plan {
namespace {

// 2 layers, d_model 128, T 16, vocab 64; one micro-batch of 1 x 16 tokens per step.
Config tiny_model(int global_tokens = 16) {
  return load_config_text(
      "model: { n_layer: 2, n_head: 2, d_model: 128, seq_len: 16, vocab_size: 64 }\n"
      "train: { micro_batch_size: 1, global_batch_tokens: " +
          std::to_string(global_tokens) + " }\n",
      "tiny.yaml");
}

// Two ranks' worth of devices, 1 GFLOP/s each, a 1 GB/s link with 1 us a message, fp32.
const char* const kCluster =
    "name: hand\n"
    "gpus_per_node: 2\n"
    "dtype_bytes: 4\n"
    "compute_tflops: 0.001\n"
    "intra_node: shared_memory\n"
    "links:\n"
    "  shared_memory: { bandwidth_GBps: 1, latency_us: 1 }\n"
    "codecs:\n"
    "  taco: { encode_GBps: 1, decode_GBps: 1 }\n";

std::string error_of(const std::string& text) {
  try {
    load_cluster_text(text, "c.yaml");
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "(no error)";
}

std::string cluster_with(const std::string& from, const std::string& to) {
  std::string text = kCluster;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(PlanCluster, LoadsEveryKey) {
  const Cluster c = load_cluster_text(kCluster, "c.yaml");
  EXPECT_EQ(c.name, "hand");
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.gpus_per_node, 2);
  EXPECT_EQ(c.dtype_bytes, 4);
  EXPECT_DOUBLE_EQ(c.links.at("shared_memory").bandwidth_GBps, 1);
  EXPECT_DOUBLE_EQ(c.codecs.at("taco").decode_GBps, 1);
  EXPECT_EQ(c.intra_node, "shared_memory");
  EXPECT_EQ(c.inter_node, "shared_memory");  // one node: no level of its own
}

TEST(PlanCluster, BadInputIsOneLineWithFileLineKeyAndExpectation) {
  EXPECT_EQ(error_of(cluster_with("name: hand\n", "name: hand\ngpu_per_node: 8\n")),
            "c.yaml:2: gpu_per_node: unknown key; expected one of name, nodes, gpus_per_node, "
            "ranks_per_gpu, dtype_bytes, compute_tflops, peak_tflops, links, intra_node, "
            "inter_node, codecs, source");
  EXPECT_EQ(error_of(cluster_with("latency_us: 1 }", "latency_us: 1, bw: 3 }")),
            "c.yaml:7: links.shared_memory.bw: unknown key; expected one of bandwidth_GBps, "
            "latency_us, source");
  EXPECT_EQ(error_of(cluster_with("bandwidth_GBps: 1,", "bandwidth_GBps: -25,")),
            "c.yaml:7: links.shared_memory.bandwidth_GBps: -25 is out of range; expected a "
            "number > 0");
  EXPECT_EQ(error_of(cluster_with("latency_us: 1 }", "latency_us: -1 }")),
            "c.yaml:7: links.shared_memory.latency_us: -1 is out of range; expected a "
            "number >= 0");
  EXPECT_EQ(error_of(cluster_with("gpus_per_node: 2", "gpus_per_node: 0")),
            "c.yaml:2: gpus_per_node: 0 is out of range; expected an integer >= 1");
  EXPECT_EQ(error_of(cluster_with("gpus_per_node: 2", "gpus_per_node: eight")),
            "c.yaml:2: gpus_per_node: 'eight' is not an integer; expected an integer >= 1");
  EXPECT_EQ(error_of(cluster_with("shared_memory\nlinks", "nvlink\nlinks")),
            "c.yaml:5: intra_node: 'nvlink' is not a level under links; expected one of "
            "shared_memory");
  EXPECT_EQ(error_of(cluster_with("dtype_bytes: 4", "dtype_bytes: 3")),
            "c.yaml:3: dtype_bytes: 3 is not a wire dtype; expected 2 (bf16, GPU ranks) or 4 "
            "(fp32, CPU ranks)");
  EXPECT_EQ(error_of(std::string(kCluster) + "nodes: 2\n"),
            "c.yaml:10: inter_node: missing with nodes: 2; expected the level under links that "
            "joins nodes");
}

TEST(PlanCluster, LayoutThatDoesNotFitTheGpusNamesTheKey) {
  const Cluster c = load_cluster_text(kCluster, "c.yaml");
  try {
    check_layout(tiny_model(32), c, Layout{2, 1, 2});
    FAIL() << "4 ranks on 2 GPUs accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()),
              "c.yaml:2: gpus_per_node: 1 node(s) x 2 GPU(s) x 1 rank(s) per GPU hold 2 ranks, "
              "layout tp2 pp1 dp2 needs 4; expected at least as many GPUs as ranks");
  }
  EXPECT_THROW(check_layout(tiny_model(), c, Layout{1, 1, 2}), UserError);  // 16 tokens, dp 2
  EXPECT_THROW(check_layout(tiny_model(), c, Layout{1, 3, 1}), UserError);  // 2 layers
}

TEST(PlanModel, TensorParallelStepByHand) {
  const Config cfg = tiny_model();
  const Cluster c = load_cluster_text(kCluster, "c.yaml");
  // Parameters at tp 2 (vocab padded to 256): 256*128 + 16*128 + 2*(12*128^2 + 13*128) + 2*128
  // = 431616; FLOPs per token 6*431616 + 6*2*16*128 = 2614272; 16 tokens over 2 ranks at
  // 1 GFLOP/s: 20.914176 ms.
  const Prediction none = predict(cfg, c, Layout{2, 1, 1}, Policy::none);
  EXPECT_NEAR(none.compute_ms, 20.914176, 1e-9);
  // 10 all-reduces (4 per block, embed.fwd, head.in.bwd) of 16 x 128 fp32 = 8192 B:
  // 2 (p-1) (1 us + 4096 B / 1 GB/s) = 10.192 us each; the cross-entropy's two of 64 B:
  // 2 x 2 (1 us + 32 ns) = 4.128 us. tp: 106.048 us.
  EXPECT_NEAR(none.tp_ms, 0.106048, 1e-9);
  EXPECT_NEAR(none.step_ms, 21.020224, 1e-9);
  EXPECT_NEAR(none.comm_ms, none.exposed_comm_ms, 1e-12);
  EXPECT_NEAR(none.tokens_per_s, 16 / 21.020224e-3, 1e-6);
  // taco: a chunk of 8 rows x 128 is 48 + 1024 B (+ pad to 1072) + 8 groups x 8 B = 1136 B
  // on the wire: 2 (1 us + 1.136 us) = 4.272 us; codec (8192 + 4096) / 1 GB/s + 2 x 8192 /
  // 1 GB/s = 28.672 us; x 10 + 4.128 = 333.568 us.
  const Prediction taco = predict(cfg, c, Layout{2, 1, 1}, Policy::taco);
  EXPECT_NEAR(taco.tp_ms, 0.333568, 1e-9);
  EXPECT_NEAR(taco.codec_ms, 0.28672, 1e-9);
  EXPECT_NEAR(taco.step_ms, 20.914176 + 0.333568, 1e-9);
  EXPECT_NEAR(taco.tp_wire_mb, 10 * 2 * 1136 / 1e6, 1e-12);
  // SP moves the same slots in as many steps; the replicated gradients (LayerNorms, final
  // LayerNorm, positions: (4*128*2 + 2*128 + 16*128) x 4 B = 13312 B) add one all-reduce:
  // 2 (1 us + 6656 ns) = 15.312 us.
  const Prediction sp = predict(cfg, c, Layout{2, 1, 1, true}, Policy::none);
  EXPECT_NEAR(sp.tp_ms, 0.106048 + 0.015312, 1e-9);
}

TEST(PlanModel, PipelineBubbleAndTiedEmbeddingByHand) {
  const Config cfg = tiny_model(32);  // two micro-batches per step
  const Cluster c = load_cluster_text(kCluster, "c.yaml");
  // tp 1: vocab padded to 64, 407040 parameters, 2466816 FLOPs per token; 32 tokens over 2
  // ranks: 39.469056 ms a rank, 19.734528 per micro-batch. Each micro-batch sends its
  // activation and receives its gradient: 2 x (1 us + 8192 ns) = 18.384 us. 1F1B: m + pp - 1
  // = 3 slots of 19.752912 ms; the tied embedding's all-reduce of 64 x 128 x 4 B = 32768 B
  // between the two stages: 2 (1 us + 16.384 us) = 34.768 us.
  const Prediction p = predict(cfg, c, Layout{1, 2, 1}, Policy::none);
  EXPECT_EQ(p.microbatches, 2);
  EXPECT_NEAR(p.bubble_ms, 19.752912, 1e-9);
  EXPECT_NEAR(p.step_ms, 3 * 19.752912 + 0.034768, 1e-9);
  EXPECT_NEAR(p.pp_ms, 3 * 0.018384 + 0.034768, 1e-9);
}

// codec: auto compresses a site where its predicted time beats the native one by the margin
// (0.1), as the trainer decides: never on the 1 GB/s link, always on a 1 MB/s one.
TEST(PlanModel, AutoCompressesOnlyWhereItIsPredictedToPay) {
  const Cluster fast = load_cluster_text(kCluster, "c.yaml");
  const Cluster slow =
      load_cluster_text(cluster_with("bandwidth_GBps: 1,", "bandwidth_GBps: 0.001,"), "c.yaml");
  // tp = 2, fast: native 10.192 us an all-reduce against 4.272 + 28.672 us compressed.
  const Config cfg = tiny_model();
  const Prediction none = predict(cfg, fast, Layout{2, 1, 1}, Policy::none);
  const Prediction fast_auto = predict(cfg, fast, Layout{2, 1, 1}, Policy::automatic);
  EXPECT_FALSE(fast_auto.tp_compressed);
  EXPECT_DOUBLE_EQ(fast_auto.step_ms, none.step_ms);
  // Slow: native 2 (1 us + 4.096 ms) = 8.194 ms against 2 (1 us + 1.136 ms) + 28.672 us:
  // taco's time exactly.
  const Prediction slow_auto = predict(cfg, slow, Layout{2, 1, 1}, Policy::automatic);
  const Prediction slow_taco = predict(cfg, slow, Layout{2, 1, 1}, Policy::taco);
  EXPECT_TRUE(slow_auto.tp_compressed);
  EXPECT_FALSE(slow_auto.pp_compressed);
  EXPECT_DOUBLE_EQ(slow_auto.tp_ms, slow_taco.tp_ms);
  EXPECT_DOUBLE_EQ(slow_auto.codec_ms, slow_taco.codec_ms);
  EXPECT_LT(slow_auto.step_ms, predict(cfg, slow, Layout{2, 1, 1}, Policy::none).step_ms);
  EXPECT_STREQ(policy_name(Policy::automatic), "auto");

  // pp = 2 (two micro-batches): a 16 x 128 fp32 message is 8192 B, taco's 48 + 2048 + 16 x 8 =
  // 2224 B. Fast: native 1 + 8.192 us against 8.192 + 1 + 2.224 + 8.192 us: native.
  const Config two = tiny_model(32);
  const Prediction pp_fast = predict(two, fast, Layout{1, 2, 1}, Policy::automatic);
  EXPECT_FALSE(pp_fast.pp_compressed);
  EXPECT_DOUBLE_EQ(pp_fast.pp_ms, predict(two, fast, Layout{1, 2, 1}, Policy::none).pp_ms);
  // Slow: native 1 us + 8.192 ms against 2.225 ms + 16.384 us: compressed. A micro-batch's two
  // messages 2 x 2.225 + 2 x 0.016384 = 4.482768 ms, 3 slots, plus the tied embedding's
  // all-reduce 2 (1 us + 16.384 ms) = 32.770 ms.
  const Prediction pp_slow = predict(two, slow, Layout{1, 2, 1}, Policy::automatic);
  EXPECT_TRUE(pp_slow.pp_compressed);
  EXPECT_FALSE(pp_slow.tp_compressed);
  EXPECT_NEAR(pp_slow.pp_ms, 3 * 4.482768 + 32.770, 1e-9);
  EXPECT_NEAR(pp_slow.codec_ms, 3 * 0.032768, 1e-9);

  // dp = 2: the flat gradient message, 407040 fp32 values (1628160 B), in two chunks of 203520
  // values: 48 + 203520 + 1590 groups x 8 B = 216288 B on the wire each. Fast: native
  // 2 (1 us + 814.08 us) = 1.63016 ms against 2 (1 us + 216.288 us) + codec (2442240 +
  // 3256320 B at 1 GB/s = 5.69856 ms): native. Slow: native 2 (1 us + 814.08 ms) against
  // 2 (1 us + 216.288 ms) + 5.69856 ms = 438.27656 ms: compressed.
  EXPECT_FALSE(predict(two, fast, Layout{1, 1, 2}, Policy::automatic).dp_compressed);
  const Prediction dp_slow = predict(two, slow, Layout{1, 1, 2}, Policy::automatic);
  EXPECT_TRUE(dp_slow.dp_compressed);
  EXPECT_NEAR(dp_slow.dp_ms, 2 * (1e-3 + 216.288) + 5.69856, 1e-9);
  EXPECT_NEAR(dp_slow.codec_ms, 5.69856, 1e-9);
}

TEST(PlanModel, DataParallelGradientSumAndSharedDevices) {
  const Config cfg = tiny_model(32);
  Cluster c = load_cluster_text(kCluster, "c.yaml");
  // dp 2: one all-reduce of 407040 fp32 gradients (1628160 B): 2 (1 us + 814080 ns).
  const Prediction p = predict(cfg, c, Layout{1, 1, 2}, Policy::none);
  EXPECT_NEAR(p.dp_ms, 2 * (1e-3 + 0.81408), 1e-9);
  EXPECT_NEAR(p.compute_ms, 39.469056, 1e-9);
  // The same 2 ranks on one device take turns: twice the compute.
  c.gpus_per_node = 1;
  c.ranks_per_gpu = 2;
  EXPECT_NEAR(predict(cfg, c, Layout{1, 1, 2}, Policy::none).compute_ms, 2 * 39.469056, 1e-9);
}

TEST(PlanModel, EveryLayoutOfTheWorldIsListed) {
  const Cluster c =
      load_cluster_text(cluster_with("gpus_per_node: 2", "gpus_per_node: 4"), "c.yaml");
  // 4 ranks: tp 1, 2 (SP both ways); pp 1, 2; dp what is left, when 64 tokens split.
  std::vector<std::string> names;
  for (const Layout& l : layouts_for(tiny_model(64), c, 4)) names.push_back(l.name());
  EXPECT_EQ(names, (std::vector<std::string>{"tp1 pp1 dp4", "tp1 pp2 dp2", "tp2 pp1 dp2",
                                             "tp2 pp1 dp2 sp", "tp2 pp2 dp1", "tp2 pp2 dp1 sp"}));
}

TEST(PlanCodecJson, TakesTheNearestSizeOrTheFp32Speeds) {
  const std::string dir = test::scratch_dir("plan_codec_json");
  // taco-bench codec --json on a GPU: one row per codec and message size.
  test::write_file(dir + "/gpu.json",
                   "{\"bench\": \"codec\", \"results\": [\n"
                   " {\"message_bytes\": 1000000, \"codec\": \"taco e4m3 g128 dual hidden\", "
                   "\"encode_gbps\": 300, \"decode_gbps\": 250},\n"
                   " {\"message_bytes\": 1000000, \"codec\": \"fp8_block e4m3 g128 hidden\", "
                   "\"encode_gbps\": 1, \"decode_gbps\": 1},\n"
                   " {\"message_bytes\": 16000000, \"codec\": \"taco e4m3 g128 dual hidden\", "
                   "\"encode_gbps\": 1900, \"decode_gbps\": 2100}]}\n");
  CodecSpeed s = taco_speed_from_bench_json(dir + "/gpu.json", 3e6, 2);  // nearer 1 MB
  EXPECT_DOUBLE_EQ(s.encode_GBps, 300);
  EXPECT_DOUBLE_EQ(s.decode_GBps, 250);
  s = taco_speed_from_bench_json(dir + "/gpu.json", 25e6, 2);
  EXPECT_DOUBLE_EQ(s.encode_GBps, 1900);
  // --cpu: no sizes; fp32 speeds for CPU ranks, bf16 ones otherwise.
  test::write_file(dir + "/cpu.json",
                   "{\"bench\": \"codec\", \"results\": [{\"codec\": \"taco e4m3 g128 dual "
                   "hidden\", \"encode_gbps\": 7, \"decode_gbps\": 9, \"encode_f32_gbps\": 11, "
                   "\"decode_f32_gbps\": 14}]}\n");
  EXPECT_DOUBLE_EQ(taco_speed_from_bench_json(dir + "/cpu.json", 5e5, 4).decode_GBps, 14);
  EXPECT_DOUBLE_EQ(taco_speed_from_bench_json(dir + "/cpu.json", 5e5, 2).decode_GBps, 9);
  test::write_file(dir + "/none.json", "{\"results\": []}\n");
  try {
    taco_speed_from_bench_json(dir + "/none.json", 5e5, 4);
    FAIL() << "a file without taco accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir +
                  "/none.json: no 'taco e4m3 g128 dual hidden' row with positive encode and "
                  "decode speeds; expected taco-bench codec --json output that measured taco");
  }
}

TEST(PlanTool, BadClusterFileExitsTwoWithOneLine) {
  const std::string plan =
      test::binary_dir() + "/taco-plan " + test::source_dir() + "/configs/tiny-cpu.yaml --cluster ";
  // A layout that needs more GPUs than the file describes.
  const std::string cpu = test::source_dir() + "/configs/clusters/cpu-2core.yaml";
  const auto big = test::run_command(plan + cpu + " --layout 2x2x2 2>&1");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_EQ(big.output, "taco-plan: error: " + cpu +
                            ":7: gpus_per_node: 1 node(s) x 2 GPU(s) x 2 rank(s) per GPU hold 4 "
                            "ranks, layout tp2 pp2 dp2 needs 8; expected at least as many GPUs "
                            "as ranks\n");
  const std::string dir = test::scratch_dir("plan_tool");
  test::write_file(dir + "/bad.yaml", cluster_with("bandwidth_GBps: 1,", "bandwidth_GBps: -3,"));
  const auto r = test::run_command(test::binary_dir() + "/taco-plan " + test::source_dir() +
                                   "/configs/tiny-cpu.yaml --cluster " + dir + "/bad.yaml 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "taco-plan: error: " + dir +
                "/bad.yaml:7: links.shared_memory.bandwidth_GBps: -3 is out of range; expected "
                "a number > 0\n");
}

TEST(PlanTool, SweepJsonFeedsThePlot) {
  const std::string dir = test::scratch_dir("plan_sweep");
  const std::string src = test::source_dir();
  const auto r = test::run_command(test::binary_dir() + "/taco-plan " + src +
                                   "/configs/tiny-cpu.yaml --cluster " + src +
                                   "/configs/clusters/cpu-2core.yaml --layout 2x1x1 --sweep 1,1000"
                                   " --json " +
                                   dir + "/plan.json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string json = test::read_file(dir + "/plan.json");
  EXPECT_NE(json.find("\"bandwidth_GBps\": 1000, \"layout\": \"tp2 pp1 dp1\""), std::string::npos)
      << json;
  // Without a PNG the plot script prints its numbers: taco gains on the slow link.
  const auto table =
      test::run_command("python3 " + src + "/tools/bench/plan_plot.py " + dir + "/plan.json 2>&1");
  EXPECT_EQ(table.exit_code, 0) << table.output;
  EXPECT_NE(table.output.find("tp2 pp1 dp1: 1 GB/s "), std::string::npos) << table.output;
}

TEST(PlanTool, ShippedClusterFilesLoadAndPlan) {
  const std::string src = test::source_dir();
  // The multi-node files plan GPT 1.3B (64 sequences a step: 1024 ranks need dp <= 64).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"8xh200-nvlink", "gpt2-124m"},    {"8gpu-pcie-nop2p", "gpt2-124m"},
      {"4x8-h200-ib400", "gpt-1.3b"},    {"128x8-h200-ib400", "gpt-1.3b"},
      {"h100-host-staged", "gpt2-124m"}, {"cpu-2core", "tiny-cpu"}};
  for (const auto& [name, model] : cases) {
    const std::string cluster = src + "/configs/clusters/" + name + ".yaml";
    const std::string config = src + "/configs/" + model + ".yaml";
    const auto r = test::run_command(test::binary_dir() + "/taco-plan " + config + " --cluster " +
                                     cluster + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find(" taco "), std::string::npos) << name << "\n" << r.output;
  }
}

}  // namespace
}  // namespace taco::plan
