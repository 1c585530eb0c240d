// The grouped FP8 encode along tokens through shared-memory stages (codec_fp8_token_stage.cuh),
// for codec_fp8_encode.cu: the kernel and its launch. Bytes identical to kernels/cpu/codec_fp8.cpp,
// as every encode path.
#pragma once

#include "kernels/cuda/codec_fp8_group.cuh"
#include "kernels/cuda/codec_fp8_token_stage.cuh"
#include "kernels/cuda/common.cuh"

namespace taco::cuda::codec {

// Stages of the encode's input ring along tokens: 3 of 16 KB (bf16, G <= 128), else 2.
template <int G, class T>
constexpr int token_encode_stages() {
  return TokenStage<G>::kRows * TokenStage<G>::W * int(sizeof(T)) <= 16384 ? 3 : 2;
}

// Its shared memory: the ring and the codes' staging buffer. fp32 at G = 512 would need 288 KB
// (more than a multiprocessor has) and keeps the general kernel.
template <int G, class T>
constexpr int token_encode_shared() {
  using TS = TokenStage<G>;
  return token_encode_stages<G, T>() * TS::kRows * TS::W * int(sizeof(T)) + TS::kCodeBytes;
}

// Along tokens, staged through shared memory (codec_fp8_token_stage.cuh): each block takes stages
// t = blockIdx.x, + gridDim.x, ...; their values come in through a ring of kStages stages
// (cp.async, stages ahead of the arithmetic), and each stage's codes go out through one staging
// buffer. Per stage: wait for its copies and a barrier (its values visible to every thread, and
// every thread done with the slot the next copy overwrites, and with the staging buffer's last
// write-out); the copy of the stage kStages - 1 ahead; the arithmetic, codes into the staging
// buffer; a barrier; the codes out as whole rows. A stage whose rows all exist (all but a
// message's last row of stages) takes whole groups (kWhole: no tail tests in the arithmetic).
// Its write-out stays at 4 bytes an access: 8 (level or 4% faster alone) with whole stages ran 17%
// slower back to back on an H100 (tools/bench/RESULTS.md, 2026-12-07, fifteenth session).
template <class T, int G, FixedOptions kFixed>
__global__ void __launch_bounds__(kThreads, TACO_CODEC_MIN_BLOCKS)
    fp8_group_encode_token_stages_kernel(const T* __restrict__ x, uint8_t* __restrict__ out,
                                         GroupParams p, HeaderParams hp,
                                         int64_t* nonfinite_groups) {
  constexpr bool kPairs = token_pairs<G, T>();
  using TS = TokenStage<G, kPairs>;
  using S = typename TS::S;
  constexpr int R = S::R, L = S::L, W = TS::W, kRows = TS::kRows;
  constexpr int E = int(sizeof(T)), kValueBytes = kRows * W * E;
  constexpr int kStages = token_encode_stages<G, T>();
  write_header_and_padding(out, hp);

  extern __shared__ uint4 stage_shared[];
  uint8_t* const values = reinterpret_cast<uint8_t*>(stage_shared);  // kStages x kValueBytes
  uint8_t* const codes = values + kStages * kValueBytes;             // kCodeBytes
  const uint32_t values_addr = detail::smem_addr(values);
  uint8_t* codes_out = out + kWireHeaderBytes;
  uint8_t* scales = out + p.scales_offset;
  const int lane = threadIdx.x % 32, li = lane % L;
  int64_t poisoned_groups = 0;

  // Stage `stage` into ring slot `slot` (copy_value_rows; stages past the last: zeros).
  auto fetch = [&](int64_t stage, int slot) {
    const bool any = stage < p.tiles;
    const StageRef st = any ? stage_at<W>(stage, kRows, p) : StageRef{0, 0};
    copy_value_rows<TS>(values_addr + slot * kValueBytes, x, st, any, p);
    cp_async_commit();
  };

  // The passes over the stage in slot `slot`, codes into the staging buffer, then a barrier and
  // the codes out as whole rows; whole: every row of the stage exists (kWhole: no tail tests).
  auto encode_stage = [&](const StageRef& st, int slot, auto whole) {
    constexpr bool kWhole = decltype(whole)::value;
    [[maybe_unused]] const uint8_t* in = values + slot * kValueBytes;
    [[maybe_unused]] const uint32_t in_addr = values_addr + slot * kValueBytes;  // kPairs
#pragma unroll 1
    for (int pass = 0; pass < TS::kPasses; ++pass) {
      const auto [block, col, first, t] = stage_group<TS, kWhole>(pass, st, p);
      const int cs = TS::code_swizzle(first);
      float v[1][R];
      if constexpr (kPairs) {
        // Matrix i of load k: stage rows block * G + 32 k + 8 i .. + 7 of the warp's chunk of 8
        // columns (col / 8 is the warp's), row addresses from lanes 8 i .. 8 i + 7.
#pragma unroll
        for (int k = 0; k < R / 8; ++k) {
          uint32_t m[4];
          detail::load_matrix_x4_trans(m, in_addr + TS::matrix_row_at(block, k, lane, col));
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // registers 8k + 2i, + 1: rows 32k + 8i + 2li, + 1
            v[0][8 * k + 2 * i] = __uint_as_float(m[i] << 16);
            v[0][8 * k + 2 * i + 1] = __uint_as_float(m[i] & 0xFFFF0000u);
          }
        }
      } else {
        read_stage_values<TS, T>(in, first, col, v[0]);
      }
      uint32_t packed[R / 4];
      encode_tile_codes<S, false, kWhole, kFixed>(v, t, li, p, scales, poisoned_groups, packed);
      if constexpr (kPairs) {
        // Registers 2j, 2j + 1 (rows first + 8j, + 1) as one 2-byte store into pair row
        // first / 2 + 4j.
#pragma unroll
        for (int j = 0; j < R / 2; ++j) {
          const uint32_t pair = (packed[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
          *reinterpret_cast<uint16_t*>(codes + TS::pair_code_at(first / 2 + 4 * j, col)) =
              uint16_t(pair);
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          codes[TS::code_at(first + S::offset(r), col, cs)] = uint8_t(byte_of(packed, r));
        }
      }
    }
    __syncthreads();  // the stage's codes are in the staging buffer

    if constexpr (kPairs) {
      // Whole pair rows out: pair row i / 8, chunk i % 8 (8 columns of two rows, interleaved),
      // split into 8 bytes of each row (a warp four pair rows: two 64-byte runs of each).
#pragma unroll 2
      for (int k = 0; k < kRows / 2 * 8 / kThreads; ++k) {
        const int i = k * kThreads + threadIdx.x, pr = i / 8, q = i % 8;
        const uint4 c = *reinterpret_cast<const uint4*>(codes + TS::pair_code_at(pr, q * 8));
        const int64_t row = st.row0 + 2 * pr;
        uint8_t* dst = codes_out + row * p.cols + st.col0 + q * 8;
        if (row < p.rows) {
          *reinterpret_cast<uint2*>(dst) =
              make_uint2(__byte_perm(c.x, c.y, 0x6420), __byte_perm(c.z, c.w, 0x6420));
        }
        if (row + 1 < p.rows) {
          *reinterpret_cast<uint2*>(dst + p.cols) =
              make_uint2(__byte_perm(c.x, c.y, 0x7531), __byte_perm(c.z, c.w, 0x7531));
        }
      }
    } else {
      write_code_rows<TS>(codes, codes_out, st, p);
    }
  };

  for_each_token_stage<kStages, G>(p, fetch, encode_stage);
  add_count(nonfinite_groups, poisoned_groups);
}

template <class T, int G, FixedOptions kFixed>
void launch_encode_token_stages(const T* x, uint8_t* out, const GroupParams& p,
                                const HeaderParams& hp, int64_t* nonfinite_groups,
                                cudaStream_t stream) {
  constexpr auto kernel = fp8_group_encode_token_stages_kernel<T, G, kFixed>;
  constexpr int shared = token_encode_shared<G, T>();
  allow_stage_shared_memory<kernel>(shared);
  const unsigned blocks = wave_grid<kernel>(p.tiles, 1, shared);
  kernel<<<blocks, kThreads, shared, stream>>>(x, out, p, hp, nonfinite_groups);
  TACO_LAUNCH_OK();
}

}  // namespace taco::cuda::codec
