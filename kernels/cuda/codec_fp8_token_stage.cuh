// The staged path of the grouped FP8 codecs along tokens (columns a multiple of W):
// a block copies a stage of kRows rows x W columns into shared memory with coalesced 16-byte
// copies, and its warps then take the stage's column groups out of shared memory in the lane
// layout of the along-hidden path (codec_fp8_tile.cuh: TileShape<2, G, false>, L lanes x R elements
// per group, runs of K = 8), so that each group's transform, sum of squares, scales and rounding
// run the along-hidden code. That code orders its butterflies and sums by group element, which is
// what the CPU reference does for a group along tokens too (kernels/cpu/codec_fp8.cpp gathers it
// into a contiguous row first), so the bytes stay the reference's. The other side (codes of the
// encode, values of the decode) goes back through shared memory so that global writes are whole
// rows of the stage.
//
// The general along-tokens kernels (a warp reading C columns of 32 rows, 16 bytes per row) stay
// for every shape this path does not take.
//
// Shared memory layouts (both row-major, one stage row after the other):
//   values, bf16 or fp32: 128 or 256 bytes a row (W = 64), 8 or 16 chunks of 16 bytes; chunk q
//     of row `row` is stored at chunk q ^ value_swizzle(row) (< 8: within the row).
//   codes, one byte each: 64 bytes a row, sixteen 4-byte words; word w of row `row` is stored at
//     word w ^ code_swizzle(row).
// Why: the L lanes of a group hold rows li * K + ... of one column, so that in one access of a
// warp its lanes touch rows whose indices differ in the bits of li * K (the same row within each
// run otherwise) and 32 / L adjacent columns (aligned to 32 / L). Rows 8 apart start in the same
// bank, so without the swizzles the L lanes would hit the same banks (an L-way conflict). The
// swizzles depend on (row / K) % L only (% min(L, 8) for values), which is li for every element of
// lane li (a group starts at a multiple of G = R * L, and a run of K rows shares row / K), and move
// each li to its own chunk (values; 32 / L columns are 64 / L bytes: L = 2 two chunks, 4 one, 8
// half a chunk, 16 a word, the last with a 2-way conflict as only 8 chunks exist) or word (codes:
// 32 / L bytes, an aligned block of 8 / L words or part of one word, XORed with li * 16 / L:
// distinct words for every li, within the 16 banks that rows of one parity share). The block-wide
// copies touch whole rows (eight lanes a 128-byte row, or sixteen words of a 64-byte row), which
// any XOR within a row keeps conflict-free.
#pragma once

#include <type_traits>

#include "kernels/cuda/codec_fp8_tile.cuh"
#include "kernels/cuda/common.cuh"

