// The middle step of the two-shot all-reduce on the device: p received messages decoded, summed
// in fp32 in rank order and re-encoded, in one kernel for the grouped codecs. Each tile is
// decoded p times into registers (codec_fp8_group_decode.cuh, decode_tile), summed there, and
// quantized (encode_tile): the p inputs are read once and the sum never touches memory. taco sums
// its transform's coefficients (kernels/codec_fp8.h: no butterflies here at all, kCoeffs). The
// bytes are the host's Codec::decode_sum_encode.
#include "kernels/codec_fp8.h"
#include "kernels/cuda/codec_fp8_group_decode.cuh"
#include "kernels/cuda/codec_fp8_token_stage.cuh"
#include "kernels/cuda/common.cuh"

namespace taco::cuda {
namespace codec {
namespace {

template <int G, bool kTokens>
__global__ void __launch_bounds__(kThreads)
    fp8_group_decode_sum_encode_kernel(const uint8_t* __restrict__ in, uint64_t slot, int count,
                                       uint64_t size, WireExpectation expect,
                                       uint8_t* __restrict__ out, GroupParams p, HeaderParams hp,
                                       uint32_t* status, int64_t* nonfinite_groups) {
  // Every header first: no block writes anything from a rejected message.
  if (!block_accepts_headers(in, slot, count, size, expect, status)) return;

  using S = TileShape<4, G, kTokens>;  // the sum is fp32
  constexpr int R = S::R, L = S::L, C = S::C;
  write_header_and_padding(out, hp);
  const int lane = threadIdx.x % 32, li = lane % L;
  int64_t poisoned_in = 0, poisoned_out = 0;  // out: counted when the sum is decoded
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);  // launched with kThreads

  for (int64_t t0 = warp * S::kTilesPerWarp; t0 < p.tiles; t0 += warps * S::kTilesPerWarp) {
    const TileRef t = tile_at<S, G, kTokens>(t0 + lane / L, li, p);
    float sum[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c) {
#pragma unroll
      for (int r = 0; r < R; ++r) sum[c][r] = 0.f;
    }
    for (int i = 0; i < count; ++i) {
      const uint8_t* message = in + uint64_t(i) * slot;
      float v[C][R];
      decode_tile<S, kTokens, true>(message + kWireHeaderBytes, message + p.scales_offset, t, li, p,
                                    v, poisoned_in);
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int r = 0; r < R; ++r) sum[c][r] = __fadd_rn(sum[c][r], v[c][r]);
      }
    }
    encode_tile<S, kTokens, false, FixedOptions::none, true>(sum, t, li, p, out + kWireHeaderBytes,
                                                             out + p.scales_offset, poisoned_out);
  }
  add_count(nonfinite_groups, poisoned_in);
}

// The whole-group kernel's lane layout and blocks per multiprocessor (TACO_CODEC_TUNING can
// override them, for benchmarking).
#ifndef TACO_CODEC_REDUCE_MAX_R
#define TACO_CODEC_REDUCE_MAX_R 32
#endif
// Blocks per multiprocessor: 3 at G = 32 (its registers fit without spilling: 1857 against 1712
// GB/s on an H100), else 2 (3 spilled up to 268 bytes and ran 30-40% slower).
#ifndef TACO_CODEC_REDUCE_MIN_BLOCKS
#define TACO_CODEC_REDUCE_MIN_BLOCKS(G) ((G) == 32 ? 3 : TACO_CODEC_MIN_BLOCKS)
#endif
template <int G>
using WholeReduceShape = TileShape<1, G, false, TACO_CODEC_REDUCE_MAX_R>;

