// engine/train/site_traffic.h: the trainer's door splits each site's accounting by layer (the
// parts add up to stats(), and start afresh after reset_stats() as stats() does), keeps the worst
// single-message error, and the end-of-run table groups consecutive layers with one codec; a door
// picks up a calibrated group on its next call. The door runs over a stand-in two-rank group whose
// peer holds the same tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/site_traffic.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

// Rank 0 of two, whose peer sends exactly what this rank sends (identical inputs on both).
class MirrorCommunicator final : public Communicator {
 public:
  MirrorCommunicator() : Communicator("mirror") {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "mpi"; }
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp,
                  Stream) override {
    ASSERT_EQ(dtype, DType::f32);
    for (size_t i = 0; i < count; ++i)
      static_cast<float*>(recv)[i] = 2 * static_cast<const float*>(send)[i];
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp,
                      Stream) override {
    ASSERT_EQ(dtype, DType::f32);
    for (size_t i = 0; i < count; ++i)
      static_cast<float*>(recv)[i] = 2 * static_cast<const float*>(send)[i];
  }
  void all_gather(const void* send, void* recv, size_t count, DType dtype, Stream) override {
    const size_t bytes = count * dtype_size(dtype);
    for (int r = 0; r < 2; ++r) std::memmove(static_cast<char*>(recv) + r * bytes, send, bytes);
  }
  void all_to_all(const void* send, void* recv, size_t count, DType dtype, Stream) override {
    // The peer's chunk for this rank equals this rank's own chunk for itself.
    const size_t bytes = count * dtype_size(dtype);
    std::vector<char> mine(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    for (int r = 0; r < 2; ++r)
      std::memcpy(static_cast<char*>(recv) + r * bytes, mine.data(), bytes);
  }
  void send(const void*, size_t, DType, int, int, Stream) override {}
  void recv(void*, size_t, DType, int, int, Stream) override {}
  void send_recv(const void* s, size_t sn, int, void* r, size_t rn, int, DType dtype, int,
                 Stream) override {
    std::memcpy(r, s, std::min(sn, rn) * dtype_size(dtype));
  }
  void broadcast(void*, size_t, DType, int, Stream) override {}
  void barrier(Stream) override {}
};

CompressionSection taco_on_layers(const std::string& layers) {
  CompressionSection c;
  CompressionRule r;
  r.layers = layers;
  r.sites = {"attn.out.fwd"};
  r.spec.codec = CodecKind::taco;
  c.rules = {r};
  return c;
}

TEST(LayeredSiteComm, SplitsEachSitesAccountingByLayerAndResetsWithIt) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  MirrorCommunicator group;
  const CompressionPolicy policy(taco_on_layers("1-2"), 4, 512);
  LayeredSiteComm door(group, policy);
  door.measure_errors(true);
  // [8 tokens, 128 hidden] fp32: one taco group per row.
  // An all-reduce works in place: each call gets fresh activations, not the last call's sum
  // (whose values a second FP8 rounding would barely move).
  const std::vector<float> x0 = test::random_normal(8 * 128, seed);
  std::vector<float> x = x0;
  const Tensor t{x.data(), DType::f32, DeviceKind::cpu, x.size()};
  auto all_reduce = [&](Site site, int layer) {
    x = x0;
    door.all_reduce(t, 8, site, layer);
  };
  for (int layer = 0; layer < 4; ++layer) all_reduce(Site::attn_out_fwd, layer);
  all_reduce(Site::embed_fwd, -1);

  const TrafficByLayer& split = door.layer_traffic();
  ASSERT_EQ(split.size(), 5u);
  // The parts add up to the site's total.
  SiteCommStats sum;
  for (int layer = 0; layer < 4; ++layer) sum += split.at(Site::attn_out_fwd, layer).sums;
  const SiteCommStats& whole = door.stats()[Site::attn_out_fwd];
  EXPECT_EQ(sum.calls, whole.calls);
  EXPECT_EQ(sum.logical_bytes, whole.logical_bytes);
  EXPECT_EQ(sum.wire_bytes, whole.wire_bytes);
  EXPECT_EQ(sum.compressed_calls, 2);
  // Layers 1-2 went through taco, measured: FP8 E4M3 after the transform gives ~2.6e-2
  // (docs/design.md §4); an uncompressed layer has no error and the native codec label.
  for (int layer : {1, 2}) {
    const LayerTraffic& l = split.at(Site::attn_out_fwd, layer);
    EXPECT_EQ(l.codec, "taco e4m3 g128 dual hidden");
    EXPECT_EQ(l.sums.error_samples, 1);
    EXPECT_GT(l.max_rel_err, 0.01);
    EXPECT_LT(l.max_rel_err, 0.04);
    EXPECT_LT(l.sums.wire_bytes, l.sums.logical_bytes / 2);
  }
  EXPECT_EQ(split.at(Site::attn_out_fwd, 0).codec, "native");
  EXPECT_EQ(split.at(Site::attn_out_fwd, 0).sums.error_samples, 0);
  EXPECT_EQ(split.at(Site::embed_fwd, -1).sums.calls, 1);

  // reset_stats() empties both; the next calls start a fresh split.
  door.reset_stats();
  EXPECT_TRUE(door.layer_traffic().empty());
  all_reduce(Site::attn_out_fwd, 3);
  ASSERT_EQ(door.layer_traffic().size(), 1u);
  EXPECT_EQ(door.layer_traffic().keys().front(), SiteLayer(Site::attn_out_fwd, 3));
}

