// Grouped FP8 decode on the device: header check (codec_fp8_wire_check.cuh), then per group in
// registers fp8 -> fp32, times the scale, [Hadamard,] [/ a], stored as fp32 or bf16 or added into
// fp32. Values identical to kernels/cpu/codec_fp8.cpp (NaN payloads aside: a GPU add or multiply on
// a NaN returns the canonical NaN where the CPU keeps the operand's).
#include <cuda_bf16.h>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_group_decode.cuh"
#include "kernels/cuda/codec_fp8_token_decode.cuh"
#include "kernels/cuda/codec_fp8_token_stage.cuh"
#include "kernels/cuda/common.cuh"

namespace taco::cuda {
namespace codec {
namespace {

// The decode kernels' tile shape (codec_fp8_tile.cuh): R up to TACO_CODEC_DECODE_MAX_R for bf16
// outputs, TACO_CODEC_DECODE_F32_MAX_R for fp32 ones.
template <class TOut, int G, bool kTokens>
using DecodeShape =
    TileShape<int(sizeof(TOut)), G, kTokens,
              sizeof(TOut) == 2 ? TACO_CODEC_DECODE_MAX_R : TACO_CODEC_DECODE_F32_MAX_R>;

// Where decoded values go: fp32 (store or accumulate) or bf16 bits.
template <class TOut, bool kAccumulate>
struct Sink {
  static_assert(!kAccumulate || sizeof(TOut) == 4, "decode-accumulate is fp32");
  TOut* out;

  __device__ __forceinline__ void one(int64_t i, float v) const {
    if constexpr (sizeof(TOut) == 2) {
      out[i] = to_bf16_bits(v);
    } else if constexpr (kAccumulate) {
      out[i] = __fadd_rn(out[i], v);
    } else {
      out[i] = v;
    }
  }

  // N consecutive values at i (aligned to the access).
  template <int N>
  __device__ __forceinline__ void run(int64_t i, const float* v) const {
    if constexpr (sizeof(TOut) == 2) {
      static_assert(N % 2 == 0, "bf16 runs are pairs");
      uint32_t w[N / 2];  // one conversion per pair (NaN: the canonical bf16 NaN)
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *reinterpret_cast<const uint32_t*>(&b);
      }
      store_bytes<2 * N>(reinterpret_cast<uint8_t*>(out + i), w);
    } else {
      static_assert(N % 4 == 0, "fp32 runs are float4");
#pragma unroll
      for (int k = 0; k < N; k += 4) {
        float4* p = reinterpret_cast<float4*>(out + i + k);
        float4 t = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
        if constexpr (kAccumulate) {
          const float4 o = *p;
          t = make_float4(__fadd_rn(o.x, t.x), __fadd_rn(o.y, t.y), __fadd_rn(o.z, t.z),
                          __fadd_rn(o.w, t.w));
        }
        *p = t;
      }
    }
  }
};

// The ring of the decode along hidden: stages of one tile's codes per warp, J runs per lane.
template <class S, class TOut>
struct DecodeRing {
  static constexpr int J = S::R / S::kRun;
  static constexpr int kRunBytes = S::kRun;  // one byte per code
  static constexpr int kTileBytes = J * 32 * kRunBytes;
  static constexpr int kStages = ring_stages(
      sizeof(TOut) == 2 ? TACO_CODEC_DECODE_RING_BYTES : TACO_CODEC_DECODE_F32_RING_BYTES,
      kTileBytes);
  static constexpr int kBlockBytes = kStages * kTileBytes * (kThreads / 32);
};

// Decoded values v of tile t into the sink (kWhole: as load_coded_tile's).
template <class S, bool kTokens, class Sink, bool kWhole = false>
__device__ __forceinline__ void store_tile(const Sink& sink, const TileRef& t, const GroupParams& p,
                                           const float (&v)[S::C][S::R]) {
  constexpr int R = S::R, C = S::C, kRun = S::kRun;
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (t.r0 + r >= t.n) continue;
      const int64_t i = t.base + r * t.stride_r;
      if (p.vectorized) {
        float run[C];
#pragma unroll
        for (int c = 0; c < C; ++c) run[c] = v[c][r];
        sink.template run<C>(i, run);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (c < t.columns) sink.one(i + c, v[c][r]);
        }
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < R; k += kRun) {
      if (kWhole || p.vectorized) {
        if (kWhole ? t.n > 0 : t.r0 + S::offset(k) < t.n)
          sink.template run<kRun>(t.base + S::offset(k), &v[0][k]);
      } else {
#pragma unroll
        for (int r = k; r < k + kRun; ++r) {
          if (t.r0 + S::offset(r) < t.n) sink.one(t.base + S::offset(r), v[0][r]);
        }
      }
    }
  }
}