// Along hidden with whole groups and 16-byte aligned rows of codes, for 2 or 4 messages (the
// two-shot all-reduce at tp = 2 and 4), the kernel above specialized (measured on an H100 with
// Nsight Compute: the general one issued ~66 instructions per element at 25% occupancy, 17% of
// them branches and selects of options known at launch, and its 4-byte code loads wasted 48% of
// the sectors): a lane holds its codes in 16-byte runs (tile shape of 1-byte elements), the
// options are fixed at compile time where they are a codec's defaults (kFixed), the loops over
// messages unroll (kCount), and each tile's codes and scales of every message are read together,
// one tile ahead of the arithmetic for two messages. The sums, their order and the bytes are the
// general kernel's.
template <int G, FixedOptions kFixed, int kCount>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_REDUCE_MIN_BLOCKS(G))
    fp8_group_decode_sum_encode_whole_kernel(const uint8_t* __restrict__ in, uint64_t slot,
                                             int count, uint64_t size, WireExpectation expect,
                                             uint8_t* __restrict__ out, GroupParams p,
                                             HeaderParams hp, uint32_t* status,
                                             int64_t* nonfinite_groups) {
  if (!block_accepts_headers(in, slot, count, size, expect, status)) return;
  using S = WholeReduceShape<G>;  // codes in 16-byte runs; the values are fp32 in registers
  constexpr int R = S::R, L = S::L;
  write_header_and_padding(out, hp);
  const int lane = threadIdx.x % 32, li = lane % L;
  int64_t poisoned_in = 0, poisoned_out = 0;  // out: counted when the sum is decoded
  const int64_t warp = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);  // launched with kThreads
  const int64_t step = warps * S::kTilesPerWarp;
  uint8_t* const codes_out = out + kWireHeaderBytes;
  uint8_t* const scales_out = out + p.scales_offset;

  auto load = [&](const TileRef& t, CodedTile<S>(&ct)[kCount]) {
#pragma unroll
    for (int m = 0; m < kCount; ++m) {
      const uint8_t* message = in + uint64_t(m) * slot;
      load_coded_tile<S, false, true, false, kFixed>(message + kWireHeaderBytes,
                                                     message + p.scales_offset, t, p, ct[m]);
    }
  };
  // Two messages' next codes fit in registers beside the arithmetic; four spill (ptxas: up to
  // 228 bytes), so there each tile's loads are only issued together.
  constexpr bool kAhead = kCount <= 2;
  int64_t t0 = warp * S::kTilesPerWarp;
  TileRef t = tile_at<S, G, false, true>(t0 + lane / L, li, p);
  CodedTile<S> ct[kCount];
  if (kAhead) load(t, ct);
  for (; t0 < p.tiles; t0 += step) {
    const TileRef tn = tile_at<S, G, false, true>(t0 + step + lane / L, li, p);
    CodedTile<S> next[kCount];
    if (kAhead) {
      load(tn, next);
    } else {
      load(t, ct);
    }
    float sum[1][R];
#pragma unroll
    for (int r = 0; r < R; ++r) sum[0][r] = 0.f;
#pragma unroll
    for (int m = 0; m < kCount; ++m) {
      float v[1][R];
      decode_loaded_tile<S, false, true, false, kFixed, false, true>(ct[m], t, li, p, v,
                                                                     poisoned_in);
#pragma unroll
      for (int r = 0; r < R; ++r) sum[0][r] = __fadd_rn(sum[0][r], v[0][r]);
    }
    encode_tile<S, false, true, kFixed, true>(sum, t, li, p, codes_out, scales_out, poisoned_out);
    if (kAhead) {
#pragma unroll
      for (int m = 0; m < kCount; ++m) ct[m] = next[m];
    }
    t = tn;
  }
  add_count(nonfinite_groups, poisoned_in);
}

// Along tokens, staged through shared memory (codec_fp8_token_stage.cuh): each stage's codes of all
// `count` messages come in at once (cp.async, one stage ahead: a ring of 2 stages of count code
// tiles each), each group is decoded from every message in turn and summed in registers in the
// along-hidden lanes, quantized (encode_tile_codes) into a staging buffer of codes, and those go
// out as whole rows. The sums and the orders are the general kernel's. Barriers as in
// fp8_group_encode_token_stages_kernel.
constexpr int kReduceStages = 2;

template <int G>
constexpr int reduce_stage_shared(int count) {
  return (kReduceStages * count + 1) * TokenStage<G>::kCodeBytes;
}
constexpr int kReduceMaxShared = 160 * 1024;  // above (many messages, large G): the general kernel