// The door resolves its codecs once; calibration (group: auto) changes the policy, and the next
// call uses the calibrated group: its wire bytes are the two shots' slots of that codec.
TEST(CompressedSiteComm, TheNextCallAfterCalibrationUsesTheCalibratedGroup) {
  CompressionSection c = taco_on_layers("all");
  c.rules[0].spec.group = kAutoGroup;
  c.calibrate_steps = 1;
  CompressionPolicy policy(c, 2, 512);
  MirrorCommunicator group;
  CompressedSiteComm door(group, policy);
  const MessageShape shape{8, 128};
  std::vector<float> x = test::random_normal(size_t(shape.count()), test::fresh_seed());
  const Tensor t{x.data(), DType::f32, DeviceKind::cpu, x.size()};
  // Two shots (all-to-all, all-gather) of one slot each to the one peer.
  auto wire_of = [&](int group) {
    CodecOptions o = policy.configured(1, Site::attn_out_fwd);
    o.group = group;
    o.axis = GroupAxis::hidden;
    const auto codec = make_codec(canonical(o));
    return int64_t(2 * codec->max_encoded_size({shape.rows / 2, shape.cols}, DType::f32));
  };
  ASSERT_NE(wire_of(kUncalibratedGroup), wire_of(32));

  door.all_reduce(t, int(shape.rows), Site::attn_out_fwd, 1);
  EXPECT_EQ(door.stats()[Site::attn_out_fwd].wire_bytes, wire_of(kUncalibratedGroup));
  policy.apply_calibration(Site::attn_out_fwd, 32, GroupAxis::hidden);
  door.reset_stats();
  door.all_reduce(t, int(shape.rows), Site::attn_out_fwd, 1);
  EXPECT_EQ(door.stats()[Site::attn_out_fwd].compressed_calls, 1);
  EXPECT_EQ(door.stats()[Site::attn_out_fwd].wire_bytes, wire_of(32));
}

LayerTraffic traffic(int64_t calls, double err_sq, double max_err, const std::string& codec) {
  LayerTraffic t;
  t.sums.calls = calls;
  t.sums.logical_bytes = 4'000'000 * calls;
  t.sums.wire_bytes = 1'000'000 * calls;
  t.sums.compressed_calls = codec == "native" ? 0 : calls;
  if (err_sq > 0) {
    t.sums.error_samples = 1;
    t.sums.error_sq = err_sq;
    t.sums.signal_sq = 1.0;
    t.max_rel_err = max_err;
  }
  t.codec = codec;
  return t;
}

