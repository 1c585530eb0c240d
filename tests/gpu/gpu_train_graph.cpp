// taco-train's step as a CUDA graph (train.cuda_graph: auto; engine/train/graph_step.h) against
// the eager step (train.cuda_graph: off) on one GPU rank: the same training losses, gradient norms
// and validation losses, bit for bit. Each step has two micro-batches, the learning rate changes
// every step (warmup, then the cosine), the clip is low enough to scale every step, and an
// evaluation runs between steps on the graph's stream. The graph must really be replayed: a
// capture that fell back to the eager step fails here. And a graph run stopped at a step and
// resumed from its checkpoint continues the straight graph run bit for bit (the resumed run's
// first step is eager, its second a fresh capture). Skips without a GPU.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/device.h"
#include "engine/train/checkpoint.h"
#include "engine/train/trainer.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

// The trainers below run on MPI_COMM_SELF: this binary joins MPI (tests/support/test_main.cpp).
extern "C" const int taco_test_joins_mpi = 1;

namespace taco {
namespace {

constexpr double kClip = 0.05;  // below every norm of this run: every step is clipped

Config config(const std::string& cuda_graph, const std::vector<std::string>& extra = {}) {
  const std::string data = test::fortune_shards("gpu_train_graph_shards");
  const std::vector<std::string> o = {"model.n_layer=2",
                                      "model.n_head=2",
                                      "model.d_model=128",
                                      "model.seq_len=64",
                                      "train.micro_batch_size=4",
                                      "train.global_batch_tokens=512",  // two micro-batches
                                      "train.steps=8",
                                      "train.lr=1e-3",
                                      "train.warmup_steps=3",
                                      "train.grad_clip=" + std::to_string(kClip),
                                      "train.device=cuda",
                                      "train.cuda_graph=" + cuda_graph,
                                      "log.every=1000",
                                      "log.eval_every=3",
                                      "log.eval_batches=2",
                                      "checkpoint.keep=0",
                                      "data.train=" + data + "/train_*.bin",
                                      "data.val=" + data + "/val_*.bin"};
  std::vector<std::string> overrides = o;
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  const std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "gpu graph test", overrides);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(GpuTrainGraph, GraphStepEqualsTheEagerStepBitForBit) {
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  RunContext self;
  self.world = MPI_COMM_SELF;

  Trainer eager_trainer(config("off"), self);
  EXPECT_TRUE(contains(eager_trainer.describe(), "step eager (train.cuda_graph: off)"))
      << eager_trainer.describe();
  const TrainHistory eager = eager_trainer.run();

  Trainer graph_trainer(config("auto"), self);
  EXPECT_TRUE(contains(graph_trainer.describe(), "step a CUDA graph from the second step on"))
      << graph_trainer.describe();
  const TrainHistory graph = graph_trainer.run();
  const std::string after = graph_trainer.describe();
  EXPECT_TRUE(contains(after, "a CUDA graph, captured") && contains(after, "replayed")) << after;

  ASSERT_EQ(graph.train_loss.size(), 8u);
  ASSERT_EQ(eager.train_loss.size(), 8u);
  for (size_t i = 0; i < eager.train_loss.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i + 1);
    EXPECT_EQ(graph.train_loss[i], eager.train_loss[i]);
    EXPECT_EQ(graph.grad_norm[i], eager.grad_norm[i]);
    EXPECT_GT(eager.grad_norm[i], kClip) << "the clip must scale this step";
  }
  ASSERT_EQ(graph.val_loss.size(), eager.val_loss.size());
  ASSERT_GE(eager.val_loss.size(), 2u);
  for (size_t i = 0; i < eager.val_loss.size(); ++i) {
    EXPECT_EQ(graph.val_loss[i].first, eager.val_loss[i].first);
    EXPECT_EQ(graph.val_loss[i].second, eager.val_loss[i].second);
  }
  EXPECT_LT(graph.train_loss.back(), graph.train_loss.front()) << "the run must learn";
}

TEST(GpuTrainGraph, StoppedAndResumedGraphRunContinuesTheStraightRunBitForBit) {
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  RunContext self;
  self.world = MPI_COMM_SELF;
  const TrainHistory straight = Trainer(config("auto"), self).run();
  ASSERT_EQ(straight.train_loss.size(), 8u);

  const std::string dir = test::scratch_dir("gpu_train_graph_resume");
  const std::vector<std::string> keep = {"checkpoint.keep=1"};
  RunContext first = self;
  first.run_dir = dir;
  first.after_step = [](int done) {
    if (done == 5) request_stop(SIGTERM);
  };
  clear_stop_request();
  const TrainHistory stopped = Trainer(config("auto", keep), first).run();
  clear_stop_request();
  ASSERT_EQ(stopped.steps_done, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(stopped.train_loss[i], straight.train_loss[i]) << i + 1;

  RunContext again = self;
  again.run_dir = dir;
  Trainer resumed_trainer(config("auto", {"checkpoint.keep=1", "checkpoint.resume=true"}), again);
  ASSERT_EQ(resumed_trainer.start_step(), 5);
  const TrainHistory resumed = resumed_trainer.run();
  const std::string after = resumed_trainer.describe();
  EXPECT_TRUE(contains(after, "a CUDA graph, captured") && contains(after, "replayed")) << after;
  ASSERT_EQ(resumed.train_loss.size(), 3u);
  for (int i = 5; i < 8; ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i + 1);
    EXPECT_EQ(resumed.train_loss[i - 5], straight.train_loss[i]);
    EXPECT_EQ(resumed.grad_norm[i - 5], straight.grad_norm[i]);
  }
  ASSERT_FALSE(resumed.val_loss.empty());
  EXPECT_EQ(resumed.val_loss.back().second, straight.val_loss.back().second);
}

}  // namespace
}  // namespace taco