// Built for 2 blocks per multiprocessor: unbounded, ptxas gave it 169 registers at G = 128 (one
// block per multiprocessor, whose barriers would leave it idle).
template <int G>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_group_decode_sum_encode_token_stages_kernel(const uint8_t* __restrict__ in,
                                                    uint64_t slot_bytes, int count, uint64_t size,
                                                    WireExpectation expect,
                                                    uint8_t* __restrict__ out, GroupParams p,
                                                    HeaderParams hp, uint32_t* status,
                                                    int64_t* nonfinite_groups) {
  // Every header first: no block writes anything from a rejected message.
  if (!block_accepts_headers(in, slot_bytes, count, size, expect, status)) return;
  using TS = TokenStage<G>;
  using S = typename TS::S;
  constexpr int R = S::R, L = S::L, W = TS::W, kRows = TS::kRows;
  write_header_and_padding(out, hp);

  extern __shared__ uint4 stage_shared[];
  uint8_t* const ring = reinterpret_cast<uint8_t*>(stage_shared);  // stages x count code tiles
  uint8_t* const codes = ring + kReduceStages * count * TS::kCodeBytes;  // the sum's codes
  const uint32_t ring_addr = detail::smem_addr(ring);
  const int lane = threadIdx.x % 32, li = lane % L;
  int64_t poisoned_in = 0, poisoned_out = 0;  // out: counted when the sum is decoded

  // Stage `stage`'s codes of every message into ring slot `slot` (as the decode's fetch).
  auto fetch = [&](int64_t stage, int slot) {
    const bool any = stage < p.tiles;
    const StageRef st = any ? stage_at<W>(stage, kRows, p) : StageRef{0, 0};
    for (int m = 0; m < count; ++m) {
      const uint8_t* codes_in = in + uint64_t(m) * slot_bytes + kWireHeaderBytes;
      copy_code_rows<TS>(ring_addr + (slot * count + m) * TS::kCodeBytes, codes_in, st, any, p);
    }
    cp_async_commit();
  };

  const int64_t step = gridDim.x;
  int64_t stage = blockIdx.x;
  fetch(stage, 0);
  int slot = 0;
  for (; stage < p.tiles; stage += step) {
    cp_async_wait<0>();             // this thread's copies of this stage are done
    __syncthreads();                // and every thread's
    fetch(stage + step, slot ^ 1);  // into the slot read in the previous iteration
    const StageRef st = stage_at<W>(stage, kRows, p);
#pragma unroll 1
    for (int pass = 0; pass < TS::kPasses; ++pass) {
      const auto [block, col, first, t] = stage_group<TS, false>(pass, st, p);
      const int cs = TS::code_swizzle(first);
      float sum[1][R];
#pragma unroll
      for (int r = 0; r < R; ++r) sum[0][r] = 0.f;
      for (int m = 0; m < count; ++m) {
        const uint8_t* src = ring + (slot * count + m) * TS::kCodeBytes;
        CodedTile<S> ct;
        read_stage_codes<TS>(src, first, col, ct.packed);
        ct.scale[0] = t.n > 0 ? read_scale(in + uint64_t(m) * slot_bytes + p.scales_offset,
                                           t.first_group, p.num_groups, p.scales)
                              : DecodeScale{1.f, 1.f, false};
        float v[1][R];
        decode_loaded_tile<S, false, false, false, FixedOptions::none, false, true>(ct, t, li, p, v,
                                                                                    poisoned_in);
#pragma unroll
        for (int r = 0; r < R; ++r) sum[0][r] = __fadd_rn(sum[0][r], v[0][r]);
      }
      uint32_t packed[R / 4];
      encode_tile_codes<S, false, false, FixedOptions::none, true>(
          sum, t, li, p, out + p.scales_offset, poisoned_out, packed);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        codes[TS::code_at(first + S::offset(r), col, cs)] = uint8_t(byte_of(packed, r));
      }
    }
    __syncthreads();  // the stage's codes are in the staging buffer

    // Whole rows out, as the encode's.
    write_code_rows<TS>(codes, out + kWireHeaderBytes, st, p);
    slot ^= 1;
  }
  cp_async_wait<0>();
  add_count(nonfinite_groups, poisoned_in);
}

struct ReduceArgs {
  const uint8_t* in;
  uint64_t slot, size;
  int count;
  WireExpectation expect;
  GroupParams p;
  HeaderParams hp;
  uint8_t* out;
  uint32_t* status;
  int64_t* nonfinite_groups;
  cudaStream_t stream;
};

