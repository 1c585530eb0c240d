// codec: auto under mpirun -np 2 (compression/policy.h, parallel/codec_autotune.h): the ranks of a
// group agree on every decision even when their own measurements disagree; a fast link keeps the
// native collective and a slow one compresses (forced with the TACO_AUTO_LINK test hook); the
// measured path decides alike on every rank; pipeline messages are decided when prepared (and go
// natively when not); and a training run with codec: auto, over tp or over pp, has exactly the
// losses of the codec it chose, written out explicitly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "compression/policy.h"
#include "engine/config/config.h"
#include "engine/train/trainer.h"
#include "parallel/compressed_site_comm.h"
#include "parallel/mpi_communicator.h"
#include "tests/mpi/mpi_test_fixture.h"
#include "tests/mpi/tiny_tp2_config.h"

namespace taco {
namespace {

// Links for TACO_AUTO_LINK (latency in us : GB/s). Over the fast one (100 GB/s, 1 us) no codec
// can pay for itself on a CPU; over the slow one (1 MB/s, 1 ms) any codec that halves the bytes
// does.
constexpr const char* kFastLink = "1:100";
constexpr const char* kSlowLink = "1000:0.001";

// Sets TACO_AUTO_LINK for the scope ("" unsets it): read when a group makes its first decision.
class LinkHook {
 public:
  explicit LinkHook(const std::string& link) {
    if (link.empty())
      unsetenv("TACO_AUTO_LINK");
    else
      setenv("TACO_AUTO_LINK", link.c_str(), 1);
  }
  ~LinkHook() { unsetenv("TACO_AUTO_LINK"); }
};

// codec: auto everywhere, candidate taco g64; 2 layers, d_model 512.
CompressionPolicy auto_policy() {
  CompressionSection section;
  section.default_spec.codec_auto = true;
  section.default_spec.group = 64;
  return CompressionPolicy(section, 2, 512, "test.yaml");
}

std::vector<float> input_of(int rank, size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37 * double(i) + 1.3 * rank) * 1e-2;
  return x;
}

Tensor host_tensor(std::vector<float>& v) {
  return Tensor{v.data(), DType::f32, DeviceKind::cpu, v.size()};
}

// Rank 0's value of each double in `v`, on every rank.
std::vector<double> rank0s(std::vector<double> v) {
  MPI_Bcast(v.data(), int(v.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

class CodecAuto : public test::MpiTest {
 protected:
  void SetUp() override {
    test::MpiTest::SetUp();
    world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
  }
  std::unique_ptr<MpiCommunicator> world_;
};

// Rank 0 believes in a fast link, rank 1 in a slow one: each decides on the slowest rank's
// numbers, so both compress, with the same predicted times, and the compressed all-reduce leaves
// both ranks bit-identical (a disagreement would make one rank decode what the other sent
// natively, and fail or hang).
TEST_F(CodecAuto, RanksAgreeEvenWhenTheirMeasurementsDisagree) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const LinkHook hook(world_rank_ == 0 ? kFastLink : kSlowLink);
  const CompressionPolicy policy = auto_policy();
  CompressedSiteComm door(*world_, policy);
  std::vector<float> x = input_of(world_rank_, 64 * 512);
  door.all_reduce(host_tensor(x), 64, Site::attn_out_fwd, 1);

  EXPECT_EQ(door.stats()[Site::attn_out_fwd].compressed_calls, 1);
  ASSERT_NE(door.autotune(), nullptr);
  const std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].prediction.compress);
  const std::vector<double> mine = {d[0].prediction.compressed.encode_s,
                                    d[0].prediction.compressed.wire_s,
                                    d[0].prediction.compressed.decode_s, d[0].prediction.native_s};
  EXPECT_EQ(rank0s(mine), mine);
  std::vector<double> values(x.begin(), x.end());
  EXPECT_EQ(rank0s(values), values);
  // The slow rank's native all-reduce: 2 (p - 1) (1 ms + 64 KiB / 1 MB/s), about 67 ms.
  EXPECT_NEAR(d[0].prediction.native_s, 2 * (1e-3 + 64 * 512 * 4 / 2 / 1e6), 1e-9);
}

// Both ranks on a fast link: the native all-reduce, exactly MPI's sum. On a slow link: the
// candidate, within FP8's error and not exact. A second message of the same key reuses the
// decision (no new one), a new layer gets its own.
TEST_F(CodecAuto, FastLinkStaysNativeSlowLinkCompresses) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const CompressionPolicy policy = auto_policy();
  for (const char* link : {kFastLink, kSlowLink}) {
    SCOPED_TRACE(link);
    const LinkHook hook(link);
    CompressedSiteComm door(*world_, policy);
    const bool slow = std::string(link) == kSlowLink;
    for (int call = 0; call < 2; ++call) {
      std::vector<float> x = input_of(world_rank_, 32 * 512);
      door.all_reduce(host_tensor(x), 32, Site::mlp_out_fwd, 0);
      for (size_t i = 0; i < x.size(); i += 101) {
        const double exact = double(input_of(0, x.size())[i]) + input_of(1, x.size())[i];
        if (slow)
          EXPECT_NEAR(x[i], exact, 0.1 * 2e-2) << i;  // FP8: a few % of the group's scale
        else
          EXPECT_EQ(x[i], float(exact)) << i;  // one fp32 add, as MPI does it
      }
    }
    std::vector<float> y = input_of(world_rank_, 32 * 512);
    door.all_reduce(host_tensor(y), 32, Site::mlp_out_fwd, 1);
    EXPECT_EQ(door.stats()[Site::mlp_out_fwd].compressed_calls, slow ? 3 : 0);
    const std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
    ASSERT_EQ(d.size(), 2u);  // (mlp.out.fwd, layer 0) and (mlp.out.fwd, layer 1)
    EXPECT_EQ(d[0].message.layer, 0);
    EXPECT_EQ(d[1].message.layer, 1);
    EXPECT_EQ(d[0].prediction.compress, slow);
    EXPECT_DOUBLE_EQ(door.autotune()->link()->bandwidth_Bps, slow ? 1e6 : 100e9);

    // The table: one row for layers 0-1, the choice at its end.
    const std::string table = auto_decision_table(d, *door.autotune(), policy.auto_margin());
    if (world_rank_ == 0) std::printf("%s", table.c_str());
    EXPECT_NE(table.find("codec: auto on group world (2 ranks)"), std::string::npos) << table;
    EXPECT_NE(table.find("mlp.out.fwd   0-1     all_reduce"), std::string::npos) << table;
    EXPECT_NE(table.find(slow ? "taco e4m3 g64 dual hidden\n" : "  none\n"), std::string::npos)
        << table;
  }
}