// Blocks per SM the decode is built for: along hidden per output type (codec_fp8_tile.cuh); along
// tokens 2, where 3 made ptxas spill up to 860 bytes (fp32 outputs) and the decode-accumulate along
// tokens fell from ~1170 to ~865 GB/s (H200, 2026-12-03).
template <class TOut, bool kTokens>
constexpr int decode_min_blocks() {
  return kTokens             ? TACO_CODEC_MIN_BLOCKS
         : sizeof(TOut) == 2 ? TACO_CODEC_DECODE_MIN_BLOCKS
                             : TACO_CODEC_DECODE_F32_MIN_BLOCKS;
}

// kWhole: launched only for bf16 outputs along hidden where p.whole_groups and p.vectorized hold
// (see tile_at and load_coded_tile), with taco's or fp8_block's default options fixed at compile
// time or the message's (kFixed, see codec_options).
template <class TOut, int G, bool kTokens, bool kAccumulate, bool kWhole,
          FixedOptions kFixed = FixedOptions::none>
__global__ void __launch_bounds__(kThreads, decode_min_blocks<TOut, kTokens>())
    fp8_group_decode_kernel(const uint8_t* __restrict__ in, uint64_t size, WireExpectation expect,
                            TOut* __restrict__ out, GroupParams p, uint32_t* status,
                            int64_t* nonfinite_groups) {
  if (!block_accepts_header(in, size, expect, status)) return;
  using S = DecodeShape<TOut, G, kTokens>;
  constexpr int R = S::R, L = S::L, C = S::C, kRun = S::kRun;
  const Sink<TOut, kAccumulate> sink{out};
  const int lane = threadIdx.x % 32, li = lane % L;
  const uint8_t* codes_in = in + kWireHeaderBytes;
  const uint8_t* scales = in + p.scales_offset;
  int64_t poisoned_groups = 0;
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);  // launched with kThreads

  const int64_t step = warps * S::kTilesPerWarp;
  if constexpr (!kTokens) {
    using Ring = DecodeRing<S, TOut>;
    if (p.vectorized && Ring::kStages > 0) {
      // Along hidden with aligned rows: each lane copies its codes of the tiles kStages - 1
      // ahead into its warp's ring (cp.async) and reads the scales one tile ahead, so that
      // loads stay in flight while the warp computes (past the end: empty tiles, zeros).
      constexpr int J = Ring::J, kStages = Ring::kStages, kRunBytes = Ring::kRunBytes;
      extern __shared__ uint4 ring_shared[];
      uint8_t* ring = reinterpret_cast<uint8_t*>(ring_shared) +
                      (threadIdx.x / 32) * (kStages * Ring::kTileBytes) + lane * kRunBytes;
      auto fetch = [&](int64_t first_tile, int stage) {
        const TileRef f = tile_at<S, G, kTokens>(first_tile + lane / L, li, p);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const int k = j * kRun;
          const bool valid = f.r0 + S::offset(k) < f.n;
          cp_async<kRunBytes>(ring + (stage * J + j) * 32 * kRunBytes,
                              valid ? codes_in + f.base + S::offset(k) : codes_in, valid);
        }
        cp_async_commit();
      };
      auto scale_of = [&](const TileRef& f) {
        return f.n > 0 ? read_scale(scales, f.first_group, p.num_groups, p.scales)
                       : DecodeScale{1.f, 1.f, false};
      };
      int64_t t0 = warp * S::kTilesPerWarp;
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) fetch(t0 + s * step, s);
      TileRef t = tile_at<S, G, kTokens>(t0 + lane / L, li, p);
      DecodeScale scale = scale_of(t);
      int stage = 0;
      for (; t0 < p.tiles; t0 += step) {
        const TileRef tn = tile_at<S, G, kTokens>(t0 + step + lane / L, li, p);
        const DecodeScale scale_next = scale_of(tn);
        cp_async_wait<kStages - 2>();  // this tile's codes are in the ring
        CodedTile<S> ct;
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const uint8_t* src = ring + (stage * J + j) * 32 * kRunBytes;
          if constexpr (kRunBytes == 16) {
            const uint4 w = *reinterpret_cast<const uint4*>(src);
            ct.packed[4 * j] = w.x, ct.packed[4 * j + 1] = w.y;
            ct.packed[4 * j + 2] = w.z, ct.packed[4 * j + 3] = w.w;
          } else if constexpr (kRunBytes == 8) {
            const uint2 w = *reinterpret_cast<const uint2*>(src);
            ct.packed[2 * j] = w.x, ct.packed[2 * j + 1] = w.y;
          } else {
            ct.packed[j] = *reinterpret_cast<const uint32_t*>(src);
          }
        }
        ct.scale[0] = scale;
        // into the stage read in the previous iteration
        fetch(t0 + (kStages - 1) * step, stage == 0 ? kStages - 1 : stage - 1);
        stage = stage == kStages - 1 ? 0 : stage + 1;
        float v[C][R];
        decode_loaded_tile<S, kTokens, false, false, FixedOptions::none, sizeof(TOut) == 2>(
            ct, t, li, p, v, poisoned_groups);
        store_tile<S, kTokens>(sink, t, p, v);
        t = tn;
        scale = scale_next;
      }
      cp_async_wait<0>();
      add_count(nonfinite_groups, poisoned_groups);
      return;
    }
  }

  // Otherwise each warp reads its next tile's codes and scales before the arithmetic of the
  // current one, so that the loads are in flight while it computes (past the end, tile_at gives
  // an empty tile and nothing is read).
  // bf16 outputs decode their scales with the tile (CodedTile's kDeferred)
  constexpr bool kDeferred = sizeof(TOut) == 2;
  int64_t t0 = warp * S::kTilesPerWarp;
  TileRef t = tile_at<S, G, kTokens, kWhole>(t0 + lane / L, li, p);
  CodedTile<S, kDeferred> ct;
  load_coded_tile<S, kTokens, kWhole, kDeferred, kFixed>(codes_in, scales, t, p, ct);
  for (; t0 < p.tiles; t0 += step) {
    const TileRef tn = tile_at<S, G, kTokens, kWhole>(t0 + step + lane / L, li, p);
    CodedTile<S, kDeferred> next;
    load_coded_tile<S, kTokens, kWhole, kDeferred, kFixed>(codes_in, scales, tn, p, next);

    float v[C][R];
    decode_loaded_tile<S, kTokens, kWhole, kDeferred, kFixed, sizeof(TOut) == 2>(ct, t, li, p, v,
                                                                                 poisoned_groups);
    store_tile<S, kTokens, Sink<TOut, kAccumulate>, kWhole>(sink, t, p, v);
    ct = next;
    t = tn;
  }
  if (poisoned_groups != 0 && nonfinite_groups != nullptr) {
    atomicAdd(reinterpret_cast<unsigned long long*>(nonfinite_groups),
              static_cast<unsigned long long>(poisoned_groups));
  }
}

