// How the vocabulary splits over tensor-parallel ranks; header-only so model/ (the parameter
// layout) and parallel/ (the grid's validation) share one rule without MPI.
#pragma once

namespace taco {

// The vocab-parallel split (Megatron's): the vocabulary is padded with rows that never reach the
// loss to a multiple of 64 (tp = 1) or of 128 * tp, so any vocabulary splits over any tp and
// each rank's shard of padded/tp rows is a multiple of 128 (aligned GEMM widths and bf16 logit
// rows). GPT-2's 50257: 50304 at tp = 1, 50432 at tp = 2, 50688 at 4, 51200 at 8. A rank may
// hold only padding (vocab 257 at tp = 4: rows 384..511); the cross-entropy kernels take that.
inline int padded_vocab_size(int vocab_size, int tp) {
  const int multiple = tp == 1 ? 64 : 128 * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

}  // namespace taco
