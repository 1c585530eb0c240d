// tp=2 bf16 training with both ranks on one GPU (mpirun -np 2): the groups move device buffers
// through MPI with host staging (NCCL refuses two ranks on one device), and TACO compresses every
// tensor-parallel site. Its loss curve follows the fp32 CPU reference of the same model (tp=1,
// uncompressed, computed on each rank by itself) within bf16 and FP8 noise. Skips without a GPU.
//
// Tolerance: 3e-2 nats per step absolute, as gpu_model_step's curve test (bf16 activations and
// weights against fp32, over 12 steps), with TACO's ~2.6e-2 relative error per message adding
// ~1e-4 to the loss at this size (mpi_compressed_training measures +0.001% on the CPU).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/runtime/device.h"
#include "engine/train/trainer.h"
#include "tests/support/fortune_data.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

constexpr double kCurveTolerance = 3e-2;

Config config(const std::string& device, int tp, bool taco) {
  const std::string data = test::fortune_shards("gpu_training_shards");
  std::vector<std::string> o = {"model.n_layer=2",
                                "model.n_head=2",  // head size 64, one head per tp rank
                                "model.d_model=128",
                                "model.seq_len=64",
                                "train.micro_batch_size=4",
                                "train.global_batch_tokens=512",
                                "train.steps=12",
                                "train.lr=1e-3",
                                "train.warmup_steps=3",
                                "log.every=1000",
                                "log.eval_every=0",
                                "log.eval_batches=2",
                                "data.train=" + data + "/train_*.bin",
                                "data.val=" + data + "/val_*.bin",
                                "train.device=" + device,
                                "parallel.tp=" + std::to_string(tp),
                                "parallel.backend=mpi",
                                "compression.min_bytes=0"};
  if (taco) o.push_back("compression.default={codec: taco, format: e4m3, group: 64}");
  const std::string yaml = test::read_file(test::source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "gpu training test", o);
}

TEST(GpuTraining, Tp2OnOneGpuWithTacoFollowsTheCpuReference) {
  if (!built_with_cuda() || cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device found";
  RunContext self;
  self.world = MPI_COMM_SELF;
  const TrainHistory cpu = Trainer(config("cpu", 1, false), self).run();
  const TrainHistory gpu = Trainer(config("cuda", 2, true), RunContext{}).run();
  ASSERT_EQ(gpu.train_loss.size(), cpu.train_loss.size());
  for (size_t i = 0; i < cpu.train_loss.size(); ++i)
    EXPECT_NEAR(gpu.train_loss[i], cpu.train_loss[i], kCurveTolerance) << "step " << i + 1;
  EXPECT_LT(gpu.train_loss.back(), gpu.train_loss.front() - 10 * kCurveTolerance);
  ASSERT_FALSE(gpu.val_loss.empty());
  EXPECT_NEAR(gpu.val_loss.back().second, cpu.val_loss.back().second, kCurveTolerance);
}

}  // namespace
}  // namespace taco
