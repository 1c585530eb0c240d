// Grouped FP8 encode on the device (fp8_block, taco; fp8_tensor below): bytes identical to
// kernels/cpu/codec_fp8.cpp. Per group, in registers: non-finite count, [adaptive scale,
// Hadamard,] absmax, codes, scales. Shapes and lanes: codec_fp8_tile.cuh; arithmetic:
// codec_fp8_math.cuh.
#include <cstring>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_group.cuh"
#include "kernels/cuda/codec_fp8_token_encode.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/hadamard.h"

namespace taco::cuda {
namespace codec {
namespace {

// One lane's 16-byte runs of a tile along hidden, as loaded (zero outside the group).
template <class T, class S>
struct RawRuns {
  uint4 w[S::R / S::V];
};

template <class T, class S>
__device__ __forceinline__ void load_runs(const T* x, const TileRef& t, RawRuns<T, S>& raw) {
#pragma unroll
  for (int j = 0; j < S::R / S::V; ++j) {
    const int k = j * S::V;
    raw.w[j] = t.r0 + S::offset(k) < t.n
                   ? __ldg(reinterpret_cast<const uint4*>(x + t.base + S::offset(k)))
                   : make_uint4(0, 0, 0, 0);
  }
}

template <class T, class S>
__device__ __forceinline__ void unpack_runs(const RawRuns<T, S>& raw, float (&v)[S::R]) {
#pragma unroll
  for (int j = 0; j < S::R / S::V; ++j) {
    const uint32_t w[4] = {raw.w[j].x, raw.w[j].y, raw.w[j].z, raw.w[j].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (sizeof(T) == 2) {  // two bf16 per word
        v[j * 8 + 2 * i] = __uint_as_float(w[i] << 16);
        v[j * 8 + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      } else {
        v[j * 4 + i] = __uint_as_float(w[i]);
      }
    }
  }
}

// The ring of the encode along hidden: stages of one tile per warp, each J 16-byte runs per lane.
template <class S>
struct EncodeRing {
  static constexpr int J = S::R / S::V;
  static constexpr int kTileBytes = J * 32 * 16;
  static constexpr int kStages = ring_stages(TACO_CODEC_ENCODE_RING_BYTES, kTileBytes);
  static constexpr int kBlockBytes = kStages * kTileBytes * (kThreads / 32);
};

// Along hidden with aligned rows: each lane copies its runs of the tiles kStages - 1 ahead into
// its warp's ring (cp.async), so that loads stay in flight while the warp computes without
// holding them in registers (past the end, tile_at gives an empty tile: zeros). The warp's tiles
// are t0, t0 + step, ... (kTilesPerWarp side by side). kWhole: p.whole_groups (no tail groups,
// so that the tile arithmetic and the tests on n fold away). The ring is addressed through 32-bit
// shared addresses computed once (a generic pointer is converted at every cp.async).
template <class T, class S, int G, bool kWhole, FixedOptions kFixed>
__device__ __forceinline__ void encode_ring(const T* __restrict__ x, const GroupParams& p,
                                            int64_t t0, int64_t step, uint8_t* codes_out,
                                            uint8_t* scales, int64_t& poisoned_groups) {
  using Ring = EncodeRing<S>;
  constexpr int J = Ring::J, kStages = Ring::kStages, L = S::L, R = S::R;
  constexpr uint32_t kStageBytes = Ring::kTileBytes, kRingBytes = kStages * kStageBytes;
  const int lane = threadIdx.x % 32, li = lane % L;
  extern __shared__ uint4 ring_shared[];
  // the shared address of this lane's slot in stage 0 of its warp's ring
  const uint32_t ring =
      detail::smem_addr(ring_shared) + (threadIdx.x / 32) * kRingBytes + lane * 16;
  auto fetch = [&](int64_t first_tile, uint32_t stage_offset) {
    const TileRef f = tile_at<S, G, false, kWhole>(first_tile + lane / L, li, p);
    // kWhole: one base for the J runs (x itself past the end: the message holds a whole group,
    // so x + offset is inside it too)
    const T* base = !kWhole || f.n > 0 ? x + f.base : x;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const bool valid = kWhole ? f.n > 0 : f.r0 + S::offset(j * S::V) < f.n;
      const T* src = base + S::offset(j * S::V);
      cp_async<16>(ring + stage_offset + j * 32 * 16, kWhole || valid ? src : x, valid);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) fetch(t0 + s * step, s * kStageBytes);
  uint32_t read = 0;  // the offset of the stage read
  for (; t0 < p.tiles; t0 += step) {
    const TileRef t = tile_at<S, G, false, kWhole>(t0 + lane / L, li, p);
    cp_async_wait<kStages - 2>();  // this tile's copies are done
    RawRuns<T, S> raw;
#pragma unroll
    for (int j = 0; j < J; ++j) raw.w[j] = load_shared_16(ring + read + j * 32 * 16);
    // into the stage read (and computed on) in the previous iteration
    fetch(t0 + (kStages - 1) * step, read == 0 ? kRingBytes - kStageBytes : read - kStageBytes);
    read = read + kStageBytes == kRingBytes ? 0 : read + kStageBytes;
    float v[1][R];
    unpack_runs(raw, v[0]);
    encode_tile<S, false, kWhole, kFixed>(v, t, li, p, codes_out, scales, poisoned_groups);
  }
  cp_async_wait<0>();
}

// x [rows, cols] (fp32 or bf16 bits) -> codes and scales of `out`, one warp per 32 / L tiles.
// Blocks per SM the encode is built for: along tokens, groups of 256 and 512 rows hold more
// values per lane than 3 blocks' registers allow (ptxas spills over 1 KB there).
template <int G, bool kTokens>
constexpr int encode_min_blocks() {
  return kTokens && G >= 256 ? TACO_CODEC_MIN_BLOCKS : TACO_CODEC_ENCODE_MIN_BLOCKS;
}

// kWhole: launched only where p.whole_groups and p.vectorized hold and the ring is built (its own
// kernel, the ring loop alone, so that the general tile arithmetic costs it no registers), in
// three variants: taco's and fp8_block's default options fixed at compile time (kFixed), or the
// message's.
template <class T, int G, bool kTokens, bool kWhole, FixedOptions kFixed>
__global__ void __launch_bounds__(kThreads, encode_min_blocks<G, kTokens>())
    fp8_group_encode_kernel(const T* __restrict__ x, uint8_t* __restrict__ out, GroupParams p,
                            HeaderParams hp, int64_t* nonfinite_groups) {
  using S = TileShape<int(sizeof(T)), G, kTokens>;
  constexpr int R = S::R, L = S::L, C = S::C, kRun = S::kRun;
  write_header_and_padding(out, hp);

  const int lane = threadIdx.x % 32, li = lane % L;
  uint8_t* codes_out = out + kWireHeaderBytes;
  uint8_t* scales = out + p.scales_offset;
  int64_t poisoned_groups = 0;
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);  // launched with kThreads

  const int64_t step = warps * S::kTilesPerWarp;
  if constexpr (!kTokens) {
    using Ring = EncodeRing<S>;
    if constexpr (Ring::kStages > 0) {
      if (kWhole || p.vectorized) {  // kWhole: what follows is dead code
        encode_ring<T, S, G, kWhole, kFixed>(x, p, warp * S::kTilesPerWarp, step, codes_out, scales,
                                             poisoned_groups);
        add_count(nonfinite_groups, poisoned_groups);
        return;
      }
    }
    if (p.vectorized) {
      // Without a ring: each warp reads its next tile into registers before the arithmetic of
      // the current one.
      int64_t t0 = warp * S::kTilesPerWarp;
      TileRef t = tile_at<S, G, kTokens>(t0 + lane / L, li, p);
      RawRuns<T, S> raw;
      load_runs(x, t, raw);
      for (; t0 < p.tiles; t0 += step) {
        const TileRef tn = tile_at<S, G, kTokens>(t0 + step + lane / L, li, p);
        float v[1][R];
        unpack_runs(raw, v[0]);
        load_runs(x, tn, raw);
        encode_tile<S, kTokens>(v, t, li, p, codes_out, scales, poisoned_groups);
        t = tn;
      }
      add_count(nonfinite_groups, poisoned_groups);
      return;
    }
  }

  for (int64_t t0 = warp * S::kTilesPerWarp; t0 < p.tiles; t0 += step) {
    const TileRef t = tile_at<S, G, kTokens>(t0 + lane / L, li, p);

    // Load: invalid elements are zero (they change neither the sum of squares nor the absmax).
    float v[C][R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int c = 0; c < C; ++c) v[c][r] = 0.f;
    }
    if constexpr (kTokens) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (t.r0 + r >= t.n) continue;
        const T* row = x + t.base + r * t.stride_r;
        if (p.vectorized) {
          float run[C];
          load_run<C>(row, run);
#pragma unroll
          for (int c = 0; c < C; ++c) v[c][r] = run[c];
        } else {
#pragma unroll
          for (int c = 0; c < C; ++c) {
            if (c < t.columns) v[c][r] = load_one(row + c);
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < R; k += kRun) {
        if (p.vectorized) {
          if (t.r0 + S::offset(k) < t.n) load_run<kRun>(x + t.base + S::offset(k), &v[0][k]);
        } else {
#pragma unroll
          for (int r = k; r < k + kRun; ++r) {
            if (t.r0 + S::offset(r) < t.n) v[0][r] = load_one(x + t.base + S::offset(r));
          }
        }
      }
    }

    encode_tile<S, kTokens>(v, t, li, p, codes_out, scales, poisoned_groups);
  }
  add_count(nonfinite_groups, poisoned_groups);
}

// --- fp8_tensor: one absmax for the whole message ---------------------------------------------
// The 16-byte scale section is the scratch of the absmax pass (zeroed by the host first):
// word 0 max|x| bits (non-negative floats order as integers), word 1 "saw a non-finite value",
// word 2 the finished-block ticket. The last block turns word 0 into the scale (NaN: poisoned)
// and zeroes words 1..3, which are the section's padding.

constexpr int kTensorRun = 8;

template <class T>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_tensor_absmax_kernel(const T* __restrict__ x, int64_t n, uint8_t* out, HeaderParams hp,
                             float target, bool vectorized, int64_t* nonfinite_groups) {
  write_header_and_padding(out, hp);
  uint32_t* scratch = reinterpret_cast<uint32_t*>(out + hp.scales_offset);
  float m = 0.f;
  uint32_t bad = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = vectorized ? n / kTensorRun : 0;
  for (int64_t i = start; i < runs; i += stride) {
    float run[kTensorRun];
    load_run<kTensorRun>(x + i * kTensorRun, run);
#pragma unroll
    for (int k = 0; k < kTensorRun; ++k) {
      if (is_finite(run[k])) {
        m = fmaxf(m, fabsf(run[k]));
      } else {
        bad = 1;
      }
    }
  }
  for (int64_t i = runs * kTensorRun + start; i < n; i += stride) {
    const float v = load_one(x + i);
    if (is_finite(v)) {
      m = fmaxf(m, fabsf(v));
    } else {
      bad = 1;
    }
  }
  __shared__ float max_shared[32];
  m = detail::block_max(m, max_shared);
  bad = __syncthreads_or(bad);
  if (threadIdx.x != 0) return;
  atomicMax(&scratch[0], __float_as_uint(m));
  if (bad) atomicOr(&scratch[1], 1u);
  __threadfence();
  if (atomicAdd(&scratch[2], 1u) != gridDim.x - 1) return;
  // The last block: every other block's atomics are visible.
  const float total_max = __uint_as_float(atomicOr(&scratch[0], 0u));
  const bool poisoned = atomicOr(&scratch[1], 0u) != 0;
  // single scale: s = q / a with a = 1, which is q exactly
  const float s = poisoned ? quiet_nan() : __fdiv_rn(total_max, target);
  atomicExch(&scratch[0], __float_as_uint(s));
  atomicExch(&scratch[1], 0u);
  atomicExch(&scratch[2], 0u);
  atomicExch(&scratch[3], 0u);
  if (poisoned) add_count(nonfinite_groups, 1);
}

template <class T>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_tensor_codes_kernel(const T* __restrict__ x, int64_t n, uint8_t* __restrict__ out,
                            uint64_t scales_offset, Fp8Format format, bool vectorized) {
  // A poisoned (NaN) or zero scale: every code 0.
  const Quantizer qz = quotient_quantizer(get_f32(out + scales_offset));
  uint8_t* codes = out + kWireHeaderBytes;
  auto code = [&](float v) -> uint32_t {
    return qz.mode == Quantizer::kZero
               ? 0u
               : uint32_t(to_fp8(qz.scaled<Quantizer::kExactDiv>(v), format));
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = vectorized ? n / kTensorRun : 0;
  // The common case (a usable scale within div_by's bounds, e4m3): two codes per conversion.
  const bool fast = qz.mode == Quantizer::kDiv && format == Fp8Format::e4m3;
  for (int64_t i = start; i < runs; i += stride) {
    float run[kTensorRun];
    load_run<kTensorRun>(x + i * kTensorRun, run);
    uint32_t w[2] = {0, 0};
    if (fast) {
#pragma unroll
      for (int k = 0; k < kTensorRun; k += 2) {
        w[k / 4] |= to_fp8x2<Fp8Format::e4m3>(qz.scaled<Quantizer::kDiv>(run[k]),
                                              qz.scaled<Quantizer::kDiv>(run[k + 1]))
                    << (8 * (k % 4));
      }
    } else {
#pragma unroll
      for (int k = 0; k < kTensorRun; ++k) w[k / 4] |= code(run[k]) << (8 * (k % 4));
    }
    store_bytes<8>(codes + i * kTensorRun, w);
  }
  for (int64_t i = runs * kTensorRun + start; i < n; i += stride) {
    codes[i] = uint8_t(code(load_one(x + i)));
  }
}

template <class T, int G, bool kTokens, bool kWhole, FixedOptions kFixed = FixedOptions::none>
void launch_encode_kernel(const T* x, uint8_t* out, const GroupParams& p, const HeaderParams& hp,
                          int64_t* nonfinite_groups, cudaStream_t stream) {
  using S = TileShape<int(sizeof(T)), G, kTokens>;
  constexpr auto kernel = fp8_group_encode_kernel<T, G, kTokens, kWhole, kFixed>;
  int shared = 0;
  if constexpr (!kTokens) {
    if (p.vectorized) shared = EncodeRing<S>::kBlockBytes;
  }
  allow_shared_memory<kernel>(shared);
  const unsigned blocks =
      wave_grid<kernel>(p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp, shared);
  kernel<<<blocks, kThreads, shared, stream>>>(x, out, p, hp, nonfinite_groups);
  TACO_LAUNCH_OK();
}

template <class T, int G, bool kTokens>
void launch_encode_groups(const T* x, uint8_t* out, GroupParams p, const HeaderParams& hp,
                          int64_t* nonfinite_groups, cudaStream_t stream) {
  using S = TileShape<int(sizeof(T)), G, kTokens>;
  if constexpr (kTokens && token_encode_shared<G, T>() <= kTokenStagesMaxShared) {
    if (p.tiles > 0 && token_stages_apply<G>(p, detail::aligned16(x))) {
      set_token_stages<G>(p);
      return with_fixed_options(p, [&](auto fixed) {
        launch_encode_token_stages<T, G, decltype(fixed)::value>(x, out, p, hp, nonfinite_groups,
                                                                 stream);
      });
    }
  }
  set_tiles<S, G, kTokens>(p, detail::aligned16(x));
  if constexpr (!kTokens) {
    if (p.whole_groups && p.vectorized && EncodeRing<S>::kStages > 0) {
      return with_fixed_options(p, [&](auto fixed) {
        launch_encode_kernel<T, G, kTokens, true, decltype(fixed)::value>(x, out, p, hp,
                                                                          nonfinite_groups, stream);
      });
    }
  }
  launch_encode_kernel<T, G, kTokens, false>(x, out, p, hp, nonfinite_groups, stream);
}

template <class T, bool kTokens>
void dispatch_group(int group, const T* x, uint8_t* out, const GroupParams& p,
                    const HeaderParams& hp, int64_t* nonfinite_groups, cudaStream_t stream) {
  switch (group) {
    case 32:
      return launch_encode_groups<T, 32, kTokens>(x, out, p, hp, nonfinite_groups, stream);
    case 64:
      return launch_encode_groups<T, 64, kTokens>(x, out, p, hp, nonfinite_groups, stream);
    case 128:
      return launch_encode_groups<T, 128, kTokens>(x, out, p, hp, nonfinite_groups, stream);
    case 256:
      return launch_encode_groups<T, 256, kTokens>(x, out, p, hp, nonfinite_groups, stream);
    case 512:
      return launch_encode_groups<T, 512, kTokens>(x, out, p, hp, nonfinite_groups, stream);
  }
  TACO_CHECK(false, "device codec: group " + std::to_string(group) + " is not supported");
}

template <class T>
void encode_typed(const T* x, const Fp8DeviceMessage& m, uint8_t* out, cudaStream_t stream,
                  int64_t* nonfinite_groups) {
  const Fp8GroupSpec& s = m.spec;
  HeaderParams hp = header_params(m);
  const bool x_aligned = detail::aligned16(x);

  if (s.group == 0) {
    const int64_t n = s.count();
    if (n > 0) {
      // The scale section (16 bytes) is the absmax scratch; its padding is zeroed at the end.
      hp.scales_end = hp.total;
      TACO_CUDA_OK(cudaMemsetAsync(out + m.scales_offset, 0, 16, stream));
      const int64_t per_block = int64_t(kThreads) * kTensorRun;
      fp8_tensor_absmax_kernel<T>
          <<<wave_grid<fp8_tensor_absmax_kernel<T>>(n, per_block, 0), kThreads, 0, stream>>>(
              x, n, out, hp, fp8_max(s.format), x_aligned, nonfinite_groups);
      TACO_LAUNCH_OK();
      fp8_tensor_codes_kernel<T>
          <<<wave_grid<fp8_tensor_codes_kernel<T>>(n, per_block, 0), kThreads, 0, stream>>>(
              x, n, out, m.scales_offset, s.format, x_aligned);
      TACO_LAUNCH_OK();
      return;
    }
  }

  GroupParams p = group_params(m);  // launch_encode_groups fills the tiles for its shape
  const int group = s.group > 0 ? int(s.group) : 32;  // an empty fp8_tensor message: header only
  if (s.along_tokens) {
    dispatch_group<T, true>(group, x, out, p, hp, nonfinite_groups, stream);
  } else {
    dispatch_group<T, false>(group, x, out, p, hp, nonfinite_groups, stream);
  }
}

}  // namespace
}  // namespace codec

void fp8_encode_device(const void* x, DType dtype, const Fp8DeviceMessage& message, uint8_t* out,
                       Stream stream, int64_t* nonfinite_groups) {
  TACO_CHECK(dtype == DType::f32 || dtype == DType::bf16, "messages are fp32 or bf16");
  TACO_CHECK(detail::aligned16(out), "device codec: the wire buffer must be 16-byte aligned");
  TACO_CHECK(x != nullptr || message.spec.count() == 0, "device codec: null input");
  if (dtype == DType::bf16) {
    codec::encode_typed(static_cast<const uint16_t*>(x), message, out, stream, nonfinite_groups);
  } else {
    codec::encode_typed(static_cast<const float*>(x), message, out, stream, nonfinite_groups);
  }
}

}  // namespace taco::cuda
