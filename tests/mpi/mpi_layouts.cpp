// Every tensor/sequence/pipeline/data-parallel layout trains the same model as one rank: the
// same seed and global batch give the same per-step losses (up to fp32 reduction order), and a
// sharded layer's gradients, gathered, are the single-rank gradients.
//
// Run under mpirun with 2, 4 or 8 ranks; each run checks the layouts that use all its ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/arena.h"
#include "engine/train/trainer.h"
#include "model/gpt.h"
#include "model/ops.h"
#include "parallel/process_grid.h"
#include "parallel/site_comm.h"
#include "parallel/tensor_parallel.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

constexpr int kSteps = 5;

// 4 layers, 4 heads (so tp and pp up to 4 divide), 32 global samples of 16 tokens per step:
// 16 micro-batches of 2 on one rank, 8 per dp rank with dp = 2, always >= 4 for the pipeline.
Config layout_config(int tp, int pp, int dp, bool sp, int zero = 0) {
  const std::string data = test::fortune_shards("layout_shards");
  std::vector<std::string> o = {
      "model.n_layer=4",
      "model.n_head=4",
      "model.d_model=32",
      "model.seq_len=16",
      "train.micro_batch_size=2",
      "train.global_batch_tokens=512",
      "train.steps=" + std::to_string(kSteps),
      "train.lr=3e-3",
      "train.warmup_steps=2",
      "log.every=1000",
      "log.eval_every=0",
      "log.eval_batches=2",
      "data.train=" + data + "/train_*.bin",
      "data.val=" + data + "/val_*.bin",
      "parallel.tp=" + std::to_string(tp),
      "parallel.pp=" + std::to_string(pp),
      "parallel.dp=" + std::to_string(dp),
      "parallel.zero=" + std::to_string(zero),
      std::string("parallel.sequence_parallel=") + (sp ? "true" : "false")};
  std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "layout test", o);
}

// The single-rank reference, computed on every rank by itself.
const TrainHistory& reference() {
  static TrainHistory h = [] {
    RunContext ctx;
    ctx.world = MPI_COMM_SELF;
    return Trainer(layout_config(1, 1, 1, false), ctx).run();
  }();
  return h;
}

void expect_same_losses(int tp, int pp, int dp, bool sp, int zero = 0) {
  if (tp * pp * dp != world_size()) GTEST_SKIP() << "needs " << tp * pp * dp << " ranks";
  const TrainHistory& ref = reference();
  TrainHistory got = Trainer(layout_config(tp, pp, dp, sp, zero), RunContext{}).run();
  ASSERT_EQ(got.train_loss.size(), ref.train_loss.size());
  for (size_t i = 0; i < ref.train_loss.size(); ++i) {
    // fp32 sums in another order differ by ~1e-7 relative per reduction; AdamW turns gradient
    // differences into parameter differences of the same relative size, so after 5 steps the
    // losses agree to ~1e-6. 2e-5 leaves margin; a wrong shard, a missing reduction or a
    // dropped micro-batch moves the loss by 1e-3 or more.
    EXPECT_NEAR(got.train_loss[i], ref.train_loss[i], 2e-5 * ref.train_loss[i])
        << "step " << i + 1 << " tp=" << tp << " pp=" << pp << " dp=" << dp << " sp=" << sp;
    EXPECT_NEAR(got.grad_norm[i], ref.grad_norm[i], 1e-4 * ref.grad_norm[i]) << "step " << i + 1;
  }
  ASSERT_EQ(got.val_loss.size(), ref.val_loss.size());
  EXPECT_NEAR(got.val_loss.back().second, ref.val_loss.back().second,
              2e-5 * ref.val_loss.back().second);
}

TEST(Layouts, TensorParallel2MatchesSingleRank) { expect_same_losses(2, 1, 1, false); }
TEST(Layouts, TensorParallel2WithSequenceParallelMatchesSingleRank) {
  expect_same_losses(2, 1, 1, true);
}
TEST(Layouts, Pipeline2MatchesSingleRank) { expect_same_losses(1, 2, 1, false); }
TEST(Layouts, DataParallel2MatchesSingleRank) { expect_same_losses(1, 1, 2, false); }
TEST(Layouts, DataParallel2WithZero1MatchesSingleRank) { expect_same_losses(1, 1, 2, false, 1); }
TEST(Layouts, Tp2Dp2WithZero1MatchesSingleRank) { expect_same_losses(2, 1, 2, false, 1); }
TEST(Layouts, TensorParallel4MatchesSingleRank) { expect_same_losses(4, 1, 1, false); }
TEST(Layouts, TensorParallel4WithSequenceParallelMatchesSingleRank) {
  expect_same_losses(4, 1, 1, true);
}
TEST(Layouts, Pipeline4MatchesSingleRank) { expect_same_losses(1, 4, 1, false); }
TEST(Layouts, Tp2Pp2Dp2MatchesSingleRank) { expect_same_losses(2, 2, 2, false); }
TEST(Layouts, Tp2Pp2Dp2WithSequenceParallelMatchesSingleRank) { expect_same_losses(2, 2, 2, true); }

// One micro-batch through a tp-sharded model: each rank's gradient shard equals the matching
// slice of the single-rank gradient.
TEST(Layouts, ShardedGradientsGatherToSingleRankGradients) {
  const int tp = world_size();
  if (tp != 2 && tp != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  const uint64_t seed = 1234;  // identical on every rank
  GptDims d = GptDims::make(2, 4, 32, 16, 256, tp);
  const int B = 2, N = B * d.seq_len;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, d.vocab_size - 1);
  std::vector<int32_t> in(N), tg(N);
  for (int i = 0; i < N; ++i) in[i] = pick(rng), tg[i] = pick(rng);

  auto run = [&](TensorParallel* tpar, const LayoutSpec& spec, Arena& arena,
                 std::unique_ptr<ParamLayout>& layout) {
    layout = std::make_unique<ParamLayout>(d, spec);
    auto model = std::make_unique<Gpt>(*layout, B, 1, DeviceKind::cpu, DType::f32, tpar);
    model->plan(arena);
    arena.allocate();
    model->bind(arena);
    init_params_gpt2(*layout, seed, model->params().as<float>());
    model->forward(in.data(), tg.data());
    model->backward(1.0f / N);
    return model;
  };
  MpiCommunicator world(MPI_COMM_WORLD, "tp");
  SiteComm comm(world);
  TensorParallel tpar(&comm, false);
  Arena a1(DeviceKind::cpu), a2(DeviceKind::cpu);
  std::unique_ptr<ParamLayout> l1, l2;
  auto sharded = run(&tpar, LayoutSpec{tp, world.rank(), 0, 2, true, true}, a1, l1);
  auto single = run(nullptr, LayoutSpec{1, 0, 0, 2, true, true}, a2, l2);
  for (const ParamInfo& p : l1->params()) {
    SCOPED_TRACE(p.name);
    const ParamInfo& f = l2->get(p.name);
    const float* g = sharded->grad(p).as<float>();
    const float* r = single->grad(f).as<float>();
    double num = 0, den = 0;
    for (int i = 0; i < p.rows; ++i)
      for (int j = 0; j < p.cols; ++j) {
        int fr, fc;
        l1->to_logical(p, i, j, &fr, &fc);
        double a = g[size_t(i) * p.cols + j], b = r[size_t(fr) * f.cols + fc];
        num += (a - b) * (a - b);
        den += b * b;
      }
    // fp32 with a different reduction order: ~1e-6 relative.
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-4);
  }
}

}  // namespace
}  // namespace taco