// No hook: the group probes its real link and benchmarks the CPU codec; whatever it decides,
// every rank decides the same, and a re-check measures again and still agrees.
TEST_F(CodecAuto, MeasuredDecisionsAreTheSameOnEveryRank) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const LinkHook hook("");
  const CompressionPolicy policy = auto_policy();
  CompressedSiteComm door(*world_, policy);
  for (int round = 0; round < 2; ++round) {
    for (int rows : {4, 256}) {
      std::vector<float> x = input_of(world_rank_, size_t(rows) * 512);
      door.all_reduce(host_tensor(x), rows, Site::attn_in_bwd, 0);
      std::vector<double> values(x.begin(), x.end());
      EXPECT_EQ(rank0s(values), values) << rows;
    }
    const std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
    ASSERT_EQ(d.size(), 2u);
    for (const AutoDecision& one : d) {
      const std::vector<double> mine = {double(one.prediction.compress), one.prediction.native_s,
                                        one.prediction.compressed.total()};
      EXPECT_EQ(rank0s(mine), mine);
      EXPECT_GT(one.prediction.native_s, 0);
      EXPECT_GT(one.prediction.compressed.encode_s, 0);  // the bench ran
      EXPECT_EQ(one.previous.has_value(), round == 1);
    }
    const LinkModel link = *door.autotune()->link();
    EXPECT_EQ(rank0s({link.latency_s, link.bandwidth_Bps}),
              (std::vector<double>{link.latency_s, link.bandwidth_Bps}));
    EXPECT_GE(link.latency_s, 0);
    if (world_rank_ == 0)
      std::printf("%s", auto_decision_table(d, *door.autotune(), policy.auto_margin()).c_str());
    door.autotune()->recheck();
  }
}

