// How the grouped FP8 kernels cut a message into per-warp tiles, and their vector memory access.
//
// Along hidden (groups of G consecutive elements of a row) a tile is one group held by L lanes,
// R elements each: R = G / 2, at least one 16-byte vector of V elements and at most
// TACO_CODEC_MAX_R (32; the bf16 decode 64, see below), so most butterflies of the Hadamard
// transform and of the sum of squares stay in registers and only log2(L) stages cross lanes. A
// lane's R elements are J = R / V vectors, interleaved with its partners' so that a warp's vector
// loads are contiguous: register r = j * V + k holds group element (j * L + li) * V + k. Along
// tokens (groups of G consecutive rows of one column) a tile is C adjacent columns x G rows: L = 32
// lanes, each holding R = G / 32 consecutive rows of the C columns (one C-element vector load per
// row). A warp runs 32 / L tiles side by side. In both, values sit in v[c][r] (column, i.e. group,
// c) and register r holds group element li * K + (r / K) * L * K + r % K, with K = V along hidden
// and K = R along tokens (J = 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_div_by.h"
#include "kernels/cuda/cp_async.cuh"

namespace taco::cuda::codec {

// Elements one lane holds along hidden (at most), and the blocks per multiprocessor the kernels
// are built for (which caps their registers: 2 blocks of 256 threads leave 128 per thread).
// Overridable with the CMake cache variable TACO_CODEC_TUNING, for benchmarking.
#ifndef TACO_CODEC_MAX_R
#define TACO_CODEC_MAX_R 32
#endif
#ifndef TACO_CODEC_MIN_BLOCKS
#define TACO_CODEC_MIN_BLOCKS 2
#endif
// The staged decode-accumulate along tokens at G <= 128 (codec_fp8_token_decode.cuh) is built for
// 3: it ran 12% faster than with 2 on an H100, while the same for every kernel slowed the token
// encode, the self-check and the decode-sum-encode (tools/bench/RESULTS.md, 2026-12-07,
// seventeenth session).
#ifndef TACO_CODEC_ACCUMULATE_MIN_BLOCKS
#define TACO_CODEC_ACCUMULATE_MIN_BLOCKS 3
#endif
// The decode kernel's own caps on R, for bf16 and for fp32 outputs (it holds codes, not input
// runs, for the next tile, so more fits; measured on an H200, tools/bench/RESULTS.md: bf16 taco
// G=128 decodes at 2875 GB/s with 64 and 2444 with 32, the fp32 decode-accumulate at 2059 with
// 64 and 2244 with 32).
#ifndef TACO_CODEC_DECODE_MAX_R
#define TACO_CODEC_DECODE_MAX_R 64
#endif
#ifndef TACO_CODEC_DECODE_F32_MAX_R
#define TACO_CODEC_DECODE_F32_MAX_R 32
#endif
// The encode along hidden streams its input through a per-warp ring in shared memory of this
// many bytes (cp.async, tiles ahead of the arithmetic) and is built for this many blocks per
// multiprocessor; 0 bytes: the next tile is read into registers instead. The decode along hidden
// does the same with its codes (its scales are read a tile ahead), separately for bf16 and fp32
// outputs. Measured on an H200 (tools/bench/RESULTS.md, 2026-12-03 third pass), 1 GB: the ring
// takes fp8_block's encode from 2858 to 3508 GB/s and the fp32 decode-accumulate from ~2250 to
// ~3850, while the bf16 decode at R = 64 stays faster with its registers (2880 vs 2758); taco's
// encode runs at 2677 with 8 KB at 3 blocks and 2728 with 4 KB (fp8_block 3563, 3699).
#ifndef TACO_CODEC_ENCODE_RING_BYTES
#define TACO_CODEC_ENCODE_RING_BYTES 4096
#endif
#ifndef TACO_CODEC_ENCODE_MIN_BLOCKS
#define TACO_CODEC_ENCODE_MIN_BLOCKS 3
#endif
#ifndef TACO_CODEC_DECODE_RING_BYTES
#define TACO_CODEC_DECODE_RING_BYTES 0
#endif
#ifndef TACO_CODEC_DECODE_MIN_BLOCKS
#define TACO_CODEC_DECODE_MIN_BLOCKS 2
#endif
#ifndef TACO_CODEC_DECODE_F32_RING_BYTES
#define TACO_CODEC_DECODE_F32_RING_BYTES 8192
#endif
#ifndef TACO_CODEC_DECODE_F32_MIN_BLOCKS
#define TACO_CODEC_DECODE_F32_MIN_BLOCKS 3
#endif

// Stages of a per-warp ring of ring_bytes for tiles of tile_bytes per warp (0: no ring; tile
// shapes without whole 16-byte runs per lane have tile_bytes 0).
constexpr int ring_stages(int ring_bytes, int tile_bytes) {
  return ring_bytes == 0 || tile_bytes == 0 ? 0
         : ring_bytes / tile_bytes < 2      ? 2
                                            : ring_bytes / tile_bytes;
}
constexpr int kThreads = 256;

// The per-launch numbers every grouped kernel needs (host-filled).
struct GroupParams {
  int64_t rows = 0, cols = 0;
  int64_t tiles = 0;          // hidden: groups; tokens: row blocks x column blocks
  int64_t tiles_per_row = 0;  // hidden: groups per row; tokens: column blocks
  DivideU32 per_row;          // tiles_per_row as a 32-bit divisor (when tiles <= INT32_MAX)
  int64_t num_groups = 0;
  uint64_t scales_offset = 0;  // from the start of the message
  Fp8Format format = Fp8Format::e4m3;
  Fp8Scales scales = Fp8Scales::single;
  bool hadamard = false;
  bool vectorized = false;    // 16-byte aligned pointers and rows that keep vectors aligned
  bool whole_groups = false;  // hidden axis, cols % G == 0: tile i is group i, at i * G
  float hadamard_scale = 1.f;
  float target = 448.f;
  float rtarget = 1.f / 448.f;  // 1 / target, rounded to nearest
};

constexpr int clamp_lane_elements(int r, int lo, int hi) { return r < lo ? lo : r > hi ? hi : r; }

template <int ElementBytes, int G, bool kTokens, int MaxR = TACO_CODEC_MAX_R>
struct TileShape {
  static constexpr int V = 16 / ElementBytes;  // elements per 16-byte vector
  static constexpr int R = kTokens ? G / 32 : clamp_lane_elements(G / 2, V, MaxR);
  static constexpr int L = G / R;
  static constexpr int K = kTokens ? R : V;  // consecutive group elements per register run
  static constexpr int C = kTokens ? (R <= 8 ? 8 : 4) : 1;
  static constexpr int kTilesPerWarp = 32 / L;
  static constexpr int kRun = kTokens ? C : V;  // elements per vector access
  static_assert(L >= 1 && L <= 32 && (L & (L - 1)) == 0, "lanes per group must divide a warp");
  static_assert(R % K == 0, "a lane holds whole runs");

