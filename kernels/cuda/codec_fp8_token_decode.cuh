// The grouped FP8 decode along tokens through shared-memory stages (codec_fp8_token_stage.cuh),
// for codec_fp8_decode.cu: the kernel (its launch stays there, with the decode's arguments). Values
// identical to kernels/cpu/codec_fp8.cpp, as every decode path.
#pragma once

#include <type_traits>

#include "kernels/cuda/codec_fp8_group_decode.cuh"
#include "kernels/cuda/codec_fp8_token_stage.cuh"
#include "kernels/cuda/codec_fp8_wire_check.cuh"
#include "kernels/cuda/common.cuh"

namespace taco::cuda::codec {

// Stage `st` into the ring slot at shared address `dst`, in the decode's layout: its codes
// (copy_code_rows), then at kCodeBytes its scale entries (TokenStage::kScaleBytes: per row block,
// the W groups' first entries, then their a). Thread j < kScaleBytes / 16 copies 16 bytes of the
// entries: row block j / (2 kRunChunks), first entries or a (j / kRunChunks % 2), chunk
// j % kRunChunks (e8m0: bytes, so 4 chunks of the 16; entries of row blocks past the end, and a of
// the other modes, are not read). Not committed.
template <class TS>
__device__ __forceinline__ void copy_coded_stage(uint32_t dst, const uint8_t* codes_in,
                                                 const uint8_t* scales, const StageRef& st,
                                                 bool any, const GroupParams& p, bool dual,
                                                 bool e8m0) {
  constexpr int G = TS::kGroupSize, W = TS::W;
  constexpr int kScaleChunks = TS::kScaleBytes / 16, kRunChunks = TS::kScaleRunBytes / 16;
  static_assert(kScaleChunks <= kThreads, "one scale copy per thread at most");
  copy_code_rows<TS>(dst, codes_in, st, any, p);
  if (threadIdx.x >= kScaleChunks) return;
  const int j = threadIdx.x, block = j / (2 * kRunChunks), second = j / kRunChunks % 2;
  const int chunk = j % kRunChunks;
  const int64_t row0 = st.row0 + block * G;
  const int64_t g0 = row0 / G * p.cols + st.col0;  // the row block's first group
  const bool valid = any && row0 < p.rows && (second ? dual : !e8m0 || chunk < W / 16);
  const uint8_t* src = !valid ? scales
                       : e8m0 ? scales + g0 + 16 * chunk
                              : scales + 4 * (second ? p.num_groups + g0 : g0) + 16 * chunk;
  cp_async<16>(dst + TS::kCodeBytes + 16 * j, src, valid);
}

// A lane's group (block, col, first: stage_group's; n its rows, 0: none) from a ring slot that
// copy_coded_stage filled: its codes and its decoded scale.
template <class TS>
__device__ __forceinline__ CodedTile<typename TS::S> stage_coded_tile(const uint8_t* slot,
                                                                      int block, int col, int first,
                                                                      int n, Fp8Scales mode) {
  const bool dual = mode == Fp8Scales::dual, e8m0 = mode == Fp8Scales::e8m0;
  CodedTile<typename TS::S> ct;
  read_stage_codes<TS>(slot, first, col, ct.packed);
  const uint8_t* entries = slot + TS::kCodeBytes + block * 2 * TS::kScaleRunBytes;
  const ScaleWords words{
      e8m0 ? uint32_t(entries[col]) : *reinterpret_cast<const uint32_t*>(entries + 4 * col),
      dual ? *reinterpret_cast<const uint32_t*>(entries + TS::kScaleRunBytes + 4 * col) : kOneBits};
  ct.scale[0] = n > 0 ? decode_scale(words, mode) : DecodeScale{1.f, 1.f, false};
  return ct;
}

// Blocks a multiprocessor that the staged decode is built for: TACO_CODEC_ACCUMULATE_MIN_BLOCKS
// for the decode-accumulate at G <= 128 (its fp32 staging buffer leaves 68 KB of shared memory a
// block, so that 3 fit), TACO_CODEC_MIN_BLOCKS for everything else.
template <bool kAccumulate, int G>
constexpr int token_decode_min_blocks() {
  return kAccumulate && G <= 128 ? TACO_CODEC_ACCUMULATE_MIN_BLOCKS : TACO_CODEC_MIN_BLOCKS;
}

// Along tokens, staged through shared memory (codec_fp8_token_stage.cuh), the mirror of the
// encode's: each stage's codes and scale entries come in through a ring of kCodeStages stages
// (cp.async: codes kCodeCopy bytes at a time, scale entries 16), its groups are decoded in the
// along-hidden lanes (decode_loaded_tile) into a staging buffer of output values (bf16 or fp32),
// and those go out as whole rows of 16-byte accesses (added to the fp32 output where
// kAccumulate). Barriers as in fp8_group_encode_token_stages_kernel. A stage whose rows all
// exist (every one but a message's last row of stages) takes whole groups (kWhole: no tail tests).
template <class TOut, bool kAccumulate, int G, FixedOptions kFixed>
__global__ void __launch_bounds__(kThreads, token_decode_min_blocks<kAccumulate, G>())
    fp8_group_decode_token_stages_kernel(const uint8_t* __restrict__ in, uint64_t size,
                                         WireExpectation expect, TOut* __restrict__ out,
                                         GroupParams p, uint32_t* status,
                                         int64_t* nonfinite_groups) {
  if (!block_accepts_header(in, size, expect, status)) return;  // the whole block returns
  constexpr bool kPairs = !kAccumulate && token_pairs<G, TOut>();
  using TS = TokenStage<G, kPairs>;
  using S = typename TS::S;
  constexpr int R = S::R, L = S::L, W = TS::W, kRows = TS::kRows;
  constexpr int kStages = TS::kCodeStages;
  constexpr int kSlotBytes = TS::kCodeBytes + TS::kScaleBytes;  // codes, then scale entries
  constexpr int E = int(sizeof(TOut)), kChunksPerRow = W * E / 16, kPerChunk = 16 / E;
  constexpr bool kBf16 = E == 2;
  static_assert(!kAccumulate || !kBf16, "decode-accumulate is fp32");
  const Fp8Scales mode = codec_options<kFixed>(p).scales;
  const bool dual = mode == Fp8Scales::dual, e8m0 = mode == Fp8Scales::e8m0;

  extern __shared__ uint4 stage_shared[];
  uint8_t* const ring = reinterpret_cast<uint8_t*>(stage_shared);  // kStages x kSlotBytes
  uint8_t* const values = ring + kStages * kSlotBytes;             // kRows x W x E
  const uint32_t ring_addr = detail::smem_addr(ring);
  const uint32_t values_addr = detail::smem_addr(values);
  const uint8_t* codes_in = in + kWireHeaderBytes;
  const uint8_t* scales = in + p.scales_offset;  // 16-byte aligned (wire_format.cpp)
  const int lane = threadIdx.x % 32, li = lane % L;
  int64_t poisoned_groups = 0;

  // Stage `stage` into ring slot `slot` (copy_coded_stage).
  auto fetch = [&](int64_t stage, int slot) {
    const bool any = stage < p.tiles;
    const StageRef st = any ? stage_at<W>(stage, kRows, p) : StageRef{0, 0};
    copy_coded_stage<TS>(ring_addr + slot * kSlotBytes, codes_in, scales, st, any, p, dual, e8m0);
    cp_async_commit();
  };

  // The passes over the stage in slot `slot`, values into the staging buffer, then a barrier and
  // the values out as whole rows; whole: every row of the stage exists (kWhole: no tail tests).
  auto decode_stage = [&](const StageRef& st, int slot, auto whole) {
    constexpr bool kWhole = decltype(whole)::value;
    const uint8_t* src = ring + slot * kSlotBytes;
#pragma unroll 1
    for (int pass = 0; pass < TS::kPasses; ++pass) {
      const auto [block, col, first, t] = stage_group<TS, kWhole>(pass, st, p);
      const int vs = TS::value_swizzle(first);
      const CodedTile<S> ct = stage_coded_tile<TS>(src, block, col, first, t.n, mode);
      float v[1][R];
      decode_loaded_tile<S, false, kWhole, false, kFixed, kBf16>(ct, t, li, p, v, poisoned_groups);
      if constexpr (kPairs) {
        // The encode's ldmatrix in reverse: matrix i of store k is stage rows
        // block * G + 32 k + 8 i .. + 7 of the warp's chunk of 8 columns.
#pragma unroll
        for (int k = 0; k < R / 8; ++k) {
          uint32_t m[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            m[i] = uint32_t(to_bf16_bits(v[0][8 * k + 2 * i])) |
                   uint32_t(to_bf16_bits(v[0][8 * k + 2 * i + 1])) << 16;
          }
          detail::store_matrix_x4_trans(values_addr + TS::matrix_row_at(block, k, lane, col), m);
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint8_t* dst = values + TS::template value_at<E>(first + S::offset(r), col, vs);
          if constexpr (kBf16) {
            *reinterpret_cast<uint16_t*>(dst) = to_bf16_bits(v[0][r]);
          } else {
            *reinterpret_cast<float*>(dst) = v[0][r];
          }
        }
      }
    }
    __syncthreads();  // the stage's values are in the staging buffer

    // Whole rows out: row i / kChunksPerRow, 16-byte chunk i % kChunksPerRow.
    // 4, not all: fully unrolled, these loops made ptxas spill at G = 512 (up to 372 bytes)
#pragma unroll 4
    for (int k = 0; k < kRows * kChunksPerRow / kThreads; ++k) {
      const int i = k * kThreads + threadIdx.x, row = i / kChunksPerRow, q = i % kChunksPerRow;
      if (st.row0 + row < p.rows) {
        const uint4 chunk = *reinterpret_cast<const uint4*>(values + row * (E * W) +
                                                            ((q ^ TS::value_swizzle(row)) << 4));
        TOut* dst = out + (st.row0 + row) * p.cols + st.col0 + q * kPerChunk;
        if constexpr (kAccumulate) {
          const float4 o = *reinterpret_cast<const float4*>(dst);
          *reinterpret_cast<float4*>(dst) = make_float4(
              __fadd_rn(o.x, __uint_as_float(chunk.x)), __fadd_rn(o.y, __uint_as_float(chunk.y)),
              __fadd_rn(o.z, __uint_as_float(chunk.z)), __fadd_rn(o.w, __uint_as_float(chunk.w)));
        } else {
          *reinterpret_cast<uint4*>(dst) = chunk;
        }
      }
    }
  };

  for_each_token_stage<kStages, G>(p, fetch, decode_stage);
  add_count(nonfinite_groups, poisoned_groups);
}

}  // namespace taco::cuda::codec