// A send's two ends make different calls, so a pipeline message cannot be decided inside one:
// never prepared, it goes natively, and the decision says so.
TEST_F(CodecAuto, PointToPointMessagesNeverPreparedGoNatively) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const LinkHook hook(kSlowLink);  // compression would pay, were it decided
  const CompressionPolicy policy = auto_policy();
  CompressedSiteComm door(*world_, policy);
  std::vector<float> x = input_of(world_rank_, 4096);
  if (world_rank_ == 0) door.send(host_tensor(x), 1, Site::pp_act, -1);
  if (world_rank_ == 1) door.recv(host_tensor(x), 0, Site::pp_act, -1);
  EXPECT_EQ(x, input_of(0, 4096));  // bit-exact: native
  EXPECT_EQ(door.stats()[Site::pp_act].compressed_calls, 0);
  const std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_FALSE(d[0].tuned);
  EXPECT_FALSE(d[0].prediction.compress);
  EXPECT_FALSE(door.autotune()->p2p_link().has_value());  // nothing measured for it
  const std::string table = auto_decision_table(d, *door.autotune(), policy.auto_margin());
  EXPECT_NE(table.find("none (point-to-point: not prepared)"), std::string::npos) << table;
}

// Prepared by both ranks (as the trainer does before the first step), a pipeline message
// follows the link: natively and exact on a fast one, through the candidate on a slow one, for
// a send/recv and for a send_recv pair alike (one decision per site, whatever the op). A
// recheck decides it again at once, on both ranks.
TEST_F(CodecAuto, PreparedPointToPointMessagesFollowTheLink) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const CompressionPolicy policy = auto_policy();
  constexpr size_t kRows = 8, kCols = 512, n = kRows * kCols;
  for (const char* link : {kFastLink, kSlowLink}) {
    SCOPED_TRACE(link);
    const LinkHook hook(link);
    const bool slow = std::string(link) == kSlowLink;
    CompressedSiteComm door(*world_, policy);
    std::vector<float> like(n);
    for (Site site : {Site::pp_act, Site::pp_grad})
      door.prepare_point_to_point(site, host_tensor(like));
    door.prepare_point_to_point(Site::pp_act, host_tensor(like));  // a second time: kept
    std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
    ASSERT_EQ(d.size(), 2u);
    for (const AutoDecision& one : d) {
      EXPECT_TRUE(one.tuned);
      EXPECT_EQ(one.prediction.compress, slow);
      EXPECT_EQ(one.message.op, CommOp::send_recv);
      // One message of n fp32 values each way: alpha + bytes / B.
      EXPECT_NEAR(one.prediction.native_s, slow ? 1e-3 + n * 4 / 1e6 : 1e-6 + n * 4 / 100e9, 1e-12);
    }
    EXPECT_DOUBLE_EQ(door.autotune()->p2p_link()->bandwidth_Bps, slow ? 1e6 : 100e9);
    EXPECT_FALSE(door.autotune()->link().has_value());  // no collective was decided

    // Rank 0 sends an activation; then both exchange a gradient and an activation.
    std::vector<float> x = input_of(world_rank_, n);
    if (world_rank_ == 0) door.send(host_tensor(x), 1, Site::pp_act, -1);
    if (world_rank_ == 1) door.recv(host_tensor(x), 0, Site::pp_act, -1);
    std::vector<float> out = input_of(world_rank_ + 2, n), in(n);
    if (world_rank_ == 0)
      door.send_recv(host_tensor(out), 1, Site::pp_act, host_tensor(in), 1, Site::pp_grad);
    else
      door.send_recv(host_tensor(out), 0, Site::pp_grad, host_tensor(in), 0, Site::pp_act);
    const std::vector<float> sent = input_of(0, n), peer_out = input_of(3 - world_rank_, n);
    for (size_t i = 0; i < n; i += 97) {
      if (slow) {
        EXPECT_NEAR(x[i], sent[i], 0.1 * 1e-2) << i;  // FP8: a few % of the group's scale
        EXPECT_NEAR(in[i], peer_out[i], 0.1 * 1e-2) << i;
      } else {
        EXPECT_EQ(x[i], sent[i]) << i;
        EXPECT_EQ(in[i], peer_out[i]) << i;
      }
    }
    const int64_t compressed =
        door.stats()[Site::pp_act].compressed_calls + door.stats()[Site::pp_grad].compressed_calls;
    // A send or a recv, then the send_recv's two halves (each counted at its own site).
    EXPECT_EQ(compressed, slow ? 3 : 0);
    EXPECT_TRUE(door.autotune()->take_new_decisions().empty());  // the sends only read them

    door.autotune()->recheck();
    d = door.autotune()->take_new_decisions();
    ASSERT_EQ(d.size(), 2u);
    for (const AutoDecision& one : d) {
      ASSERT_TRUE(one.previous.has_value());
      EXPECT_EQ(*one.previous, slow);
      EXPECT_EQ(one.prediction.compress, slow);
    }
  }
}