namespace taco::cuda::codec {

// The paired lanes (bf16, G <= 128): ldmatrix .trans (detail::load_matrix_x4_trans) hands lane t,
// of each 8 x 8 matrix of a stage (8 rows of 8 columns), rows 2 (t % 4) and 2 (t % 4) + 1 of
// column t / 4, and stmatrix .trans takes them back. A group (G rows of one column) is then held by
// L = 4 lanes in runs of K = 2 rows, R = G / 4 registers a lane: register r holds group element
// (r / 2) * 8 + 2 li + r % 2, TileShape's rule, so the along-hidden arithmetic runs unchanged.
// Four matrices a lane per instruction: 8 values for one shared-memory access, against one per
// access in the other layout.
template <int G>
struct PairShape {
  static constexpr int R = G / 4, L = 4, K = 2, C = 1;
  static constexpr int kTilesPerWarp = 32 / L;  // 8 adjacent columns: one 16-byte chunk of bf16
  static constexpr int kRun = K;
  static_assert(G >= 32 && G <= 128 && R % 8 == 0, "whole ldmatrix .x4 (32 rows) per group");
  static __device__ __forceinline__ int offset(int r) { return (r / K) * L * K + r % K; }
};

// The paired lanes serve bf16 values and groups of at most 128 rows where the build turns them
// on (TACO_CODEC_TUNING="TACO_CODEC_TOKEN_PAIRS=1"; kernels/CMakeLists.txt also compiles them in
// every CUDA build, linked into nothing). They give the reference's bytes on an H100, but their
// speed is not settled (tools/bench/RESULTS.md, 2026-12-07): off by default.
#ifndef TACO_CODEC_TOKEN_PAIRS
#define TACO_CODEC_TOKEN_PAIRS 0
#endif
template <int G, class T>
constexpr bool token_pairs() {
  return TACO_CODEC_TOKEN_PAIRS != 0 && sizeof(T) == 2 && G <= 128;
}

template <int G, bool kPairs = false>
struct TokenStage {
  using S = std::conditional_t<kPairs, PairShape<G>, TileShape<2, G, false>>;
  static constexpr int R = S::R, L = S::L, K = S::K;
  static constexpr int W = 64;                     // columns of a stage
  static constexpr int kRows = G < 128 ? 128 : G;  // rows of a stage: whole groups
  static constexpr int kGroupSize = G;
  static constexpr int kGroups = kRows / G * W;  // groups of a stage
  static constexpr int kGroupsPerPass = (kThreads / 32) * S::kTilesPerWarp;
  static constexpr int kPasses = kGroups / kGroupsPerPass;
  static constexpr int kCodeBytes = kRows * W;  // a stage of codes (values: kRows * W * E)
  // Stages of the decode's input ring: 4 of 8 KB (G <= 128), else 2.
  static constexpr int kCodeStages = kCodeBytes <= 8192 ? 4 : 2;
  // The decode's scale entries of a stage, beside its codes in the ring: for each of its
  // kRows / G row blocks, the W groups' first entries (q, s or the e8m0 byte) in 256 bytes, then
  // their a (dual) in 256 more. Copied with the codes, so that no pass waits on a global load.
  static constexpr int kScaleRunBytes = 4 * W;
  static constexpr int kScaleBytes = kRows / G * 2 * kScaleRunBytes;
  static constexpr int L8 = L < 8 ? L : 8;
  // The bytes of one cp.async of codes: a whole number of words that the code swizzle keeps
  // together (code_swizzle is a multiple of 16 / L words; paired: of 4 words).
  static constexpr int kCodeCopy = kPairs ? 16 : 4 * (16 / L < 4 ? 16 / L : 4);
  static_assert(kPairs ? K == 2 : K == 8 && R % K == 0, "runs of 8 rows, or pairs");
  static_assert(L >= 2 && L <= 16, "the swizzles are built for 2 to 16 lanes per group");
  static_assert(kGroups % kGroupsPerPass == 0, "every warp takes the same number of groups");
  static_assert(kRows * 8 % kThreads == 0, "whole copy rounds");
  static_assert(kRows * (W / kCodeCopy) % kThreads == 0, "whole copy rounds");