template <int G, bool kTokens>
void launch(const ReduceArgs& a) {
  using S = TileShape<4, G, kTokens>;
  GroupParams p = a.p;
  if constexpr (kTokens) {
    const int shared = a.count <= 64 ? reduce_stage_shared<G>(a.count) : kReduceMaxShared + 1;
    if (p.tiles > 0 && shared <= kReduceMaxShared &&
        token_stages_apply<G>(p, /*values_aligned=*/true)) {
      set_token_stages<G>(p);
      constexpr auto kernel = fp8_group_decode_sum_encode_token_stages_kernel<G>;
      allow_stage_shared_memory<kernel>(kReduceMaxShared);  // the most any count asks for
      const unsigned blocks = wave_grid<kernel>(p.tiles, 1, shared);
      kernel<<<blocks, kThreads, shared, a.stream>>>(a.in, a.slot, a.count, a.size, a.expect, a.out,
                                                     p, a.hp, a.status, a.nonfinite_groups);
      TACO_LAUNCH_OK();
      return;
    }
  }
  if constexpr (!kTokens) {
    using W = WholeReduceShape<G>;
    GroupParams w = p;
    set_tiles<W, G, false>(w, /*aligned=*/true);  // slots and out are 16-byte aligned
    const bool slots_aligned = a.count == 1 || a.slot % 16 == 0;
    if (w.tiles > 0 && w.whole_groups && w.vectorized && slots_aligned &&
        (a.count == 2 || a.count == 4)) {
      return with_fixed_options(w, [&](auto fixed) {
        constexpr FixedOptions kFixed = decltype(fixed)::value;
        auto run = [&](auto count) {
          constexpr auto kernel =
              fp8_group_decode_sum_encode_whole_kernel<G, kFixed, decltype(count)::value>;
          const unsigned blocks =
              wave_grid<kernel>(w.tiles, int64_t(kThreads / 32) * W::kTilesPerWarp, 0);
          kernel<<<blocks, kThreads, 0, a.stream>>>(a.in, a.slot, a.count, a.size, a.expect, a.out,
                                                    w, a.hp, a.status, a.nonfinite_groups);
          TACO_LAUNCH_OK();
        };
        if (a.count == 2) {
          run(std::integral_constant<int, 2>{});
        } else {
          run(std::integral_constant<int, 4>{});
        }
      });
    }
  }
  set_tiles<S, G, kTokens>(p, /*aligned=*/true);  // slots and out are 16-byte aligned
  const unsigned blocks = wave_grid<fp8_group_decode_sum_encode_kernel<G, kTokens>>(
      p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp, 0);
  fp8_group_decode_sum_encode_kernel<G, kTokens><<<blocks, kThreads, 0, a.stream>>>(
      a.in, a.slot, a.count, a.size, a.expect, a.out, p, a.hp, a.status, a.nonfinite_groups);
  TACO_LAUNCH_OK();
}

template <bool kTokens>
void dispatch(int group, const ReduceArgs& a) {
  switch (group) {
    case 32:
      return launch<32, kTokens>(a);
    case 64:
      return launch<64, kTokens>(a);
    case 128:
      return launch<128, kTokens>(a);
    case 256:
      return launch<256, kTokens>(a);
    case 512:
      return launch<512, kTokens>(a);
  }
  TACO_CHECK(false, "device codec: group " + std::to_string(group) + " is not supported");
}

}  // namespace
}  // namespace codec

void fp8_decode_sum_encode_device(const uint8_t* in, size_t slot, int count, size_t size,
                                  const Fp8DeviceMessage& message, uint8_t* out, float* scratch,
                                  Stream stream, uint32_t* status, int64_t* nonfinite_groups) {
  TACO_CHECK(count >= 1, "device codec: decode-sum-encode needs at least one message");
  TACO_CHECK(status != nullptr, "device decode needs a status word");
  TACO_CHECK(detail::aligned16(in) && slot % 16 == 0 && detail::aligned16(out),
             "device codec: wire buffers and slots must be 16-byte aligned");
  TACO_CHECK(count == 1 || slot >= size, "device codec: slots shorter than their messages");
  const Fp8GroupSpec& s = message.spec;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (s.group == 0) {
    // fp8_tensor: one scale for the whole sum, so the sum is materialized first.
    const int64_t n = s.count();
    TACO_CHECK(scratch != nullptr || n == 0, "device codec: fp8_tensor needs the fp32 scratch");
    if (n > 0) TACO_CUDA_OK(cudaMemsetAsync(scratch, 0, size_t(n) * sizeof(float), cuda_stream));
    for (int i = 0; i < count; ++i) {
      fp8_decode_device(in + size_t(i) * slot, size, message, scratch, DType::f32, true, stream,
                        status, nonfinite_groups);
    }
    fp8_encode_device(scratch, DType::f32, message, out, stream, nullptr);
    return;
  }
  codec::ReduceArgs a;
  a.in = in;
  a.slot = slot;
  a.size = size;
  a.count = count;
  a.expect = codec::wire_expectation(message);
  a.p = codec::group_params(message);
  a.hp = codec::header_params(message);
  a.out = out;
  a.status = status;
  a.nonfinite_groups = nonfinite_groups;
  a.stream = cuda_stream;
  if (s.along_tokens) {
    codec::dispatch<true>(int(s.group), a);
  } else {
    codec::dispatch<false>(int(s.group), a);
  }
}

}  // namespace taco::cuda