// The whitespace-separated fields of a row.
std::vector<std::string> fields(const std::string& row) {
  std::vector<std::string> out;
  std::istringstream in(row);
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

// The rows of the table, without its heading (two lines of text, one of column names).
std::vector<std::string> rows(const std::string& table) {
  std::vector<std::string> out;
  size_t at = table.find('\n', table.find('\n', table.find('\n') + 1) + 1);
  while (at != std::string::npos) {
    const size_t next = table.find('\n', at + 1);
    out.push_back(table.substr(at + 1, next == std::string::npos ? next : next - at - 1));
    at = next;
  }
  return out;
}

TEST(TrafficTable, OneRowPerSiteAndLayerRangeWithPooledAndWorstError) {
  TrafficByLayer t;
  const std::string taco = "taco e4m3 g128 dual hidden";
  t.at(Site::attn_out_fwd, 0) = traffic(2, 0, 0, "native");
  t.at(Site::attn_out_fwd, 1) = traffic(2, 1e-4, 0.02, taco);
  t.at(Site::attn_out_fwd, 2) = traffic(2, 9e-4, 0.05, taco);
  t.at(Site::attn_out_fwd, 3) = traffic(2, 0, 0, "native");
  t.at(Site::sp_grad, -1) = traffic(1, 0, 0, "native");
  const std::string table = traffic_table(t, 6, "fp32");
  EXPECT_NE(table.find("over 6 step(s)"), std::string::npos) << table;
  EXPECT_NE(table.find("\nuncompressed in fp32;"), std::string::npos) << table;
  const auto r = rows(table);
  ASSERT_EQ(r.size(), 5u) << table;  // layers 0, 1-2, 3, sp.grad, total
  auto site_and_layers = [](const std::string& row) {
    const auto f = fields(row);
    return f.size() < 2 ? std::string() : f[0] + " " + f[1];
  };
  EXPECT_EQ(site_and_layers(r[0]), "attn.out.fwd 0") << r[0];
  EXPECT_EQ(site_and_layers(r[1]), "attn.out.fwd 1-2") << r[1];
  // Pooled over layers 1-2: sqrt((1e-4 + 9e-4) / 2) = 2.236e-02; the worst message: 5e-2.
  EXPECT_NE(r[1].find("2.236e-02"), std::string::npos) << r[1];
  EXPECT_NE(r[1].find("5.000e-02"), std::string::npos) << r[1];
  EXPECT_NE(r[1].find("4.00"), std::string::npos) << r[1];  // 16 MB over 4 MB
  EXPECT_NE(r[1].find(taco), std::string::npos) << r[1];
  EXPECT_EQ(site_and_layers(r[2]), "attn.out.fwd 3") << r[2];
  EXPECT_EQ(site_and_layers(r[3]), "sp.grad -") << r[3];
  EXPECT_EQ(fields(r[3])[8], "-") << r[3];  // rel err: nothing measured
  EXPECT_EQ(r[4].find("total"), 2u) << r[4];

  // metrics.jsonl: the same rows, errors null where unmeasured.
  const std::string json = traffic_json(t, 6, "fp32");
  EXPECT_NE(json.find("\"steps\": 6, \"dtype\": \"fp32\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"layers\": \"1-2\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"max_rel_err\": 0.05"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rel_err\": null"), std::string::npos) << json;
}

TEST(LayerTraffic, AWorstErrorThatIsNaNStaysNaN) {
  LayerTraffic a = traffic(1, 1e-4, 0.01, "taco");
  a += traffic(1, 1e-4, NAN, "taco");
  a += traffic(1, 1e-4, 0.5, "taco");
  EXPECT_TRUE(std::isnan(a.max_rel_err));
  LayerTraffic b = traffic(1, 0, 0, "native");  // unmeasured first: the first measurement wins
  b += traffic(1, 1e-4, 0.03, "taco");
  EXPECT_DOUBLE_EQ(b.max_rel_err, 0.03);
  EXPECT_EQ(b.codec, "taco");
}

}  // namespace
}  // namespace taco
