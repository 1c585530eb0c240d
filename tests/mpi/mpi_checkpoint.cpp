// Checkpoints across ranks (run under mpirun -np 2): stopping after a step and resuming gives
// bit-identical losses to an uninterrupted run of the same layout under tp=2 and under pp=2;
// a checkpoint is refused by a run of another layout on every rank; and a damaged file of one
// rank makes every rank fall back to the same older checkpoint.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/checkpoint.h"
#include "engine/train/checkpoint_model.h"
#include "engine/train/trainer.h"
#include "kernels/check.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 8;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Config layout_config(int tp, int pp, int dp, const std::vector<std::string>& extra = {}) {
  const std::string data = test::fortune_shards("checkpoint_shards");
  std::vector<std::string> o = {"model.n_layer=2",
                                "model.n_head=2",
                                "model.d_model=32",
                                "model.seq_len=16",
                                "train.micro_batch_size=2",
                                "train.global_batch_tokens=128",
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
                                "parallel.dp=" + std::to_string(dp)};
  o.insert(o.end(), extra.begin(), extra.end());
  std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "checkpoint test", o);
}

// The same fresh folder on every rank.
std::string shared_dir(const std::string& name) {
  const std::string dir = test::binary_dir() + "/test-scratch/" + name;
  if (world_rank() == 0) test::scratch_dir(name);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

RunContext in_dir(const std::string& dir, int stop_at = -1) {
  RunContext ctx;
  ctx.run_dir = dir;
  if (stop_at > 0)
    ctx.after_step = [stop_at](int done) {
      // One rank only: the trainer must carry the stop to the other.
      if (done == stop_at && world_rank() == 1) request_stop(SIGTERM);
    };
  return ctx;
}

void expect_resume_parity(int tp, int pp, int dp, const std::string& name) {
  const TrainHistory straight = Trainer(layout_config(tp, pp, dp), RunContext{}).run();
  const std::string dir = shared_dir(name);
  clear_stop_request();
  const TrainHistory first = Trainer(layout_config(tp, pp, dp), in_dir(dir, 3)).run();
  clear_stop_request();
  EXPECT_EQ(first.stopped_by_signal, SIGTERM);
  EXPECT_EQ(first.steps_done, 3);
  Trainer resumed(layout_config(tp, pp, dp, {"checkpoint.resume=true"}), in_dir(dir));
  ASSERT_EQ(resumed.start_step(), 3);
  const TrainHistory rest = resumed.run();
  ASSERT_EQ(rest.train_loss.size(), size_t(kSteps - 3));
  for (int i = 3; i < kSteps; ++i)
    EXPECT_EQ(rest.train_loss[i - 3], straight.train_loss[i]) << "step " << i + 1;
  EXPECT_EQ(rest.val_loss.back().second, straight.val_loss.back().second);
}

TEST(CheckpointRanks, TensorParallel2ResumesBitIdentically) {
  expect_resume_parity(2, 1, 1, "tp2");
}
TEST(CheckpointRanks, Pipeline2ResumesBitIdentically) { expect_resume_parity(1, 2, 1, "pp2"); }
TEST(CheckpointRanks, DataParallel2WithZero1ResumesBitIdentically) {
  const TrainHistory straight =
      Trainer(layout_config(1, 1, 2, {"parallel.zero=1"}), RunContext{}).run();
  const std::string dir = shared_dir("dp2z1");
  clear_stop_request();
  Trainer(layout_config(1, 1, 2, {"parallel.zero=1"}), in_dir(dir, 5)).run();
  clear_stop_request();
  const TrainHistory rest =
      Trainer(layout_config(1, 1, 2, {"parallel.zero=1", "checkpoint.resume=true"}), in_dir(dir))
          .run();
  ASSERT_EQ(rest.train_loss.size(), size_t(kSteps - 5));
  for (int i = 5; i < kSteps; ++i) EXPECT_EQ(rest.train_loss[i - 5], straight.train_loss[i]);
}

TEST(CheckpointRanks, AnotherLayoutIsRefusedOnEveryRank) {
  const std::string dir = shared_dir("layout");
  Trainer(layout_config(2, 1, 1, {"train.steps=2"}), in_dir(dir)).run();
  std::string message;
  try {
    Trainer(layout_config(1, 1, 2, {"train.steps=2", "checkpoint.resume=true"}), in_dir(dir));
  } catch (const UserError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("checkpoint written with 'tp=2 pp=1 dp=1"), std::string::npos)
      << "rank " << world_rank() << ": '" << message << "'";
  EXPECT_NE(message.find("this run is 'tp=1 pp=1 dp=2"), std::string::npos) << message;
}

TEST(CheckpointRanks, OneRanksDamagedFileSendsEveryRankToTheOlderCheckpoint) {
  const std::string dir = shared_dir("damaged");
  clear_stop_request();
  Trainer(layout_config(2, 1, 1, {"checkpoint.every=2"}), in_dir(dir, 5)).run();  // 2, 4, 5
  clear_stop_request();
  if (world_rank() == 0) {
    const std::string f = dir + "/ckpt/step_00000005/" + rank_file_name(1);
    fs::resize_file(f, fs::file_size(f) / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Trainer resumed(layout_config(2, 1, 1, {"checkpoint.resume=true"}), in_dir(dir));
  EXPECT_EQ(resumed.start_step(), 4) << "rank " << world_rank();
}

// The whole model assembled from a tp=2 or a pp=2 checkpoint is the tp=1 model: with a learning
// rate of 1e-30 one step leaves the GPT-2 init (a pure function of seed, name and position) in
// place, up to ~1e-30 on parameters that start at zero.
TEST(CheckpointRanks, WholeModelFromAnyLayoutIsTheSingleRankModel) {
  for (auto [tp, pp] : {std::pair{2, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE("tp=" + std::to_string(tp) + " pp=" + std::to_string(pp));
    const std::string dir = shared_dir("whole_" + std::to_string(tp) + std::to_string(pp));
    const Config cfg = layout_config(tp, pp, 1, {"train.steps=1", "train.lr=1e-30"});
    Trainer(cfg, in_dir(dir)).run();
    if (world_rank() != 0) continue;
    const FullState state = load_full_state(dir + "/ckpt/step_00000001", cfg);
    const std::vector<float>& params = state.sections.at("params");
    const ParamLayout layout(state.dims, LayoutSpec{1, 0, 0, state.dims.n_layer, true, true});
    std::vector<float> init(layout.total());
    init_params_gpt2(layout, cfg.train.seed, init.data());
    ASSERT_EQ(params.size(), init.size());
    size_t off = 0;
    for (size_t i = 0; i < init.size(); ++i) off += std::fabs(params[i] - init[i]) > 1e-20f;
    EXPECT_EQ(off, 0u);
  }
}

// Resharding (engine/train/checkpoint_model.h) is pure data movement: tp=2 -> pp=2 -> tp=2 and
// dp=2 with ZeRO-1 -> tp=2 -> dp=2 ZeRO-1 give back every section bit for bit; and a tp=2 run
// stopped after 3 steps, resharded to pp=2, continues like the uninterrupted tp=2 run (up to
// the fp32 reduction order of another layout, as in mpi_layouts).
void expect_same_sections(const std::string& a, const std::string& b) {
  for (int r = 0; r < 2; ++r) {
    const RankCheckpoint x = read_rank_checkpoint(a + "/" + rank_file_name(r));
    const RankCheckpoint y = read_rank_checkpoint(b + "/" + rank_file_name(r));
    ASSERT_EQ(x.sections.size(), y.sections.size());
    for (size_t i = 0; i < x.sections.size(); ++i) {
      EXPECT_EQ(x.sections[i].name, y.sections[i].name);
      EXPECT_TRUE(x.sections[i].bytes == y.sections[i].bytes)
          << x.sections[i].name << " of rank " << r << " differs after the round trip";
    }
  }
}

TEST(CheckpointRanks, ReshardingRoundTripsBitExactlyAndResumesInTheNewLayout) {
  const std::string dir = shared_dir("reshard");
  const Config tp2 = layout_config(2, 1, 1), pp2 = layout_config(1, 2, 1);
  const Config dpz = layout_config(1, 1, 2, {"parallel.zero=1"});
  clear_stop_request();
  Trainer(tp2, in_dir(dir + "/tp2", 3)).run();
  clear_stop_request();
  Trainer(dpz, in_dir(dir + "/dpz", 3)).run();
  clear_stop_request();
  const std::string step = "/ckpt/step_00000003";
  if (world_rank() == 0) {
    try {  // rank 0 alone: a failure must not leave rank 1 waiting in the barrier below
      write_full_state(load_full_state(dir + "/tp2" + step, tp2), pp2, dir + "/pp2" + step);
      write_full_state(load_full_state(dir + "/pp2" + step, pp2), tp2, dir + "/back" + step);
      expect_same_sections(dir + "/tp2" + step, dir + "/back" + step);
      write_full_state(load_full_state(dir + "/dpz" + step, dpz), tp2, dir + "/dpz_tp2" + step);
      write_full_state(load_full_state(dir + "/dpz_tp2" + step, tp2), dpz,
                       dir + "/dpz_back" + step);
      expect_same_sections(dir + "/dpz" + step, dir + "/dpz_back" + step);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);

  const TrainHistory straight = Trainer(tp2, RunContext{}).run();
  Trainer resumed(layout_config(1, 2, 1, {"checkpoint.resume=true"}), in_dir(dir + "/pp2"));
  ASSERT_EQ(resumed.start_step(), 3);
  const TrainHistory rest = resumed.run();
  ASSERT_EQ(rest.train_loss.size(), size_t(kSteps - 3));
  for (int i = 3; i < kSteps; ++i)
    EXPECT_NEAR(rest.train_loss[i - 3], straight.train_loss[i], 2e-5 * straight.train_loss[i])
        << "step " << i + 1;
}

}  // namespace
}  // namespace taco
