// Grouped FP8 decode on the device: header check (wire_check.cuh), then per group in registers
// fp8 -> fp32, times the scale, [Hadamard,] [/ a], stored as fp32 or bf16 or added into fp32.
// Values identical to kernels/cpu/codec_fp8.cpp (NaN payloads aside: a GPU add or multiply on a
// NaN returns the canonical NaN where the CPU keeps the operand's).
#include "compression/cuda/codec_fp8_device.h"
#include "compression/cuda/fp8_math.cuh"
#include "compression/cuda/tile.cuh"
#include "compression/cuda/wire_check.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/hadamard.h"

namespace taco::cuda {
namespace codec {
namespace {

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
      uint32_t w[N / 2];
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        w[k] = uint32_t(to_bf16_bits(v[2 * k])) | (uint32_t(to_bf16_bits(v[2 * k + 1])) << 16);
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

// A group's decode scales (kernels/cpu/codec_fp8.cpp, read_scale).
struct DecodeScale {
  float mul, a;
  bool poisoned;
};

__device__ __forceinline__ DecodeScale read_scale(const uint8_t* scales, int64_t g,
                                                  int64_t num_groups, Fp8Scales mode) {
  DecodeScale d{1.f, 1.f, false};
  if (mode == Fp8Scales::e8m0) {
    const uint32_t b = __ldg(scales + g);
    d.poisoned = b == kPoisonedE8m0;
    d.mul = d.poisoned ? 1.f : exact_pow2(int(b) - 127);
  } else {
    d.mul = get_f32(scales + 4 * g);
    if (mode == Fp8Scales::dual) d.a = get_f32(scales + 4 * (num_groups + g));
    d.poisoned = !(d.mul == d.mul) || !(d.a == d.a);
  }
  return d;
}

template <class TOut, int G, bool kTokens, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    decode_groups_kernel(const uint8_t* __restrict__ in, uint64_t size, WireExpectation expect,
                         TOut* __restrict__ out, GroupParams p, uint32_t* status,
                         int64_t* nonfinite_groups) {
  if (!block_accepts_header(in, size, expect, status)) return;
  using S = TileShape<int(sizeof(TOut)), G, kTokens>;
  constexpr int R = S::R, L = S::L, C = S::C, kRun = S::kRun;
  const Sink<TOut, kAccumulate> sink{out};
  const int lane = threadIdx.x % 32, li = lane % L;
  const uint8_t* codes_in = in + wire::kHeaderBytes;
  const uint8_t* scales = in + p.scales_offset;
  int64_t poisoned_groups = 0;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;

  for (int64_t t0 = warp * S::kTilesPerWarp; t0 < p.tiles; t0 += warps * S::kTilesPerWarp) {
    const TileRef t = tile_at<G, kTokens, R, C>(t0 + lane / L, li, p);

    uint32_t packed[R * C / 4];  // codes: tokens [r][c], hidden [r]
#pragma unroll
    for (int w = 0; w < R * C / 4; ++w) packed[w] = 0;
    if constexpr (kTokens) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (t.r0 + r >= t.n) continue;
        const uint8_t* src = codes_in + t.base + r * t.stride_r;
        if (p.vectorized) {
          load_bytes<C>(src, &packed[r * C / 4]);
        } else {
#pragma unroll
          for (int c = 0; c < C; ++c) {
            if (c < t.columns) packed[(r * C + c) / 4] |= uint32_t(src[c]) << (8 * (c % 4));
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < R; k += kRun) {
        if (p.vectorized) {
          if (t.r0 + k < t.n) load_bytes<kRun>(codes_in + t.base + k, &packed[k / 4]);
        } else {
#pragma unroll
          for (int r = k; r < k + kRun; ++r) {
            if (t.r0 + r < t.n) packed[r / 4] |= uint32_t(codes_in[t.base + r]) << (8 * (r % 4));
          }
        }
      }
    }

    float v[C][R];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      DecodeScale d{1.f, 1.f, false};
      if (t.n > 0 && c < t.columns)
        d = read_scale(scales, t.first_group + c, p.num_groups, p.scales);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        v[c][r] = __fmul_rn(from_fp8(byte_of(packed, kTokens ? r * C + c : r), p.format), d.mul);
      }
      if (p.hadamard) hadamard<R, L>(v[c], li, t.full, p.hadamard_scale);
      if (p.scales == Fp8Scales::dual) {
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = __fdiv_rn(v[c][r], d.a);
      }
      if (d.poisoned) {
#pragma unroll
        for (int r = 0; r < R; ++r) v[c][r] = quiet_nan();
        if (li == 0) ++poisoned_groups;
      }
    }

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
        if (p.vectorized) {
          if (t.r0 + k < t.n) sink.template run<kRun>(t.base + k, &v[0][k]);
        } else {
#pragma unroll
          for (int r = k; r < k + kRun; ++r) {
            if (t.r0 + r < t.n) sink.one(t.base + r, v[0][r]);
          }
        }
      }
    }
  }
  if (poisoned_groups != 0 && nonfinite_groups != nullptr) {
    atomicAdd(reinterpret_cast<unsigned long long*>(nonfinite_groups),
              static_cast<unsigned long long>(poisoned_groups));
  }
}

