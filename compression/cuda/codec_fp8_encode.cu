// Grouped FP8 encode on the device (fp8_block, taco; fp8_tensor below): bytes identical to
// kernels/cpu/codec_fp8.cpp. Per group, in registers: non-finite count, [adaptive scale,
// Hadamard,] absmax, codes, scales. Shapes and lanes: tile.cuh; arithmetic: fp8_math.cuh.
#include <cstring>

#include "compression/cuda/codec_fp8_device.h"
#include "compression/cuda/fp8_math.cuh"
#include "compression/cuda/tile.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/hadamard.h"

namespace taco::cuda {
namespace codec {
namespace {

// The header and the zero padding after payload and scales, written by block 0.
struct HeaderParams {
  uint8_t bytes[wire::kHeaderBytes];
  uint64_t payload_end;    // 48 + payload bytes; padding up to scales_offset
  uint64_t scales_offset;  //
  uint64_t scales_end;     // scales_offset + scale bytes; padding up to total
  uint64_t total;
};

__device__ __forceinline__ void write_header_and_padding(uint8_t* out, const HeaderParams& h) {
  if (blockIdx.x != 0) return;
  for (int i = threadIdx.x; i < int(wire::kHeaderBytes); i += blockDim.x) out[i] = h.bytes[i];
  const int pad1 = int(h.scales_offset - h.payload_end), pad2 = int(h.total - h.scales_end);
  for (int i = threadIdx.x; i < pad1 + pad2; i += blockDim.x) {
    out[i < pad1 ? h.payload_end + i : h.scales_end + (i - pad1)] = 0;
  }
}

__device__ __forceinline__ void add_count(int64_t* counter, int64_t v) {
  if (v != 0 && counter != nullptr) {
    atomicAdd(reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(v));
  }
}

// x [rows, cols] (fp32 or bf16 bits) -> codes and scales of `out`, one warp per 32 / L tiles.
template <class T, int G, bool kTokens>
__global__ void __launch_bounds__(kThreads)
    encode_groups_kernel(const T* __restrict__ x, uint8_t* __restrict__ out, GroupParams p,
                         HeaderParams hp, int64_t* nonfinite_groups) {
  using S = TileShape<int(sizeof(T)), G, kTokens>;
  constexpr int R = S::R, L = S::L, C = S::C, kRun = S::kRun;
  write_header_and_padding(out, hp);

  const int lane = threadIdx.x % 32, li = lane % L;
  uint8_t* codes_out = out + wire::kHeaderBytes;
  uint8_t* scales = out + p.scales_offset;
  const bool e8m0 = p.scales == Fp8Scales::e8m0;
  int64_t poisoned_groups = 0;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;

  for (int64_t t0 = warp * S::kTilesPerWarp; t0 < p.tiles; t0 += warps * S::kTilesPerWarp) {
    const TileRef t = tile_at<G, kTokens, R, C>(t0 + lane / L, li, p);

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
          if (t.r0 + k < t.n) load_run<kRun>(x + t.base + k, &v[0][k]);
        } else {
#pragma unroll
          for (int r = k; r < k + kRun; ++r) {
            if (t.r0 + r < t.n) v[0][r] = load_one(x + t.base + r);
          }
        }
      }
    }

    uint32_t packed[R * C / 4];  // codes: tokens [r][c], hidden [r]
#pragma unroll
    for (int w = 0; w < R * C / 4; ++w) packed[w] = 0;

#pragma unroll
    for (int c = 0; c < C; ++c) {
      int bad = 0;
#pragma unroll
      for (int r = 0; r < R; ++r) bad += !is_finite(v[c][r]);
      bad = group_sum<L>(bad);

      float a = 1.f;
      int ea = 0;
      if (p.hadamard) {
        float sq[R];
#pragma unroll
        for (int r = 0; r < R; ++r) sq[r] = __fmul_rn(v[c][r], v[c][r]);
        const float ss = tree_sum<R, L>(sq);
        a = adaptive_scale(ss, t.n > 0 ? t.n : 1, p.target);
        if (e8m0) {  // a is normal, in [1e-3, 1e3]: floor(log2 a) is its exponent field
          ea = int((__float_as_uint(a) >> 23) & 0xFFu) - 127;
          a = exact_pow2(ea);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = __fmul_rn(v[c][r], a);
        hadamard<R, L>(v[c], li, t.full, p.hadamard_scale);
      }
      float m = 0.f;
#pragma unroll
      for (int r = 0; r < R; ++r) m = fmaxf(m, fabsf(v[c][r]));
      m = group_max<L>(m);
      const Quantizer qz = make_quantizer(m, ea, p.scales, p.target);
      if (bad == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int i = kTokens ? r * C + c : r;
          packed[i / 4] |= uint32_t(qz(v[c][r], p.format)) << (8 * (i % 4));
        }
      }

      if (li == 0 && t.n > 0 && c < t.columns) {
        const int64_t g = t.first_group + c;
        if (bad != 0) {
          ++poisoned_groups;
          if (e8m0) {
            scales[g] = kPoisonedE8m0;
          } else {
            put_f32(scales + 4 * g, quiet_nan());
            if (p.scales == Fp8Scales::dual) put_f32(scales + 4 * (p.num_groups + g), quiet_nan());
          }
        } else if (e8m0) {
          scales[g] = uint8_t(qz.k + 127);
        } else if (p.scales == Fp8Scales::dual) {
          put_f32(scales + 4 * g, qz.q);
          put_f32(scales + 4 * (p.num_groups + g), a);
        } else {
          put_f32(scales + 4 * g, __fdiv_rn(qz.q, a));
        }
      }
    }

