// The self-check of a measured compressed call in one pass: this rank's own encoding of x is
// decoded tile by tile into registers (codec_fp8_group_decode.cuh's decode_tile, the values decode
// writes) and its error against x is summed there, so the decoded message never touches memory. The
// separate path (decode into a buffer, then kernels/cuda/roundtrip_error.cu over x and the
// buffer) moves wire + 4 + 2 + 4 bytes per bf16 element; this one moves wire + 2.
// Sums as kernels/roundtrip_error.h defines them, in double, in two stages of fixed shape (one
// partial per block of a grid that depends only on the message and the device, then one block
// adding the partials in order), so a result is the same from run to run.
// Along tokens with columns a multiple of 64, the check takes the decode's shared-memory stages
// (codec_fp8_token_stage.cuh) with the input's values beside the codes.
#include <cmath>

#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_group_decode.cuh"
#include "kernels/cuda/codec_fp8_token_decode.cuh"
#include "kernels/cuda/codec_fp8_token_stage.cuh"
#include "kernels/cuda/common.cuh"

// The staged check along tokens where it applies. TACO_CODEC_TUNING="TACO_CODEC_CHECK_STAGES=0"
// keeps the general kernel everywhere, to time one against the other (taco-bench codec's check).
#ifndef TACO_CODEC_CHECK_STAGES
#define TACO_CODEC_CHECK_STAGES 1
#endif

namespace taco::cuda {
namespace codec {
namespace {

// The three sums of one thread (error^2, signal^2, non-finite inputs).
struct ErrorSums {
  double err = 0, sig = 0, bad = 0;
  // x: the input value; y: the decoded one, rounded to bf16 first where the decode writes bf16.
  __device__ __forceinline__ void add(float x, float y, bool bf16) {
    if (bf16) y = bf16_bits_to_float(to_bf16_bits(y));
    const double a = x, d = double(y) - a;
    err += d * d;
    sig += a * a;
    bad += isfinite(x) ? 0.0 : 1.0;
  }
};

// N consecutive input values (bf16 bits or fp32) widened to fp32; vector loads when aligned.
template <int N, class TX>
__device__ __forceinline__ void load_inputs(const TX* x, int64_t i, bool vectorized, float* d) {
  if (vectorized) {
    load_run<N>(x + i, d);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) d[k] = load_one(x + i + k);
  }
}

// Adds the error of decoded tile v against x at the tile's elements: the indexing of the decode
// kernel's store (codec_fp8_decode.cu, store_tile), reading where it writes.
template <class S, bool kTokens, class TX>
__device__ __forceinline__ void add_tile_error(const TX* x, const TileRef& t, const GroupParams& p,
                                               const float (&v)[S::C][S::R], bool bf16,
                                               ErrorSums& s) {
  constexpr int R = S::R, C = S::C, kRun = S::kRun;
  if constexpr (kTokens) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (t.r0 + r >= t.n) continue;
      const int64_t i = t.base + r * t.stride_r;
      if (p.vectorized) {
        float in[C];
        load_inputs<C>(x, i, true, in);
#pragma unroll
        for (int c = 0; c < C; ++c) s.add(in[c], v[c][r], bf16);
      } else {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          if (c < t.columns) s.add(load_one(x + i + c), v[c][r], bf16);
        }
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < R; k += kRun) {
      if (p.vectorized) {
        if (t.r0 + S::offset(k) >= t.n) continue;
        float in[kRun];
        load_inputs<kRun>(x, t.base + S::offset(k), true, in);
#pragma unroll
        for (int e = 0; e < kRun; ++e) s.add(in[e], v[0][k + e], bf16);
      } else {
#pragma unroll
        for (int r = k; r < k + kRun; ++r) {
          if (t.r0 + S::offset(r) < t.n) s.add(load_one(x + t.base + S::offset(r)), v[0][r], bf16);
        }
      }
    }
  }
}

// The block's three sums into partials[block], [blocks + block], [2 * blocks + block]. Every
// thread of the block calls it (the header verdict is the block's).
__device__ __forceinline__ void write_block_sums(const ErrorSums& s, double* shared,
                                                 double* partials) {
  const double err = detail::block_sum(s.err, shared);
  const double sig = detail::block_sum(s.sig, shared);
  const double bad = detail::block_sum(s.bad, shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = err;
    partials[gridDim.x + blockIdx.x] = sig;
    partials[2 * gridDim.x + blockIdx.x] = bad;
  }
}

