// Any vocabulary at any tp: the vocab-parallel layout pads the vocabulary to a multiple of
// 128 * tp (parallel/vocab_split.h), so an odd vocabulary (GPT-2's 50257, or 257 and 263 here)
// trains at tp = 2 and 4 with the per-step losses of one rank, and the padding rows never reach
// the loss. Run under mpirun -np 4: tp = 4 on the world, tp = 2 on each half of it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/data/shards.h"
#include "engine/runtime/arena.h"
#include "engine/train/trainer.h"
#include "model/gpt.h"
#include "model/param_layout.h"
#include "parallel/process_grid.h"
#include "parallel/site_comm.h"
#include "parallel/tensor_parallel.h"
#include "tests/mpi/mpi_test_fixture.h"

namespace taco {
namespace {

constexpr int kSteps = 4;

// Train and val shards of uniform random tokens below `vocab`, so targets fall on every shard
// of the vocabulary (the last real rows too), written by rank 0 from a seed every rank shares.
std::string random_shards(int vocab, uint64_t seed) {
  const std::string name = "vocab_shards_" + std::to_string(vocab);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const std::string dir = test::binary_dir() + "/test-scratch/" + name;
  if (rank == 0) {
    test::scratch_dir(name);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, vocab - 1);
    for (auto [file, n] : {std::pair{"train_000000.bin", 20000}, {"val_000000.bin", 2000}}) {
      std::vector<uint16_t> tokens(static_cast<size_t>(n));
      for (auto& t : tokens) t = uint16_t(pick(rng));
      write_shard(dir + "/" + file, tokens);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// 2 layers, 4 heads, d_model 32, T = 16; 4 samples of 16 tokens per step in 2 micro-batches.
Config vocab_config(int vocab, int tp, const std::string& data) {
  const std::vector<std::string> o = {"model.n_layer=2",
                                      "model.n_head=4",
                                      "model.d_model=32",
                                      "model.seq_len=16",
                                      "model.vocab_size=" + std::to_string(vocab),
                                      "train.micro_batch_size=2",
                                      "train.global_batch_tokens=64",
                                      "train.steps=" + std::to_string(kSteps),
                                      "train.lr=3e-3",
                                      "train.warmup_steps=1",
                                      "log.every=1000",
                                      "log.eval_every=0",
                                      "log.eval_batches=2",
                                      "data.train=" + data + "/train_*.bin",
                                      "data.val=" + data + "/val_*.bin",
                                      "parallel.tp=" + std::to_string(tp)};
  const std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "vocab test", o);
}

class VocabTest : public test::MpiTest {
 protected:
  // Trains `vocab` at tp = `tp` on blocks of tp consecutive ranks and on one rank (every rank by
  // itself), and compares the per-step losses and gradient norms.
  void expect_tp_matches_one_rank(int vocab, int tp) {
    const uint64_t seed = shared_seed();
    SCOPED_TRACE("vocab " + std::to_string(vocab) + " tp " + std::to_string(tp) + " seed " +
                 std::to_string(seed));
    const std::string data = random_shards(vocab, seed);
    RunContext self;
    self.world = MPI_COMM_SELF;
    const TrainHistory ref = Trainer(vocab_config(vocab, 1, data), self).run();

    MPI_Comm block = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank_ / tp, world_rank_, &block);
    RunContext ctx;
    ctx.world = block;
    const TrainHistory got = Trainer(vocab_config(vocab, tp, data), ctx).run();
    MPI_Comm_free(&block);

    EXPECT_EQ(got.train_loss.size(), size_t(kSteps));
    EXPECT_EQ(got.train_loss.size(), ref.train_loss.size());
    for (size_t i = 0; i < std::min(got.train_loss.size(), ref.train_loss.size()); ++i) {
      // As tests/mpi/mpi_layouts.cpp: fp32 sums in another order agree to ~1e-6 after a few
      // AdamW steps; a padding column in the softmax, a lost real row or a wrong shard offset
      // moves the loss by 1e-3 or more (one extra column of 263 shifts ln Z by ~4e-3).
      EXPECT_NEAR(got.train_loss[i], ref.train_loss[i], 2e-5 * ref.train_loss[i]) << "step " << i;
      EXPECT_NEAR(got.grad_norm[i], ref.grad_norm[i], 1e-4 * ref.grad_norm[i]) << "step " << i;
      EXPECT_TRUE(std::isfinite(got.train_loss[i]));
    }
  }
};

// 263 at tp = 2: padded to 512, shard 1 holds rows 256..511 of which 7 are real.
TEST_F(VocabTest, OddVocabularyAtTp2TrainsAsOnOneRank) {
  if (world_size_ % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  expect_tp_matches_one_rank(263, 2);
}

// 257 at tp = 4: padded to 512; shard 2 holds one real row (256), shard 3 only padding.
TEST_F(VocabTest, OddVocabularyAtTp4TrainsAsOnOneRank) {
  if (world_size_ % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  expect_tp_matches_one_rank(257, 4);
}

// One micro-batch through a tp-sharded model whose padding rows of wte hold large random values
// instead of zeros: if any padded logit reached the softmax, the loss would move by ~50 nats.
// The loss must be bit-identical to the zero-padded model's and equal the one-rank loss, and
// the gradient of every padding row must be exactly 0 (so AdamW keeps zero rows at zero).
TEST_F(VocabTest, PaddedRowsNeverReachTheLossAndGetNoGradient) {
  const int tp = world_size_;
  if (tp != 2 && tp != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int vocab = 263;
  const GptDims d = GptDims::make(2, 4, 32, 16, vocab, tp);
  const int B = 2, N = B * d.seq_len;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> in(N), tg(N);
  for (int i = 0; i < N; ++i) in[i] = pick(rng), tg[i] = pick(rng);
  tg[0] = vocab - 1;  // the last real row, on the last shard that holds real rows

  struct Run {
    std::unique_ptr<ParamLayout> layout;
    std::unique_ptr<Arena> arena;
    std::unique_ptr<Gpt> model;
    double loss = 0;
  };
  auto run = [&](TensorParallel* tpar, const LayoutSpec& spec, bool garbage_padding) {
    Run r;
    r.layout = std::make_unique<ParamLayout>(d, spec);
    r.arena = std::make_unique<Arena>(DeviceKind::cpu);
    r.model = std::make_unique<Gpt>(*r.layout, B, 1, DeviceKind::cpu, DType::f32, tpar);
    r.model->plan(*r.arena);
    r.arena->allocate();
    r.model->bind(*r.arena);
    init_params_gpt2(*r.layout, seed, r.model->params().as<float>());
    const ParamInfo& wte = r.layout->get("wte");
    if (garbage_padding) {
      const std::vector<float> noise = test::random_normal(wte.numel(), seed + 7, 0.f, 50.f);
      float* w = r.model->param(wte).as<float>();
      for (int row = wte.valid_rows; row < wte.rows; ++row)
        for (int c = 0; c < wte.cols; ++c)
          w[size_t(row) * wte.cols + c] = noise[size_t(row) * wte.cols + c];
    }
    float* g = r.model->grads().as<float>();
    std::fill(g, g + r.layout->total(), 0.f);
    r.loss = r.model->forward(in.data(), tg.data());
    r.model->backward(1.0f / N);
    return r;
  };
  MpiCommunicator world(MPI_COMM_WORLD, "tp");
  SiteComm comm(world);
  TensorParallel tpar(&comm, false);
  const LayoutSpec sharded{tp, world.rank(), 0, 2, true, true};
  const Run zero_pad = run(&tpar, sharded, false);
  const Run noisy_pad = run(&tpar, sharded, true);
  const Run single = run(nullptr, LayoutSpec{1, 0, 0, 2, true, true}, false);

  EXPECT_EQ(noisy_pad.loss, zero_pad.loss);  // padded columns are never read: bit for bit
  // fp32 sums over shards in another order: ~1e-7 relative; a padded column in the softmax
  // would add ~(padded columns) / 263 to the mean loss.
  EXPECT_NEAR(zero_pad.loss, single.loss, 1e-5 * std::abs(single.loss));
  EXPECT_TRUE(std::isfinite(single.loss));
  for (const Run* r : {&zero_pad, &noisy_pad}) {
    const ParamInfo& wte = r->layout->get("wte");
    const float* g = r->model->grad(wte).as<float>();
    int nonzero_padding = 0, nonzero_real = 0;
    for (int row = 0; row < wte.rows; ++row)
      for (int c = 0; c < wte.cols; ++c) {
        const bool nonzero = g[size_t(row) * wte.cols + c] != 0.f;
        (row < wte.valid_rows ? nonzero_real : nonzero_padding) += nonzero;
      }
    EXPECT_EQ(nonzero_padding, 0) << "rank " << world.rank() << " rows " << wte.valid_rows << ".."
                                  << wte.rows;
    if (wte.valid_rows > 0) {
      EXPECT_GT(nonzero_real, 0);  // the test sees real gradients
    }
  }
}

// GPT-2's vocabulary passes the grid's validation at every tp that divides the heads, and the
// padded layout gives each rank a whole, aligned shard with every real row on exactly one rank.
TEST_F(VocabTest, Gpt2VocabularySplitsOverEveryTp) {
  for (int tp : {1, 2, 3, 4, 8, 16}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const GridModelSizes sizes{.n_head = 48, .d_model = 1536, .n_layer = 2, .vocab_size = 50257};
    EXPECT_NO_THROW(validate_grid({tp, 1, 1}, tp, sizes));
    const GptDims d = GptDims::make(2, 48, 1536, 64, 50257, tp);
    const int multiple = tp == 1 ? 64 : 128 * tp;
    EXPECT_EQ(d.padded_vocab % multiple, 0);
    EXPECT_GE(d.padded_vocab, 50257);
    EXPECT_LT(d.padded_vocab - 50257, multiple);
    int real_rows = 0;
    for (int k = 0; k < tp; ++k) {
      const ParamLayout layout(d, LayoutSpec{tp, k, 0, 0, true, true});
      const ParamInfo& wte = layout.get("wte");
      EXPECT_EQ(wte.rows * tp, d.padded_vocab);
      if (tp > 1) {
        EXPECT_EQ(wte.rows % 128, 0);
      }
      real_rows += wte.valid_rows;
    }
    EXPECT_EQ(real_rows, 50257);
  }
  EXPECT_EQ(GptDims::make(12, 12, 768, 1024, 50257, 2).padded_vocab, 50432);
  EXPECT_EQ(GptDims::make(12, 12, 768, 1024, 50257, 1).padded_vocab, 50304);  // checkpoints
}

}  // namespace
}  // namespace taco