// fp8_tensor: one scale; codes are independent elements.
constexpr int kTensorRun = 8;

// Eight codes (two words) times the scale, two codes per conversion.
template <Fp8Format F>
__device__ __forceinline__ void tensor_values(const uint32_t (&w)[2], float mul,
                                              float (&v)[kTensorRun]) {
#pragma unroll
  for (int k = 0; k < kTensorRun; k += 2) {
    const float2 f = fp8x2_to_float2<F>(w[k / 4] >> (8 * (k % 4)));
    v[k] = __fmul_rn(f.x, mul);
    v[k + 1] = __fmul_rn(f.y, mul);
  }
}

template <class TOut, bool kAccumulate>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_tensor_decode_kernel(const uint8_t* __restrict__ in, uint64_t size, WireExpectation expect,
                             TOut* __restrict__ out, int64_t n, uint64_t scales_offset,
                             Fp8Format format, bool vectorized, uint32_t* status,
                             int64_t* nonfinite_groups) {
  if (!block_accepts_header(in, size, expect, status)) return;
  const Sink<TOut, kAccumulate> sink{out};
  if (n == 0) return;  // no scale section to read
  const DecodeScale d = read_scale(in + scales_offset, 0, 1, Fp8Scales::single);
  if (d.poisoned && blockIdx.x == 0 && threadIdx.x == 0 && nonfinite_groups != nullptr) {
    atomicAdd(reinterpret_cast<unsigned long long*>(nonfinite_groups), 1ull);
  }
  const uint8_t* codes = in + kWireHeaderBytes;
  // CPU: table[code] * mul / a with a = 1, which is table[code] * mul exactly.
  auto value = [&](uint32_t code) {
    return d.poisoned ? quiet_nan() : __fmul_rn(from_fp8(code, format), d.mul);
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = vectorized ? n / kTensorRun : 0;
  for (int64_t i = start; i < runs; i += stride) {
    uint32_t w[2];
    load_bytes<8>(codes + i * kTensorRun, w);
    float v[kTensorRun];
    if (d.poisoned) {
#pragma unroll
      for (int k = 0; k < kTensorRun; ++k) v[k] = quiet_nan();
    } else if (format == Fp8Format::e4m3) {
      tensor_values<Fp8Format::e4m3>(w, d.mul, v);
    } else {
      tensor_values<Fp8Format::e5m2>(w, d.mul, v);
    }
    sink.template run<kTensorRun>(i * kTensorRun, v);
  }
  for (int64_t i = runs * kTensorRun + start; i < n; i += stride) sink.one(i, value(codes[i]));
  // kernels/codec_fp8.h's count of a message decoded to Inf from finite codes: only where the
  // scale allows an output past 2^127 (never an ordinary message), and then block 0 looks at every
  // value once more, so that the message counts once.
  const float target = format == Fp8Format::e4m3 ? 448.f : 57344.f;
  if (blockIdx.x == 0 && !d.poisoned && may_overflow(__fmul_rn(target, fabsf(d.mul)), 1.f)) {
    constexpr uint32_t from = sizeof(TOut) == 2 ? 0x7F7F8000u : 0x7F800000u;  // bf16: rounds to Inf
    int bad = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      bad |= int((__float_as_uint(value(codes[i])) & 0x7FFFFFFFu) >= from);
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) add_count(nonfinite_groups, 1);
  }
}