// No hook: the ring of send_recv calls measures the link; both ranks hold the same link and
// the same decision.
TEST_F(CodecAuto, MeasuredPointToPointDecisionsAreTheSameOnEveryRank) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks";
  const LinkHook hook("");
  const CompressionPolicy policy = auto_policy();
  CompressedSiteComm door(*world_, policy);
  std::vector<float> like(64 * 512);
  door.prepare_point_to_point(Site::pp_grad, host_tensor(like));
  const std::vector<AutoDecision> d = door.autotune()->take_new_decisions();
  ASSERT_EQ(d.size(), 1u);
  const std::vector<double> mine = {double(d[0].prediction.compress), d[0].prediction.native_s,
                                    d[0].prediction.compressed.total()};
  EXPECT_EQ(rank0s(mine), mine);
  EXPECT_GT(d[0].prediction.native_s, 0);
  EXPECT_GT(d[0].prediction.compressed.encode_s, 0);
  const LinkModel link = *door.autotune()->p2p_link();
  EXPECT_EQ(rank0s({link.latency_s, link.bandwidth_Bps}),
            (std::vector<double>{link.latency_s, link.bandwidth_Bps}));
  if (world_rank_ == 0)
    std::printf("%s", auto_decision_table(d, *door.autotune(), policy.auto_margin()).c_str());
}

// --- training ------------------------------------------------------------------------------

using test::tiny_tp2_config;

std::vector<double> losses(const Config& c) { return Trainer(c, RunContext{}).run().train_loss; }

// codec: auto on every site, forced each way, against the codec it must then have chosen: the
// same losses bit for bit (the same codec on the same messages), and different from the other
// choice (so the comparison can tell them apart). Re-checks every 2 steps change nothing.
TEST_F(CodecAuto, TrainingWithAutoHasTheLossesOfTheCodecItChose) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks (tp = 2)";
  constexpr int kSteps = 6;
  const std::vector<double> none = losses(tiny_tp2_config(kSteps, {}));
  const std::vector<double> taco =
      losses(tiny_tp2_config(kSteps, {"compression.default={codec: taco, group: 32}"}));
  const std::vector<std::string> automatic = {
      "compression.default={codec: auto, candidate: taco, group: 32}",
      "compression.auto_recheck_steps=2"};
  std::vector<double> fast, slow;
  {
    const LinkHook hook(kFastLink);
    fast = losses(tiny_tp2_config(kSteps, automatic));
  }
  {
    const LinkHook hook(kSlowLink);
    slow = losses(tiny_tp2_config(kSteps, automatic));
  }
  EXPECT_EQ(fast, none);
  EXPECT_EQ(slow, taco);
  EXPECT_NE(none, taco);
  for (double loss : slow) EXPECT_TRUE(std::isfinite(loss));
}

// The same over a pipeline (pp = 2, tp = 1): only pp.act and pp.grad can compress, decided
// before the first step; re-checks decide them again between steps.
TEST_F(CodecAuto, PipelineTrainingWithAutoHasTheLossesOfTheCodecItChose) {
  if (world_size_ != 2) GTEST_SKIP() << "needs 2 ranks (pp = 2)";
  constexpr int kSteps = 4;
  const std::vector<std::string> pp2 = {"parallel.tp=1", "parallel.pp=2"};
  auto with = [&](std::vector<std::string> o) {
    o.insert(o.begin(), pp2.begin(), pp2.end());
    return losses(tiny_tp2_config(kSteps, o));
  };
  const std::vector<double> none = with({});
  const std::vector<double> taco = with({"compression.default={codec: taco, group: 32}"});
  const std::vector<std::string> automatic = {
      "compression.default={codec: auto, candidate: taco, group: 32}",
      "compression.auto_recheck_steps=2"};
  std::vector<double> fast, slow;
  {
    const LinkHook hook(kFastLink);
    fast = with(automatic);
  }
  {
    const LinkHook hook(kSlowLink);
    slow = with(automatic);
  }
  EXPECT_EQ(fast, none);
  EXPECT_EQ(slow, taco);
  EXPECT_NE(none, taco);
}

}  // namespace
}  // namespace taco
