// Element types shared by every kernel family. No CUDA headers: model code includes this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

// Forward declaration of CUDA's stream type, so kernel headers can name a stream without
// pulling in cuda_runtime.h. cudaStream_t is `CUstream_st*`.
struct CUstream_st;

namespace taco {

using Stream = CUstream_st*;

enum class DType : uint8_t { f32 = 0, bf16 = 1, u8 = 2, i32 = 3, u16 = 4, f64 = 5 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::u16:
      return 2;
    case DType::u8:
      return 1;
    case DType::f64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType t);

// bfloat16 as stored bits; the host-side conversions round to nearest even, as the CUDA
// intrinsics __float2bfloat16 / __bfloat162float do, so CPU and GPU agree bit for bit.
struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 h) {
  uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {  // NaN: keep it quiet NaN
    return bf16{uint16_t((u >> 16) | 0x40)};
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t((u + rounding) >> 16)};
}

}  // namespace taco