// One partial (three doubles) per block into partials[block], [blocks + block], [2 * blocks +
// block]. A block whose header check fails writes zeros (the status word carries the error).
template <int G, bool kTokens, class TX>
__global__ void __launch_bounds__(kThreads)
    fp8_group_decode_error_kernel(const uint8_t* __restrict__ in, uint64_t size,
                                  WireExpectation expect, const TX* __restrict__ x,
                                  bool decoded_bf16, GroupParams p, uint32_t* status,
                                  double* partials) {
  __shared__ double shared[32];
  ErrorSums s;
  if (block_accepts_header(in, size, expect, status)) {
    using S = TileShape<4, G, kTokens>;  // fp32 values, as the reduce kernel decodes them
    constexpr int L = S::L;
    const int lane = threadIdx.x % 32, li = lane % L;
    const uint8_t* codes_in = in + kWireHeaderBytes;
    const uint8_t* scales = in + p.scales_offset;
    int64_t poisoned = 0;  // not reported: the call's own decode counts the receivers' groups
    const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
    const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
    for (int64_t t0 = warp * S::kTilesPerWarp; t0 < p.tiles; t0 += warps * S::kTilesPerWarp) {
      const TileRef t = tile_at<S, G, kTokens>(t0 + lane / L, li, p);
      float v[S::C][S::R];
      decode_tile<S, kTokens>(codes_in, scales, t, li, p, v, poisoned);
      if (t.n > 0) add_tile_error<S, kTokens>(x, t, p, v, decoded_bf16, s);
    }
  }
  write_block_sums(s, shared, partials);
}

// The staged check along tokens: the stage ring of the token decode
// (fp8_group_decode_token_stages_kernel: each stage's codes and scale entries, cp.async) with the
// stage's input values (copy_value_rows, the encode's layout) in the same slot, so that each lane
// decodes its group in the along-hidden lanes and finds the input of each of its elements in
// shared memory at the row and column the decode would have written. Nothing is written out.
// Slots: 4 where they fit in 100 KB, else 3, else 2 (two blocks a multiprocessor up to 100 KB).
template <int G, class TX>
struct CheckStages {
  using TS = TokenStage<G>;
  static constexpr int kValueBytes = TS::kRows * TS::W * int(sizeof(TX));
  static constexpr int kSlotBytes = TS::kCodeBytes + TS::kScaleBytes + kValueBytes;
  static constexpr int kStages = 4 * kSlotBytes <= 100 * 1024   ? 4
                                 : 3 * kSlotBytes <= 100 * 1024 ? 3
                                                                : 2;
  static constexpr int kShared = kStages * kSlotBytes;
  static constexpr bool kFits = kShared <= kTokenStagesMaxShared;  // not fp32 at G = 512
};

template <int G, class TX, FixedOptions kFixed>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_group_decode_error_token_stages_kernel(const uint8_t* __restrict__ in, uint64_t size,
                                               WireExpectation expect, const TX* __restrict__ x,
                                               bool decoded_bf16, GroupParams p, uint32_t* status,
                                               double* partials) {
  using C = CheckStages<G, TX>;
  using TS = typename C::TS;
  using S = typename TS::S;
  __shared__ double shared[32];
  ErrorSums s;
  if (block_accepts_header(in, size, expect, status)) {
    constexpr int R = S::R, W = TS::W, kRows = TS::kRows;
    constexpr int kValuesAt = TS::kCodeBytes + TS::kScaleBytes;  // codes, scale entries, values
    const Fp8Scales mode = codec_options<kFixed>(p).scales;
    const bool dual = mode == Fp8Scales::dual, e8m0 = mode == Fp8Scales::e8m0;
    extern __shared__ uint4 stage_shared[];
    const uint8_t* const ring = reinterpret_cast<const uint8_t*>(stage_shared);
    const uint32_t ring_addr = detail::smem_addr(ring);
    const uint8_t* codes_in = in + kWireHeaderBytes;
    const uint8_t* scales = in + p.scales_offset;
    const int li = threadIdx.x % 32 % S::L;
    int64_t poisoned = 0;  // not reported, as in fp8_group_decode_error_kernel

    auto fetch = [&](int64_t stage, int slot) {
      const bool any = stage < p.tiles;
      const StageRef st = any ? stage_at<W>(stage, kRows, p) : StageRef{0, 0};
      const uint32_t dst = ring_addr + slot * C::kSlotBytes;
      copy_coded_stage<TS>(dst, codes_in, scales, st, any, p, dual, e8m0);
      copy_value_rows<TS>(dst + kValuesAt, x, st, any, p);
      cp_async_commit();
    };

    auto check_stage = [&](const StageRef& st, int slot, auto whole) {
      constexpr bool kWhole = decltype(whole)::value;
      const uint8_t* src = ring + slot * C::kSlotBytes;
#pragma unroll 1
      for (int pass = 0; pass < TS::kPasses; ++pass) {
        const auto [block, col, first, t] = stage_group<TS, kWhole>(pass, st, p);
        const CodedTile<S> ct = stage_coded_tile<TS>(src, block, col, first, t.n, mode);
        float v[1][R];
        decode_loaded_tile<S, false, kWhole, false, kFixed>(ct, t, li, p, v, poisoned);
        float input[R];
        read_stage_values<TS, TX>(src + kValuesAt, first, col, input);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (kWhole || t.r0 + S::offset(r) < t.n) s.add(input[r], v[0][r], decoded_bf16);
        }
      }
    };
    for_each_token_stage<C::kStages, G>(p, fetch, check_stage);
  }
  write_block_sums(s, shared, partials);
}

