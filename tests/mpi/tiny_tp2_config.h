// The tiny model the MPI training tests run at tp = 2 (mpirun -np 2): mpi_layouts' shape (4
// layers, d_model 32, 16 tokens, 512 tokens a step) on the fortunes shards, every message
// eligible for compression (min_bytes 0), plus `overrides` such as
// "compression.default={codec: taco, group: 32}".
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "tests/support/fortune_data.h"

namespace taco::test {

inline Config tiny_tp2_config(int steps, const std::vector<std::string>& overrides) {
  const std::string data = fortune_shards("compressed_training_shards");
  std::vector<std::string> o = {"model.n_layer=4",
                                "model.n_head=4",
                                "model.d_model=32",
                                "model.seq_len=16",
                                "train.micro_batch_size=2",
                                "train.global_batch_tokens=512",
                                "train.steps=" + std::to_string(steps),
                                "train.lr=3e-3",
                                "train.warmup_steps=3",
                                "train.seed=42",
                                "log.every=10",
                                "log.eval_every=0",
                                "log.eval_batches=2",
                                "data.train=" + data + "/train_*.bin",
                                "data.val=" + data + "/val_*.bin",
                                "parallel.tp=2",
                                "compression.min_bytes=0"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  const std::string yaml = read_file(source_dir() + "/configs/tiny-cpu.yaml");
  return load_config_text(yaml, "tp = 2 training test", o);
}

}  // namespace taco::test