struct DecodeArgs {
  const uint8_t* in;
  uint64_t size;
  WireExpectation expect;
  GroupParams p;
  uint32_t* status;
  int64_t* nonfinite_groups;
  cudaStream_t stream;
};

template <class TOut, bool kAccumulate, int G, FixedOptions kFixed>
void launch_decode_token_stages(const DecodeArgs& a, const GroupParams& p, TOut* out) {
  using TS = TokenStage<G>;  // the paired stage has the same sizes
  constexpr auto kernel = fp8_group_decode_token_stages_kernel<TOut, kAccumulate, G, kFixed>;
  constexpr int shared =
      TS::kCodeStages * (TS::kCodeBytes + TS::kScaleBytes) + TS::kRows * TS::W * int(sizeof(TOut));
  allow_stage_shared_memory<kernel>(shared);
  const unsigned blocks = wave_grid<kernel>(p.tiles, 1, shared);
  kernel<<<blocks, kThreads, shared, a.stream>>>(a.in, a.size, a.expect, out, p, a.status,
                                                 a.nonfinite_groups);
  TACO_LAUNCH_OK();
}

template <class TOut, int G, bool kTokens, bool kAccumulate, bool kWhole,
          FixedOptions kFixed = FixedOptions::none>
void launch_decode_kernel(const DecodeArgs& a, const GroupParams& p, TOut* out) {
  using S = DecodeShape<TOut, G, kTokens>;
  int shared = 0;
  if constexpr (!kTokens) {
    if (p.vectorized) shared = DecodeRing<S, TOut>::kBlockBytes;
  }
  constexpr auto kernel = fp8_group_decode_kernel<TOut, G, kTokens, kAccumulate, kWhole, kFixed>;
  allow_shared_memory<kernel>(shared);
  const unsigned blocks =
      wave_grid<kernel>(p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp, shared);
  kernel<<<blocks, kThreads, shared, a.stream>>>(a.in, a.size, a.expect, out, p, a.status,
                                                 a.nonfinite_groups);
  TACO_LAUNCH_OK();
}

