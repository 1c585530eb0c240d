// read_wire_header and Codec::check (compression/wire_format.cpp, codec.cpp) on the device: the
// same checks in the same order, so a rejected buffer reports the WireStatus the CPU decoder
// would throw. Reads at most min(size, 48) bytes, one byte at a time (any alignment).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "compression/cuda/codec_fp8_device.h"

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

__device__ __forceinline__ uint64_t round16(uint64_t n) { return (n + 15) / 16 * 16; }

// wire_layout(...).total_bytes for checked fields.
__device__ __forceinline__ uint64_t wire_total_bytes(uint8_t kind, uint8_t dtype, uint8_t scales,
                                                     uint8_t axis, uint32_t group, uint64_t rows,
                                                     uint64_t cols) {
  const uint64_t n = rows * cols;
  if (kind == wire::kKindNone) return wire::kHeaderBytes + round16(n * (dtype == 0 ? 4 : 2));
  uint64_t groups = 0;
  if (n != 0) {
    if (group == 0) {
      groups = 1;
    } else {
      groups = axis == 1 ? (rows + group - 1) / group * cols : (cols + group - 1) / group * rows;
    }
  }
  const uint64_t per_group = scales == 0 ? 8 : scales == 1 ? 4 : 1;
  return wire::kHeaderBytes + round16(n) + round16(groups * per_group);
}

__device__ __forceinline__ wire::Status check_wire_header(const uint8_t* in, uint64_t size,
                                                          const WireExpectation& e) {
  if (size < 4) return wire::truncated;
  if (read_le(in, 4) != wire::kMagic) return wire::bad_magic;
  if (size < wire::kHeaderBytes) return wire::truncated;
  if (read_le(in + 4, 2) != wire::kVersion) return wire::bad_version;
  uint32_t h = 2166136261u;
  for (int i = 0; i < 44; ++i) h = (h ^ in[i]) * 16777619u;
  if (read_le(in + 44, 4) != h) return wire::bad_checksum;

  const uint8_t kind = in[6], dtype = in[7], format = in[8], scales = in[9], axis = in[10];
  if (kind > wire::kKindTaco || (dtype != 0 && dtype != 1) || format > 1 || scales > 2 ||
      axis > 1 || in[11] != 0 || read_le(in + 40, 4) != 0) {
    return wire::bad_field;
  }
  const uint32_t group = uint32_t(read_le(in + 12, 4));
  if (group > (1u << 16)) return wire::bad_field;
  // canonical(options) == options && validate(options, false).empty()
  bool valid = true;
  switch (kind) {
    case wire::kKindNone:
      valid = format == 0 && group == 0 && scales == uint8_t(Fp8Scales::single) && axis == 0;
      break;
    case wire::kKindFp8Tensor:
      valid = group == 0 && scales == uint8_t(Fp8Scales::single) && axis == 0;
      break;
    case wire::kKindFp8Block:
      valid = scales != uint8_t(Fp8Scales::dual) && is_group_size_device(group);
      break;
    case wire::kKindTaco:
      valid = is_group_size_device(group);
      break;
  }
  if (!valid) return wire::bad_field;
  const uint64_t rows = read_le(in + 16, 4), cols = read_le(in + 20, 4);
  if (rows > 0x7FFFFFFFu || cols > 0x7FFFFFFFu) return wire::bad_field;
  if (rows * cols > uint64_t(wire::kMaxElements)) return wire::bad_field;
  if (read_le(in + 24, 8) != rows * cols) return wire::bad_field;
  const uint64_t total = read_le(in + 32, 8);
  if (total != wire_total_bytes(kind, dtype, scales, axis, group, rows, cols)) {
    return wire::bad_field;
  }
  if (size != total) return wire::size_mismatch;
  if (kind != e.kind) return wire::wrong_codec;
  if (format != e.format || group != e.group || scales != e.scales || axis != e.axis) {
    return wire::wrong_options;
  }
  if (rows != e.rows || cols != e.cols) return wire::wrong_shape;
  return wire::ok;
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
