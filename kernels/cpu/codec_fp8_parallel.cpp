// The CPU FP8 codecs' entry points (kernels/codec_fp8.h): the message cut into chunks of whole
// groups handed to OpenMP threads, taco's groups eight at a time where the CPU has AVX2
// (kernels/cpu/codec_taco_lanes.h; its fp32 decode along tokens through a staged strip of
// columns, kernels/cpu/codec_taco_tokens.cpp), fp8_block's along tokens a strip of columns at a
// time (kernels/cpu/codec_fp8_tokens.cpp), everything else through the element loops of
// kernels/cpu/codec_fp8.cpp.
#include <omp.h>

#include <type_traits>

#include "kernels/cpu/codec_fp8_internal.h"

namespace taco::cpu {
namespace {

using namespace fp8_detail;

constexpr int64_t kParallelMin = 1 << 16;  // smaller messages: threads cost more than they save

// taco on AVX2 (G = 32 .. 512): eight groups at a time (kernels/cpu/codec_taco_lanes.h); the
// batches it declines and the groups after the last whole batch go to the per-group loops.
// `batch(g)` does groups [g, g + 8) or returns false, `range(g0, g1)` runs the loops.
template <class Batch, class Range>
void in_batches(int64_t g0, int64_t g1, Batch&& batch, Range&& range) {
  int64_t done = g0;
  for (int64_t g = g0; g + 8 <= g1; g += 8) {
    if (!batch(g)) continue;
    if (done < g) range(done, g);
    done = g + 8;
  }
  if (done < g1) range(done, g1);
}

template <class T>
Fp8EncodeCounts encode_chunk(const T* x, const Fp8GroupSpec& s, int64_t g0, int64_t g1, uint8_t* c,
                             uint8_t* sc, Scratch* w) {
  if (s.along_tokens && !s.hadamard) return block_tokens_encode(x, s, g0, g1, c, sc, w);
  if (isa_for(s.hadamard) < 1 || !lanes::handles(s)) return encode_range(x, s, g0, g1, c, sc, w);
  Fp8EncodeCounts total;
  in_batches(
      g0, g1, [&](int64_t g) { return lanes::encode8(x, s, g, c, sc); },
      [&](int64_t a, int64_t b) {
        const Fp8EncodeCounts r = encode_range(x, s, a, b, c, sc, w);
        total.nonfinite_values += r.nonfinite_values;
        total.nonfinite_groups += r.nonfinite_groups;
      });
  return total;
}

template <class Store>
int64_t decode_chunk(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, int64_t g0,
                     int64_t g1, Store st, Scratch* w) {
  if (s.along_tokens && !s.hadamard) return block_tokens_decode(c, sc, s, g0, g1, st, w);
  if (isa_for(s.hadamard) < 1 || !lanes::handles(s)) return decode_range(c, sc, s, g0, g1, st, w);
  if constexpr (!std::is_same_v<Store, StoreBf16>) {
    if (s.along_tokens) return taco_tokens_decode(c, sc, s, g0, g1, st, w);
  }
  int64_t counted = 0;
  in_batches(
      g0, g1, [&](int64_t g) { return st.lanes8(c, sc, s, g); },
      [&](int64_t a, int64_t b) { counted += decode_range(c, sc, s, a, b, st, w); });
  return counted;
}

// Work is handed out in chunks (whole groups, a multiple of eight: taco's batches), each to the
// next free thread: on a shared machine a thread whose core is busy takes fewer (an even split
// waits for it). A chunk is an eighth of the message, at least 8K and at most 128K elements:
// long runs for the memory prefetchers (measured, [32768, 1024] bf16, 2 threads on a quiet
// machine: chunks of 32K elements made taco's encode 0.244 ns per element against 0.221 with
// 128K, fp8_block's 0.414 against 0.370), and still enough chunks to balance.
int64_t chunk_elements(int64_t count) {
  return std::clamp<int64_t>(count / 8, int64_t(1) << 13, int64_t(1) << 17);
}

// f(begin, end) for every chunk of [0, n) in units of `unit` elements (n * unit elements in
// all), spread over the team.
template <class F>
void for_chunks(int64_t n, int64_t unit, F&& f) {
  const int64_t size = std::max<int64_t>(8, (chunk_elements(n * unit) / unit + 7) / 8 * 8);
  const int64_t chunks = (n + size - 1) / size;
#pragma omp for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) f(c * size, std::min(n, (c + 1) * size));
}

template <class T>
Fp8EncodeCounts encode_impl(const T* x, const Fp8GroupSpec& s, uint8_t* codes, uint8_t* scales) {
  check_spec(s);
  const int64_t n = s.count();
  if (n == 0) return {};
  const bool threads = n >= kParallelMin;
  if (s.group == 0) {  // one scale for the whole message, no transform
    float m = 0.f;
    int64_t bad = 0;
#pragma omp parallel reduction(max : m) reduction(+ : bad) if (threads)
    for_chunks(n, 1,
               [&](int64_t i0, int64_t i1) { m = std::max(m, absmax_range(x, i0, i1, &bad)); });
    if (bad) {
      std::memset(codes, 0, size_t(n));
      write_poisoned_scales(scales, 0, 1, s.scales);
      return {bad, 1};
    }
    const Quantizer qz = make_quantizer(m, 0, s);
#pragma omp parallel if (threads)
    for_chunks(n, 1, [&](int64_t i0, int64_t i1) { whole_range(x, s.format, i0, i1, qz, codes); });
    write_scales(scales, 0, 1, s, qz, 1.f);
    return {};
  }
  int64_t bad_values = 0, bad_groups = 0;
#pragma omp parallel reduction(+ : bad_values, bad_groups) if (threads)
  {
    Scratch w(s);
    for_chunks(s.num_groups(), s.group, [&](int64_t g0, int64_t g1) {
      const Fp8EncodeCounts c = encode_chunk(x, s, g0, g1, codes, scales, &w);
      bad_values += c.nonfinite_values;
      bad_groups += c.nonfinite_groups;
    });
  }
  return {bad_values, bad_groups};
}

template <class Store>
int64_t decode_impl(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s,
                    Store store) {
  check_spec(s);
  const int64_t n = s.count();
  if (n == 0) return 0;
  const bool threads = n >= kParallelMin;
  if (s.group == 0) {
    const DecodeScale d = read_scale(scales, 0, 1, s.scales);
    int bad = 0;
#pragma omp parallel reduction(| : bad) if (threads)
    for_chunks(n, 1, [&](int64_t i0, int64_t i1) {
      bad |= whole_range(codes, s.format, d, i0, i1, store);
    });
    return d.poisoned || bad ? 1 : 0;
  }
  int64_t counted = 0;
#pragma omp parallel reduction(+ : counted) if (threads)
  {
    Scratch w(s);
    for_chunks(s.num_groups(), s.group, [&](int64_t g0, int64_t g1) {
      counted += decode_chunk(codes, scales, s, g0, g1, store, &w);
    });
  }
  return counted;
}

// Zeros the elements of groups [g0, g1) of `sum` (a group's padding past the message is not
// stored): runs of groups in one row (hidden) or one block of G rows (tokens) as row segments.
void zero_groups(float* sum, const Fp8GroupSpec& s, int64_t g0, int64_t g1) {
  const int64_t G = s.group;
  if (s.along_tokens) {
    for (int64_t g = g0; g < g1;) {
      const int64_t block = g / s.cols, c0 = g % s.cols;
      const int64_t c1 = std::min(s.cols, c0 + (g1 - g));
      for (int64_t r = block * G; r < std::min(s.rows, (block + 1) * G); ++r) {
        std::fill(sum + r * s.cols + c0, sum + r * s.cols + c1, 0.f);
      }
      g += c1 - c0;
    }
    return;
  }
  const int64_t per_row = (s.cols + G - 1) / G;
  for (int64_t g = g0; g < g1;) {
    const int64_t row = g / per_row, first = g % per_row;
    const int64_t last = std::min(per_row, first + (g1 - g));
    std::fill(sum + row * s.cols + first * G, sum + row * s.cols + std::min(s.cols, last * G), 0.f);
    g += last - first;
  }
}

}  // namespace

Fp8EncodeCounts fp8_group_encode(const float* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

Fp8EncodeCounts fp8_group_encode(const bf16* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         float* out, bool accumulate) {
  if (accumulate) return decode_impl(codes, scales, spec, AccumulateF32{out});
  return decode_impl(codes, scales, spec, StoreF32{out});
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         bf16* out) {
  return decode_impl(codes, scales, spec, StoreBf16{out});
}

int64_t fp8_group_decode_sum_encode(const uint8_t* const* codes, const uint8_t* const* scales,
                                    int count, const Fp8GroupSpec& spec, float* sum,
                                    uint8_t* out_codes, uint8_t* out_scales) {
  check_spec(spec);
  const int64_t n = spec.count();
  if (n == 0) return 0;
  int64_t decoded = 0;
  if (spec.group == 0) {  // one scale for the whole sum: every term first, then the encode
    std::fill(sum, sum + n, 0.f);
    for (int i = 0; i < count; ++i)
      decoded += fp8_group_decode(codes[i], scales[i], spec, sum, true);
    fp8_group_encode(sum, spec, out_codes, out_scales);
    return decoded;
  }
  // Per chunk of groups, while its part of the sum is in cache: zeros, each term added in index
  // order, the encode. Every element's sum is 0 + m_0 + m_1 + ... as in the calls above, and
  // each group is encoded from its own elements alone, so the bytes are theirs.
#pragma omp parallel reduction(+ : decoded) if (n >= kParallelMin)
  {
    Scratch w(spec);
    for_chunks(spec.num_groups(), spec.group, [&](int64_t g0, int64_t g1) {
      zero_groups(sum, spec, g0, g1);
      for (int i = 0; i < count; ++i) {
        decoded += decode_chunk(codes[i], scales[i], spec, g0, g1, AccumulateF32{sum}, &w);
      }
      encode_chunk(sum, spec, g0, g1, out_codes, out_scales, &w);
    });
  }
  return decoded;
}

}  // namespace taco::cpu