  // Group element of register r, less the lane's first element li * K.
  static __device__ __forceinline__ int offset(int r) { return (r / K) * L * K + r % K; }
};

// One lane's view of its tile.
struct TileRef {
  int64_t base;         // element index of (r = 0, c = 0) for this lane
  int64_t stride_r;     // tokens: element distance between r and r + 1 (hidden: runs, see S)
  int64_t first_group;  // scale index of column c = 0
  int n;                // elements in the group (0: no tile for this lane)
  int columns;          // valid columns (groups) of the tile
  int r0;               // this lane's first group element, li * K
  bool full;            // n == G: the Hadamard transform applies
};

// The tile at index `tile` for lane li of its group (past the last tile: n = 0, and base 0
// except with kWhole, where base is past the message and must not be read). kWhole: the caller
// knows p.whole_groups, so that n is G or 0 and full is a constant for the compiler.
template <class S, int G, bool kTokens, bool kWhole = false>
__device__ __forceinline__ TileRef tile_at(int64_t tile, int li, const GroupParams& p) {
  static_assert(!kWhole || !kTokens, "whole groups are an along-hidden layout");
  constexpr int C = S::C;
  TileRef t{0, 1, 0, 0, 0, li * S::K, false};
  if constexpr (kWhole) {  // as below, without the branch: past the end only n is 0
    t.n = tile < p.tiles ? G : 0;
    t.columns = 1;
    t.base = tile * G + t.r0;
    t.first_group = tile;
    t.full = true;
    return t;
  }
  if (tile >= p.tiles) return t;
  if constexpr (!kTokens) {
    if (p.whole_groups) {  // every group full, rows back to back: no division
      t.n = G;
      t.columns = 1;
      t.base = tile * G + t.r0;
      t.first_group = tile;
      t.full = true;
      return t;
    }
  }
  // 32-bit division where it suffices (a 64-bit one is a long software sequence)
  int64_t major, minor;
  if (p.tiles <= INT32_MAX) {  // then tile < p.tiles and tiles_per_row <= p.tiles fit too
    const uint32_t tu = uint32_t(tile), per = uint32_t(p.tiles_per_row);
    major = divide(tu, p.per_row);
    minor = tu - uint32_t(major) * per;
  } else {
    major = tile / p.tiles_per_row;
    minor = tile % p.tiles_per_row;
  }
  if constexpr (kTokens) {
    const int64_t c0 = minor * C;
    t.n = int(min(int64_t(G), p.rows - major * G));
    t.columns = int(min(int64_t(C), p.cols - c0));
    t.base = (major * G + t.r0) * p.cols + c0;
    t.stride_r = p.cols;
    t.first_group = major * p.cols + c0;
  } else {
    t.n = int(min(int64_t(G), p.cols - minor * G));
    t.columns = 1;
    t.base = major * p.cols + minor * G + t.r0;
    t.first_group = tile;
  }
  t.full = t.n == G;
  return t;
}

// --- vector access --------------------------------------------------------------------------

// N consecutive fp32 or bf16 (as uint16 bits) values widened to fp32; p aligned to the access.
template <int N>
__device__ __forceinline__ void load_run(const float* p, float* d) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 4) {
      const float4 t = __ldg(reinterpret_cast<const float4*>(p + k));
      d[k] = t.x, d[k + 1] = t.y, d[k + 2] = t.z, d[k + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) d[k] = __ldg(p + k);
  }
}