// fp8_tensor: one scale; codes are independent elements.
constexpr int kTensorRun = 8;

template <class TOut, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    decode_tensor_kernel(const uint8_t* __restrict__ in, uint64_t size, WireExpectation expect,
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
  const uint8_t* codes = in + wire::kHeaderBytes;
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
#pragma unroll
    for (int k = 0; k < kTensorRun; ++k) v[k] = value(byte_of(w, k));
    sink.template run<kTensorRun>(i * kTensorRun, v);
  }
  for (int64_t i = runs * kTensorRun + start; i < n; i += stride) sink.one(i, value(codes[i]));
}

unsigned grid_for(int64_t work_items, int64_t items_per_block) {
  const int64_t needed = (work_items + items_per_block - 1) / items_per_block;
  const int64_t cap = int64_t(detail::sm_count()) * 8;
  return unsigned(needed < 1 ? 1 : needed < cap ? needed : cap);
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

template <class TOut, int G, bool kTokens, bool kAccumulate>
void launch_decode_groups(const DecodeArgs& a, TOut* out) {
  using S = TileShape<int(sizeof(TOut)), G, kTokens>;
  GroupParams p = a.p;
  if (p.tiles > 0) {
    const int64_t run = kTokens ? S::C : S::V;
    p.tiles_per_row = kTokens ? (p.cols + S::C - 1) / S::C : (p.cols + G - 1) / G;
    p.tiles = kTokens ? (p.rows + G - 1) / G * p.tiles_per_row : p.tiles_per_row * p.rows;
    p.vectorized = detail::aligned16(out) && p.cols % run == 0;
  }
  const unsigned blocks = grid_for(p.tiles, int64_t(kThreads / 32) * S::kTilesPerWarp);
  decode_groups_kernel<TOut, G, kTokens, kAccumulate><<<blocks, kThreads, 0, a.stream>>>(
      a.in, a.size, a.expect, out, p, a.status, a.nonfinite_groups);
  TACO_LAUNCH_OK();
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
    const unsigned blocks = grid_for(n, int64_t(kThreads) * kTensorRun);
    decode_tensor_kernel<TOut, kAccumulate><<<blocks, kThreads, 0, a.stream>>>(
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
  const Fp8GroupSpec& s = message.spec;
  codec::DecodeArgs a;
  a.in = in;
  a.size = size;
  a.expect =
      codec::WireExpectation{message.kind,  uint8_t(s.format), uint8_t(s.scales), message.axis,
                             message.group, uint32_t(s.rows),  uint32_t(s.cols)};
  a.p.rows = s.rows;
  a.p.cols = s.cols;
  a.p.tiles = s.count() > 0 ? 1 : 0;  // the launcher fills the tile counts for its tile shape
  a.p.num_groups = s.num_groups();
  a.p.scales_offset = message.scales_offset;
  a.p.format = s.format;
  a.p.scales = s.scales;
  a.p.hadamard = s.hadamard;
  a.p.hadamard_scale = s.group > 0 ? hadamard_scale(int(s.group)) : 1.f;
  a.p.target = fp8_max(s.format);
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