    // Store the codes (payload index = element index).
    if constexpr (kTokens) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (t.r0 + r >= t.n) continue;
        uint8_t* dst = codes_out + t.base + r * t.stride_r;
        if (p.vectorized) {
          store_bytes<C>(dst, &packed[r * C / 4]);
        } else {
#pragma unroll
          for (int c = 0; c < C; ++c) {
            if (c < t.columns) dst[c] = uint8_t(byte_of(packed, r * C + c));
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < R; k += kRun) {
        if (p.vectorized) {
          if (t.r0 + k < t.n) store_bytes<kRun>(codes_out + t.base + k, &packed[k / 4]);
        } else {
#pragma unroll
          for (int r = k; r < k + kRun; ++r) {
            if (t.r0 + r < t.n) codes_out[t.base + r] = uint8_t(byte_of(packed, r));
          }
        }
      }
    }
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
__global__ void __launch_bounds__(kThreads)
    tensor_absmax_kernel(const T* __restrict__ x, int64_t n, uint8_t* out, HeaderParams hp,
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
__global__ void __launch_bounds__(kThreads)
    tensor_codes_kernel(const T* __restrict__ x, int64_t n, uint8_t* __restrict__ out,
                        uint64_t scales_offset, Fp8Format format, bool vectorized) {
  const float q = get_f32(out + scales_offset);
  const bool poisoned = !(q == q);
  uint8_t* codes = out + wire::kHeaderBytes;
  auto code = [&](float v) -> uint32_t {
    return poisoned || !(q > 0.f) ? 0u : uint32_t(to_fp8(__fdiv_rn(v, q), format));
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = vectorized ? n / kTensorRun : 0;
  for (int64_t i = start; i < runs; i += stride) {
    float run[kTensorRun];
    load_run<kTensorRun>(x + i * kTensorRun, run);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < kTensorRun; ++k) w[k / 4] |= code(run[k]) << (8 * (k % 4));
    store_bytes<8>(codes + i * kTensorRun, w);
  }
  for (int64_t i = runs * kTensorRun + start; i < n; i += stride) {
    codes[i] = uint8_t(code(load_one(x + i)));
  }
}

unsigned grid_for(int64_t work_items, int64_t items_per_block) {
  const int64_t needed = (work_items + items_per_block - 1) / items_per_block;
  const int64_t cap = int64_t(detail::sm_count()) * 8;  // grid-stride beyond a few waves
  return unsigned(needed < 1 ? 1 : needed < cap ? needed : cap);
}

template <class T, int G, bool kTokens>
void launch_encode_groups(const T* x, uint8_t* out, const GroupParams& p, const HeaderParams& hp,
                          int64_t* nonfinite_groups, cudaStream_t stream) {
  using S = TileShape<int(sizeof(T)), G, kTokens>;
  const unsigned blocks = grid_for(p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp);
  encode_groups_kernel<T, G, kTokens>
      <<<blocks, kThreads, 0, stream>>>(x, out, p, hp, nonfinite_groups);
  TACO_LAUNCH_OK();
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
  HeaderParams hp;
  std::memcpy(hp.bytes, m.header, wire::kHeaderBytes);
  hp.payload_end = wire::kHeaderBytes + m.payload_bytes;
  hp.scales_offset = m.scales_offset;
  hp.scales_end = m.scales_offset + m.scales_bytes;
  hp.total = m.total_bytes;
  const bool x_aligned = detail::aligned16(x);

  if (s.group == 0) {
    const int64_t n = s.count();
    if (n > 0) {
      // The scale section (16 bytes) is the absmax scratch; its padding is zeroed at the end.
      hp.scales_end = hp.total;
      TACO_CUDA_OK(cudaMemsetAsync(out + m.scales_offset, 0, 16, stream));
      const unsigned blocks = grid_for(n, int64_t(kThreads) * kTensorRun);
      tensor_absmax_kernel<T><<<blocks, kThreads, 0, stream>>>(x, n, out, hp, fp8_max(s.format),
                                                               x_aligned, nonfinite_groups);
      TACO_LAUNCH_OK();
      tensor_codes_kernel<T>
          <<<blocks, kThreads, 0, stream>>>(x, n, out, m.scales_offset, s.format, x_aligned);
      TACO_LAUNCH_OK();
      return;
    }
  }

  GroupParams p;
  p.rows = s.rows;
  p.cols = s.cols;
  p.num_groups = s.num_groups();
  p.scales_offset = m.scales_offset;
  p.format = s.format;
  p.scales = s.scales;
  p.hadamard = s.hadamard;
  p.hadamard_scale = s.group > 0 ? hadamard_scale(int(s.group)) : 1.f;
  p.target = fp8_max(s.format);
  const int group = s.group > 0 ? int(s.group) : 32;  // an empty fp8_tensor message: header only
  if (s.count() > 0 && s.group > 0) {
    if (s.along_tokens) {
      const int64_t c = group <= 256 ? 8 : 4;  // TileShape<...>::C
      p.tiles_per_row = (s.cols + c - 1) / c;
      p.tiles = (s.rows + group - 1) / group * p.tiles_per_row;
      p.vectorized = x_aligned && s.cols % c == 0;
    } else {
      const int64_t v = 16 / int64_t(sizeof(T));
      p.tiles_per_row = (s.cols + group - 1) / group;
      p.tiles = p.tiles_per_row * s.rows;
      p.vectorized = x_aligned && s.cols % v == 0;
    }
  }
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