template <int N>
__device__ __forceinline__ void load_run(const uint16_t* p, float* d) {
  static_assert(N % 2 == 0, "bf16 runs are pairs");
  constexpr int kWords = N / 2;  // two bf16 per 32-bit word
  uint32_t w[kWords];
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int k = 0; k < kWords; k += 4) {
      const uint4 t = __ldg(reinterpret_cast<const uint4*>(p) + k / 4);
      w[k] = t.x, w[k + 1] = t.y, w[k + 2] = t.z, w[k + 3] = t.w;
    }
  } else if constexpr (kWords == 2) {
    const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = t.x, w[1] = t.y;
  } else {
    w[0] = __ldg(reinterpret_cast<const uint32_t*>(p));
  }
#pragma unroll
  for (int k = 0; k < kWords; ++k) {
    d[2 * k] = __uint_as_float(w[k] << 16);
    d[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ float load_one(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_one(const uint16_t* p) {
  return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

// N bytes (4, 8 or 16) as 32-bit words, p aligned to N.
template <int N>
__device__ __forceinline__ void load_bytes(const uint8_t* p, uint32_t* w) {
  if constexpr (N == 16) {
    const uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = t.x, w[1] = t.y, w[2] = t.z, w[3] = t.w;
  } else if constexpr (N == 8) {
    const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = t.x, w[1] = t.y;
  } else {
    static_assert(N == 4, "byte runs of 4, 8 or 16");
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
}

template <int N>
__device__ __forceinline__ void store_bytes(uint8_t* p, const uint32_t* w) {
  if constexpr (N == 16) {
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (N == 8) {
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    static_assert(N == 4, "byte runs of 4, 8 or 16");
    *reinterpret_cast<uint32_t*>(p) = w[0];
  }
}

__device__ __forceinline__ uint32_t byte_of(const uint32_t* w, int i) {
  return (w[i / 4] >> (8 * (i % 4))) & 0xFFu;
}

__device__ __forceinline__ void put_f32(uint8_t* p, float v) {
  *reinterpret_cast<float*>(p) = v;  // scale sections are 16-byte aligned: 4-byte entries are
}

__device__ __forceinline__ float get_f32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const float*>(p));
}

using detail::cp_async;  // kernels/cuda/cp_async.cuh
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::load_shared_16;

}  // namespace taco::cuda::codec