template <class TOut, int G, bool kTokens, bool kAccumulate>
void launch_decode_groups(const DecodeArgs& a, TOut* out) {
  using S = DecodeShape<TOut, G, kTokens>;
  GroupParams p = a.p;
  if constexpr (kTokens) {
    if (p.tiles > 0 && token_stages_apply<G>(p, detail::aligned16(out))) {
      set_token_stages<G>(p);
      return with_fixed_options(p, [&](auto fixed) {
        launch_decode_token_stages<TOut, kAccumulate, G, decltype(fixed)::value>(a, p, out);
      });
    }
  }
  set_tiles<S, G, kTokens>(p, detail::aligned16(out));
  if constexpr (!kTokens && sizeof(TOut) == 2) {  // bf16 outputs (see CodedTile's kDeferred)
    if (p.whole_groups && p.vectorized) {
      return with_fixed_options(p, [&](auto fixed) {
        launch_decode_kernel<TOut, G, kTokens, kAccumulate, true, decltype(fixed)::value>(a, p,
                                                                                          out);
      });
    }
  }
  launch_decode_kernel<TOut, G, kTokens, kAccumulate, false>(a, p, out);
}

template <class TOut, bool kTokens, bool kAccumulate>
void dispatch_group(int group, const DecodeArgs& a, TOut* out) {
  switch (group) {
    case 32:
      return launch_decode_groups<TOut, 32, kTokens, kAccumulate>(a, out);
    case 64:
      return launch_decode_groups<TOut, 64, kTokens, kAccumulate>(a, out);
    case 128:
      return launch_decode_groups<TOut, 128, kTokens, kAccumulate>(a, out);
    case 256:
      return launch_decode_groups<TOut, 256, kTokens, kAccumulate>(a, out);
    case 512:
      return launch_decode_groups<TOut, 512, kTokens, kAccumulate>(a, out);
  }
  TACO_CHECK(false, "device codec: group " + std::to_string(group) + " is not supported");
}

template <class TOut, bool kAccumulate>
void decode_typed(const DecodeArgs& a, const Fp8DeviceMessage& m, TOut* out) {
  const Fp8GroupSpec& s = m.spec;
  if (s.group == 0) {
    const int64_t n = s.count();
    const unsigned blocks = wave_grid<fp8_tensor_decode_kernel<TOut, kAccumulate>>(
        n, int64_t(kThreads) * kTensorRun, 0);
    fp8_tensor_decode_kernel<TOut, kAccumulate><<<blocks, kThreads, 0, a.stream>>>(
        a.in, a.size, a.expect, out, n, m.scales_offset, s.format, detail::aligned16(out), a.status,
        a.nonfinite_groups);
    TACO_LAUNCH_OK();
    return;
  }
  if (s.along_tokens) {
    dispatch_group<TOut, true, kAccumulate>(int(s.group), a, out);
  } else {
    dispatch_group<TOut, false, kAccumulate>(int(s.group), a, out);
  }
}

}  // namespace
}  // namespace codec

void fp8_decode_device(const uint8_t* in, size_t size, const Fp8DeviceMessage& message, void* out,
                       DType out_dtype, bool accumulate, Stream stream, uint32_t* status,
                       int64_t* nonfinite_groups) {
  TACO_CHECK(out_dtype == DType::f32 || out_dtype == DType::bf16, "messages are fp32 or bf16");
  TACO_CHECK(!accumulate || out_dtype == DType::f32, "decode-accumulate writes fp32");
  TACO_CHECK(status != nullptr, "device decode needs a status word");
  TACO_CHECK(detail::aligned16(in), "device codec: the wire buffer must be 16-byte aligned");
  codec::DecodeArgs a;
  a.in = in;
  a.size = size;
  a.expect = codec::wire_expectation(message);
  a.p = codec::group_params(message);
  a.status = status;
  a.nonfinite_groups = nonfinite_groups;
  a.stream = stream;
  if (out_dtype == DType::bf16) {
    codec::decode_typed<uint16_t, false>(a, message, static_cast<uint16_t*>(out));
  } else if (accumulate) {
    codec::decode_typed<float, true>(a, message, static_cast<float*>(out));
  } else {
    codec::decode_typed<float, false>(a, message, static_cast<float*>(out));
  }
}

}  // namespace taco::cuda