  // Paired: the 8 rows of a matrix (row % 8) each in their own chunk, so that an ldmatrix or
  // stmatrix of 8 rows of one chunk is conflict-free; the code rows of one lane's registers
  // ((row / 2) % 4 = li) each in their own 16-byte chunk of the 64-byte row.
  static __device__ __forceinline__ int value_swizzle(int row) {
    return kPairs ? row % 8 : ((row / K) % L8) * (8 / L8);
  }
  static __device__ __forceinline__ int code_swizzle(int row) {
    return kPairs ? ((row / 2) % 4) * 4 : ((row / K) % L) * (16 / L);
  }
  // Byte offsets within a stage of column col (< W) of row `row`, given row's swizzle; values of
  // E bytes (2: bf16, 4: fp32; an fp32 row is sixteen chunks, the swizzle moves them the same
  // way, and 32 / L columns are 128 / L bytes: the same argument, one size up).
  template <int E = 2>
  static __device__ __forceinline__ int value_at(int row, int col, int swizzle) {
    constexpr int kPerChunk = 16 / E;
    return row * (E * W) + (((col / kPerChunk) ^ swizzle) << 4) + (col % kPerChunk) * E;
  }
  static __device__ __forceinline__ int code_at(int row, int col, int swizzle) {
    return row * W + (((col >> 2) ^ swizzle) << 2) + (col & 3);
  }
  // Paired: the byte offset of the bf16 stage row that `lane` addresses for matrix load or store
  // k of row block `block` (matrix lane / 8 of the four: rows block * G + 32 k + 8 (lane / 8) ..
  // + 7), in the warp's chunk of 8 columns (col / 8).
  static __device__ __forceinline__ int matrix_row_at(int block, int k, int lane, int col) {
    const int row = block * G + 32 * k + lane;
    return value_at<2>(row, col & ~7, value_swizzle(row));
  }
  // The encode's paired code stage: pair row pr holds rows 2 pr and 2 pr + 1, two bytes a column
  // (128 bytes, 8 chunks of 8 columns); chunk q of pair row pr at q ^ (pr % 4). A lane's pairs sit
  // in pair rows with pr % 4 = li, so a warp's 2-byte stores (8 columns x 4 lanes) are
  // conflict-free, and the write-out reads whole pair rows.
  static __device__ __forceinline__ int pair_code_at(int pr, int col) {
    return pr * (2 * W) + (((col >> 3) ^ (pr % 4)) << 4) + (col & 7) * 2;
  }
};

// The most shared memory a staged kernel's block takes (an H100 or H200 multiprocessor has 227 KB
// for one block); an instantiation that would need more keeps the general kernel.
constexpr int kTokenStagesMaxShared = 200 * 1024;

// Lets Kernel launch with up to `bytes` of dynamic shared memory, from any size: the default
// limit of 48 KB counts static shared memory too (the decoders' header verdict), so that exactly
// 48 KB of stages would not launch without the opt-in. Once per kernel (the same bytes at every
// launch).
template <auto Kernel>
void allow_stage_shared_memory(int bytes) {
  static const bool opted_in = [bytes] {
    TACO_CUDA_OK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return true;
  }();
  (void)opted_in;
}

// Where a stage lies: its first row and column, from its index (host-filled p: tiles = stages,
// tiles_per_row = column blocks of W, per_row its divisor; see set_token_stages).
struct StageRef {
  int64_t row0, col0;
};

template <int W>
__device__ __forceinline__ StageRef stage_at(int64_t stage, int stage_rows, const GroupParams& p) {
  int64_t major, minor;
  if (p.tiles <= INT32_MAX) {  // 32-bit division where it suffices, as tile_at
    const uint32_t su = uint32_t(stage), per = uint32_t(p.tiles_per_row);
    major = divide(su, p.per_row);
    minor = su - uint32_t(major) * per;
  } else {
    major = stage / p.tiles_per_row;
    minor = stage % p.tiles_per_row;
  }
  return StageRef{major * stage_rows, minor * W};
}

// The staged path applies: 16-byte aligned values, columns a multiple of W (rows: any; the
// last stage's rows past the end are zeros, not stored).
template <int G>
bool token_stages_apply(const GroupParams& p, bool values_aligned) {
  return values_aligned && p.cols > 0 && p.rows > 0 && p.cols % TokenStage<G>::W == 0;
}

// The group that this thread's lane takes in pass `pass` over stage `st`: its row block in the
// stage and column, the stage row of the lane's register 0, and its TileRef (kWhole: every row of
// the stage exists).
struct StageGroup {
  int block, col, first;
  TileRef t;
};

template <class TS, bool kWhole>
__device__ __forceinline__ StageGroup stage_group(int pass, const StageRef& st,
                                                  const GroupParams& p) {
  using S = typename TS::S;
  constexpr int kGroup = TS::kGroupSize, W = TS::W;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, li = lane % S::L;
  const int gi = pass * TS::kGroupsPerPass + warp * S::kTilesPerWarp + lane / S::L;
  StageGroup g{gi / W, gi % W, 0, TileRef{0, 1, 0, 0, 1, li * S::K, false}};
  g.first = g.block * kGroup + li * S::K;
  const int64_t row0 = st.row0 + g.block * kGroup;  // the group's first row in the message
  g.t.n = kWhole ? kGroup : row0 < p.rows ? int(min(int64_t(kGroup), p.rows - row0)) : 0;
  g.t.full = kWhole || g.t.n == kGroup;
  g.t.first_group = row0 / kGroup * p.cols + st.col0 + g.col;
  return g;
}

// A lane's codes of its group (first, col: stage_group's) from the stage buffer `src` in TS's code
// layout: register r's code in byte r % 4 of packed[r / 4].
template <class TS>
__device__ __forceinline__ void read_stage_codes(const uint8_t* src, int first, int col,
                                                 uint32_t (&packed)[TS::R / 4]) {
  using S = typename TS::S;
  const int cs = TS::code_swizzle(first);
#pragma unroll
  for (int w = 0; w < TS::R / 4; ++w) packed[w] = 0;
#pragma unroll
  for (int r = 0; r < TS::R; ++r) {
    packed[r / 4] |= uint32_t(src[TS::code_at(first + S::offset(r), col, cs)]) << (8 * (r % 4));
  }
}

// The codes of stage `st` (a message's codes from `codes_in`, rows x cols bytes) copied into the
// stage buffer at shared address `dst` in TS's code layout (TokenStage<G, kPairs>), in whole rows:
// row i / kCopiesPerRow, copy i % kCopiesPerRow (its first word u * kCodeCopy / 4, which the
// swizzle moves as a whole) for i = threadIdx.x,
// + kThreads, ...; rows past the end (and every row where !any) zeros. Not committed.
template <class TS>
__device__ __forceinline__ void copy_code_rows(uint32_t dst, const uint8_t* codes_in,
                                               const StageRef& st, bool any, const GroupParams& p) {
  constexpr int W = TS::W, kCopy = TS::kCodeCopy, kCopiesPerRow = W / kCopy;
  // 4, not all: fully unrolled, these loops made ptxas spill at G = 512 (up to 372 bytes)
#pragma unroll 4
  for (int k = 0; k < TS::kRows * kCopiesPerRow / kThreads; ++k) {
    const int i = k * kThreads + threadIdx.x, row = i / kCopiesPerRow, u = i % kCopiesPerRow;
    const bool valid = any && st.row0 + row < p.rows;
    const uint8_t* src =
        valid ? codes_in + (st.row0 + row) * p.cols + st.col0 + u * kCopy : codes_in;
    const int word = (u * kCopy / 4) ^ TS::code_swizzle(row);
    cp_async<kCopy>(dst + row * W + word * 4, src, valid);
  }
}

// The values of stage `st` (rows x cols of T at x) copied into the stage buffer at shared address
// `dst` in the value layout, in whole rows (128 or 256 bytes): row i / kChunksPerRow, 16-byte
// chunk i % kChunksPerRow for i = threadIdx.x, + kThreads, ...; rows past the end (and every row
// where !any) zeros. Not committed.
template <class TS, class T>
__device__ __forceinline__ void copy_value_rows(uint32_t dst, const T* x, const StageRef& st,
                                                bool any, const GroupParams& p) {
  constexpr int E = int(sizeof(T)), W = TS::W, kChunksPerRow = W * E / 16;
  // 4, not all: fully unrolled, these loops made ptxas spill at G = 512 (up to 372 bytes)
#pragma unroll 4
  for (int k = 0; k < TS::kRows * kChunksPerRow / kThreads; ++k) {
    const int i = k * kThreads + threadIdx.x, row = i / kChunksPerRow, q = i % kChunksPerRow;
    const bool valid = any && st.row0 + row < p.rows;
    const T* src = valid ? x + (st.row0 + row) * p.cols + st.col0 + q * (16 / E) : x;
    cp_async<16>(dst + row * (E * W) + ((q ^ TS::value_swizzle(row)) << 4), src, valid);
  }
}

// A lane's values of its group (first, col: stage_group's) from the stage buffer `src` (the value
// layout, T = bf16 bits or fp32), widened to fp32: register r holds stage row first + offset(r).
template <class TS, class T>
__device__ __forceinline__ void read_stage_values(const uint8_t* src, int first, int col,
                                                  float (&v)[TS::R]) {
  using S = typename TS::S;
  constexpr int E = int(sizeof(T));
  const int vs = TS::value_swizzle(first);
#pragma unroll
  for (int r = 0; r < TS::R; ++r) {
    const uint8_t* value = src + TS::template value_at<E>(first + S::offset(r), col, vs);
    if constexpr (E == 2) {
      v[r] = bf16_bits_to_float(*reinterpret_cast<const uint16_t*>(value));
    } else {
      v[r] = *reinterpret_cast<const float*>(value);
    }
  }
}

// The stage buffer `codes` (TS's code layout) written out as whole rows of stage `st` of the
// message's codes at `codes_out`: row i / 16, word i % 16 (a warp two 64-byte rows).
template <class TS>
__device__ __forceinline__ void write_code_rows(const uint8_t* codes, uint8_t* codes_out,
                                                const StageRef& st, const GroupParams& p) {
  constexpr int W = TS::W;
  // 4, not all: fully unrolled, these loops made ptxas spill at G = 512 (up to 372 bytes)
#pragma unroll 4
  for (int k = 0; k < TS::kRows * 16 / kThreads; ++k) {
    const int i = k * kThreads + threadIdx.x, row = i / 16, w = i % 16;
    if (st.row0 + row < p.rows) {
      const uint32_t word =
          *reinterpret_cast<const uint32_t*>(codes + row * W + ((w ^ TS::code_swizzle(row)) << 2));
      *reinterpret_cast<uint32_t*>(codes_out + (st.row0 + row) * p.cols + st.col0 + w * 4) = word;
    }
  }
}

// A block's stages t = blockIdx.x, + gridDim.x, ... through a ring of kStages slots: the first
// kStages - 1 fetched ahead, then per stage: wait for its copies and a barrier (its data visible to
// every thread, and every thread done with the slot the next copy overwrites and with the last
// write-out), the fetch kStages - 1 ahead into the slot read in the previous iteration, and
// work(st, slot, whole), whole a std::bool_constant: every row of the stage exists (all but a
// message's last row of stages), so the arithmetic may skip the tail tests. fetch(stage, slot)
// commits one cp.async group, also for stages past the last.
template <int kStages, int G, class Fetch, class Work>
__device__ __forceinline__ void for_each_token_stage(const GroupParams& p, Fetch&& fetch,
                                                     Work&& work) {
  constexpr int W = TokenStage<G>::W, kRows = TokenStage<G>::kRows;
  const int64_t step = gridDim.x;
  int64_t stage = blockIdx.x;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) fetch(stage + s * step, s);
  int slot = 0;
  for (; stage < p.tiles; stage += step) {
    cp_async_wait<kStages - 2>();  // this thread's copies of this stage are done
    __syncthreads();               // and every thread's
    fetch(stage + (kStages - 1) * step, slot == 0 ? kStages - 1 : slot - 1);
    const StageRef st = stage_at<W>(stage, kRows, p);
    if (st.row0 + kRows <= p.rows) {
      work(st, slot, std::true_type{});
    } else {
      work(st, slot, std::false_type{});
    }
    slot = slot == kStages - 1 ? 0 : slot + 1;
  }
  cp_async_wait<0>();
}

// Fills p's stage counts (p.tiles must be 1, as group_params left it for a non-empty message).
template <int G>
void set_token_stages(GroupParams& p) {
  using TS = TokenStage<G>;
  p.tiles_per_row = p.cols / TS::W;
  p.tiles = (p.rows + TS::kRows - 1) / TS::kRows * p.tiles_per_row;
  if (p.tiles <= INT32_MAX) p.per_row = divide_u32(uint32_t(p.tiles_per_row));
  p.vectorized = true;
  p.whole_groups = false;
}

}  // namespace taco::cuda::codec