// One block: each thread adds its stride of partials in order, then the block sums in its fixed
// order, into sums.
__global__ void fp8_decode_error_add_partials_kernel(double* sums, const double* partials,
                                                     unsigned blocks) {
  __shared__ double shared[32];
  for (int k = 0; k < 3; ++k) {
    double mine = 0;
    for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) mine += partials[k * blocks + b];
    const double total = detail::block_sum(mine, shared);
    if (threadIdx.x == 0) sums[k] += total;
  }
}

struct CheckArgs {
  const uint8_t* in;
  uint64_t size;
  WireExpectation expect;
  GroupParams p;
  const void* x;
  bool x_bf16, decoded_bf16;
  double* sums;
  uint32_t* status;
  cudaStream_t stream;
};

// Kernel on `blocks` blocks with `shared` bytes, then the partials added into a.sums.
template <auto Kernel, class TX>
void launch_with_partials(const CheckArgs& a, const GroupParams& p, unsigned blocks, int shared) {
  auto* partials =
      static_cast<double*>(detail::scratch(a.stream, 3 * size_t(blocks) * sizeof(double)));
  Kernel<<<blocks, kThreads, shared, a.stream>>>(
      a.in, a.size, a.expect, static_cast<const TX*>(a.x), a.decoded_bf16, p, a.status, partials);
  TACO_LAUNCH_OK();
  fp8_decode_error_add_partials_kernel<<<1, kThreads, 0, a.stream>>>(a.sums, partials, blocks);
  TACO_LAUNCH_OK();
}

template <int G, class TX, FixedOptions kFixed>
void launch_token_stages(const CheckArgs& a, const GroupParams& p) {
  constexpr int shared = CheckStages<G, TX>::kShared;
  constexpr auto kernel = fp8_group_decode_error_token_stages_kernel<G, TX, kFixed>;
  allow_stage_shared_memory<kernel>(shared);
  launch_with_partials<kernel, TX>(a, p, wave_grid<kernel>(p.tiles, 1, shared), shared);
}

template <int G, bool kTokens, class TX>
void launch(const CheckArgs& a) {
  GroupParams p = a.p;
  if constexpr (kTokens && TACO_CODEC_CHECK_STAGES != 0 && CheckStages<G, TX>::kFits) {
    if (p.tiles > 0 && token_stages_apply<G>(p, detail::aligned16(a.x))) {
      set_token_stages<G>(p);
      if constexpr (sizeof(TX) == 2) {  // the training's case: options fixed where they can be
        return with_fixed_options(
            p, [&](auto fixed) { launch_token_stages<G, TX, decltype(fixed)::value>(a, p); });
      } else {
        return launch_token_stages<G, TX, FixedOptions::none>(a, p);
      }
    }
  }
  using S = TileShape<4, G, kTokens>;
  set_tiles<S, G, kTokens>(p, detail::aligned16(a.x));
  constexpr auto kernel = fp8_group_decode_error_kernel<G, kTokens, TX>;
  launch_with_partials<kernel, TX>(
      a, p, wave_grid<kernel>(p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp, 0), 0);
}

template <int G, bool kTokens>
void launch_typed(const CheckArgs& a) {
  if (a.x_bf16) {
    launch<G, kTokens, uint16_t>(a);
  } else {
    launch<G, kTokens, float>(a);
  }
}

template <bool kTokens>
void dispatch(int group, const CheckArgs& a) {
  switch (group) {
    case 32:
      return launch_typed<32, kTokens>(a);
    case 64:
      return launch_typed<64, kTokens>(a);
    case 128:
      return launch_typed<128, kTokens>(a);
    case 256:
      return launch_typed<256, kTokens>(a);
    case 512:
      return launch_typed<512, kTokens>(a);
  }
  TACO_CHECK(false, "device codec: group " + std::to_string(group) + " is not supported");
}

}  // namespace
}  // namespace codec

bool fp8_decode_error_device(const uint8_t* in, size_t size, const Fp8DeviceMessage& message,
                             const void* x, DType x_dtype, DType decoded_dtype, double* sums,
                             Stream stream, uint32_t* status) {
  const Fp8GroupSpec& s = message.spec;
  if (s.group == 0) return false;  // fp8_tensor: the caller decodes and sums apart
  TACO_CHECK(x_dtype == DType::f32 || x_dtype == DType::bf16, "messages are fp32 or bf16");
  TACO_CHECK(decoded_dtype == DType::f32 || decoded_dtype == DType::bf16,
             "decoded values are fp32 or bf16");
  TACO_CHECK(status != nullptr, "device decode needs a status word");
  TACO_CHECK(detail::aligned16(in), "device codec: the wire buffer must be 16-byte aligned");
  if (s.count() == 0) return true;
  codec::CheckArgs a;
  a.in = in;
  a.size = size;
  a.expect = codec::wire_expectation(message);
  a.p = codec::group_params(message);
  a.x = x;
  a.x_bf16 = x_dtype == DType::bf16;
  a.decoded_bf16 = decoded_dtype == DType::bf16;
  a.sums = sums;
  a.status = status;
  a.stream = static_cast<cudaStream_t>(stream);
  if (s.along_tokens) {
    codec::dispatch<true>(int(s.group), a);
  } else {
    codec::dispatch<false>(int(s.group), a);
  }
  return true;
}

}  // namespace taco::cuda
