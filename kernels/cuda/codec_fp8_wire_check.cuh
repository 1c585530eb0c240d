// read_wire_header and Codec::check (compression/wire_format.cpp, codec.cpp) on the device: the
// same checks in the same order, so a rejected buffer reports the WireStatus the CPU decoder
// would throw. Reads at most min(size, 48) bytes, one byte at a time (any alignment).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/codec_fp8.h"

namespace taco::cuda::codec {

// What the receiver expects.
struct WireExpectation {
  uint8_t kind, format, scales, axis;
  uint32_t group;
  uint32_t rows, cols;
};

__device__ __forceinline__ uint64_t read_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

__device__ __forceinline__ bool is_group_size_device(uint32_t g) {
  return g == 32 || g == 64 || g == 128 || g == 256 || g == 512;
}

__device__ __forceinline__ uint64_t round16(uint64_t n) {
  return (n + kWireAlign - 1) / kWireAlign * kWireAlign;
}

// wire_layout(...).total_bytes for checked fields.
__device__ __forceinline__ uint64_t wire_total_bytes(uint8_t kind, uint8_t dtype, uint8_t scales,
                                                     uint8_t axis, uint32_t group, uint64_t rows,
                                                     uint64_t cols) {
  const uint64_t n = rows * cols;
  if (kind == uint8_t(CodecKind::none)) return kWireHeaderBytes + round16(n * (dtype == 0 ? 4 : 2));
  uint64_t groups = 0;
  if (n != 0) {
    if (group == 0) {
      groups = 1;
    } else {
      groups = axis == 1 ? (rows + group - 1) / group * cols : (cols + group - 1) / group * rows;
    }
  }
  const uint64_t per_group = scales == 0 ? 8 : scales == 1 ? 4 : 1;
  return kWireHeaderBytes + round16(n) + round16(groups * per_group);
}

__device__ __forceinline__ WireStatus check_wire_header(const uint8_t* in, uint64_t size,
                                                        const WireExpectation& e) {
  namespace off = wire_offset;
  if (size < 4) return WireStatus::truncated;
  if (read_le(in + off::magic, 4) != kWireMagic) return WireStatus::bad_magic;
  if (size < kWireHeaderBytes) return WireStatus::truncated;
  if (read_le(in + off::version, 2) != kWireVersion) return WireStatus::bad_version;
  uint32_t h = 2166136261u;
  for (int i = 0; i < int(off::checksum); ++i) h = (h ^ in[i]) * 16777619u;
  if (read_le(in + off::checksum, 4) != h) return WireStatus::bad_checksum;

  const uint8_t kind = in[off::codec], dtype = in[off::dtype], format = in[off::format],
                scales = in[off::scales], axis = in[off::axis];
  if (kind > uint8_t(CodecKind::taco) || (dtype != 0 && dtype != 1) || format > 1 || scales > 2 ||
      axis > 1 || in[off::reserved8] != 0 || read_le(in + off::reserved32, 4) != 0) {
    return WireStatus::bad_field;
  }
  const uint32_t group = uint32_t(read_le(in + off::group, 4));
  if (group > (1u << 16)) return WireStatus::bad_field;
  // canonical(options) == options && validate(options, false).empty()
  bool valid = true;
  switch (kind) {
    case uint8_t(CodecKind::none):
      valid = format == 0 && group == 0 && scales == uint8_t(Fp8Scales::single) && axis == 0;
      break;
    case uint8_t(CodecKind::fp8_tensor):
      valid = group == 0 && scales == uint8_t(Fp8Scales::single) && axis == 0;
      break;
    case uint8_t(CodecKind::fp8_block):
      valid = scales != uint8_t(Fp8Scales::dual) && is_group_size_device(group);
      break;
    case uint8_t(CodecKind::taco):
      valid = is_group_size_device(group);
      break;
  }
  if (!valid) return WireStatus::bad_field;
  const uint64_t rows = read_le(in + off::rows, 4), cols = read_le(in + off::cols, 4);
  if (rows > 0x7FFFFFFFu || cols > 0x7FFFFFFFu) return WireStatus::bad_field;
  if (rows * cols > uint64_t(kMaxWireElements)) return WireStatus::bad_field;
  if (read_le(in + off::count, 8) != rows * cols) return WireStatus::bad_field;
  const uint64_t total = read_le(in + off::total, 8);
  if (total != wire_total_bytes(kind, dtype, scales, axis, group, rows, cols)) {
    return WireStatus::bad_field;
  }
  if (size != total) return WireStatus::size_mismatch;
  if (kind != e.kind) return WireStatus::wrong_codec;
  if (format != e.format || group != e.group || scales != e.scales || axis != e.axis) {
    return WireStatus::wrong_options;
  }
  if (rows != e.rows || cols != e.cols) return WireStatus::wrong_shape;
  return WireStatus::ok;
}

// The block's verdict on the headers of `count` messages at in + i * stride (`size` bytes each),
// computed by thread 0 and shared: the first rejection, as the host decoder would stop at the
// first bad message. It is reported once, by block 0, and only where no earlier rejection is
// recorded.
__device__ __forceinline__ bool block_accepts_headers(const uint8_t* in, uint64_t stride, int count,
                                                      uint64_t size, const WireExpectation& e,
                                                      uint32_t* status) {
  __shared__ uint32_t verdict;
  if (threadIdx.x == 0) {
    uint32_t first = 0;
    for (int i = 0; i < count && first == 0; ++i)
      first = uint32_t(check_wire_header(in + uint64_t(i) * stride, size, e));
    verdict = first;
    if (first != 0 && blockIdx.x == 0) atomicCAS(status, 0u, first);
  }
  __syncthreads();
  return verdict == 0;
}

__device__ __forceinline__ bool block_accepts_header(const uint8_t* in, uint64_t size,
                                                     const WireExpectation& e, uint32_t* status) {
  return block_accepts_headers(in, 0, 1, size, e, status);
}

}  // namespace taco::cuda::codec
