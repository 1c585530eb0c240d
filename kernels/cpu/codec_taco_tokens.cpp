// taco's decode along tokens to fp32 on the CPU with AVX2 (kernels/codec_fp8.h): a group is G
// consecutive rows of one column, so eight neighbouring columns of a row block are the eight
// groups of one batch of kernels/cpu/codec_taco_lanes.h, one group per lane. Run in place, a batch
// reads 8 bytes of codes and writes (or adds into) 32 bytes of each of G rows that lie cols
// elements apart; where a row is a power of two bytes long, those G lines fall into a few sets of
// the L1 cache and evict each other long before the next batch comes for the rest of each line
// (one thread, [256, 1024] in cache: 0.69 ns per element decoding, 1.6 decoding-accumulating;
// at cols = 1032 0.28 and 0.32). So a strip of a row block's neighbouring columns is staged: its
// codes copied into a contiguous block (whole lines of each row), the lanes decode its batches
// into a second block (0.49 and 0.57 ns in cache), and that goes to the output a row at a time
// while the next strip is decoded, whose rows are on their way from memory meanwhile.
//
// The lanes do the same operations on the same values whichever layout they read and write, and
// a decode-accumulate adds each staged value to the output as the lanes would, so the bits are
// the per-group loops' (tests/unit/test_codec_cpu_bits.cpp). The batches the lanes decline (the
// rare paths), the columns after a strip's last whole batch and the strips of a short last row
// block go through decode_range; those columns are not written from the stage (a
// decode-accumulate must add each value once).
//
// Not staged (measured, one thread, [32768, 1024], G = 128): the decode to bf16 (0.60 against
// 0.55 ns per element in place, though 0.42 against 0.49 in cache) and the encode (0.77 against
// 0.52 from bf16): their in-place loops take the strided lines from memory better.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/codec_fp8_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

namespace taco::cpu::fp8_detail {
namespace {

// Columns per strip: output stages of kStageBytes (two: the strip being decoded and the one
// being written), whole batches, at most kMaxStrip (64 codes: one line a row). Measured, one
// thread, [32768, 1024], G = 128: 8 KiB stages (16 columns) were slower than 16 KiB (32),
// decode 0.82 against 0.64 ns per element, decode-accumulate 0.96 against 0.72.
constexpr int kStageBytes = 16384, kMaxStrip = 64;
constexpr int strip_width(int group) {
  return std::clamp(kStageBytes / (group * int(sizeof(float))), 8, kMaxStrip);
}

// f(c0, c1) for each longest run of a strip's columns [0, w) that were (want = true) or were not
// decoded by the lanes: bit b of `done` for the batch of columns [8b, 8b + 8); the columns after
// the last whole batch never are.
template <class F>
TACO_SIMD_INLINE void for_runs(uint32_t done, int w, bool want, F&& f) {
  auto is_done = [&](int c) { return c + 8 <= w && ((done >> (c / 8)) & 1u); };
  for (int c0 = 0; c0 < w;) {
    const bool d = is_done(c0);
    int c1 = std::min(c0 + 8, w);
    while (c1 < w && is_done(c1) == d) c1 = std::min(c1 + 8, w);
    if (d == want) f(c0, c1);
    c0 = c1;
  }
}

// The lines of `bytes` bytes from p into L2 (prefetcht1): into L1 they would land in the few sets
// the strided rows share and push out the stages (measured, one thread, [32768, 1024]: decode to
// fp32 0.85 ns per element with prefetcht0, 0.63 with prefetcht1).
TACO_SIMD_INLINE void prefetch_l2(const void* p, int bytes) {
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b, 0, 2);
}

// A strip the lanes decoded into a stage, waiting to be written to the output.
struct Pending {
  Strip t{0, 0, 0, 0};
  uint32_t done = 0;
  const float* stage = nullptr;
};

// Rows [r0, r1) of a pending strip's decoded columns -> out.
template <int kW, class Store>
TACO_SIMD_INLINE void write_rows(const Pending& p, int r0, int r1, int64_t cols,
                                 const Store& store) {
  if (p.stage == nullptr) return;
  for_runs(p.done, p.t.w, true, [&](int c0, int c1) {
    for (int r = r0; r < r1; ++r) {
      store.run(p.t.base + r * cols + c0, p.stage + r * kW + c0, c1 - c0);  // or added
    }
  });
}

// One strip -> its stage, then pending; the strip pending before is written out a share before
// each batch, so that its stores overlap the work (all at once they stalled it). Returns the
// groups decode_range counted (the lanes count none). The stages hold kN rows of kW columns.
template <int kN, int kW, class Store>
TACO_SIMD_INLINE int64_t decode_strip(const uint8_t* codes, const uint8_t* scales,
                                      const Fp8GroupSpec& s, const Strip& t, const Strip& next,
                                      const Store& store, Scratch* w,
                                      uint8_t* __restrict code_stage, float* __restrict stage,
                                      Pending& pending) {
  const int batches = t.n == kN ? t.w / 8 : 0;
  uint32_t done = 0;
  if (batches > 0) {
    for (int r = 0; r < kN; ++r) {
      const uint8_t* row = codes + t.base + r * s.cols;
      if (batches * 8 == kW) {
        std::memcpy(code_stage + r * kW, row, kW);
      } else {
        std::memcpy(code_stage + r * kW, row, size_t(batches) * 8);
      }
    }
    for (int b = 0; b < batches; ++b) {
      const int r0 = b * kN / batches, r1 = (b + 1) * kN / batches;
      // A share of the next strip's rows too: all at once, they would fill the misses the core
      // can have in flight and stall it.
      for (int r = r0; r < std::min(r1, next.n); ++r) {
        const int64_t i = next.base + r * s.cols;
        prefetch_l2(codes + i, next.w);
        prefetch_l2(store.out + i, next.w * int(sizeof(float)));
      }
      write_rows<kW>(pending, r0, r1, s.cols, store);
      if (lanes::decode8_strip(code_stage, 8 * b, kW, scales, s, t.g + 8 * b, stage)) {
        done |= 1u << b;
      }
    }
    pending = {t, done, stage};
  }
  int64_t counted = 0;
  for_runs(done, t.w, false, [&](int c0, int c1) {
    counted += decode_range(codes, scales, s, t.g + c0, t.g + c1, store, w);
  });
  return counted;
}

template <class Store>
int64_t decode_strips(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s,
                      int64_t g0, int64_t g1, const Store& store, Scratch* w) {
  int64_t counted = 0;
  simd::with_taco_size(s.group, [&]<int kN>() {
    constexpr int kW = strip_width(kN);
    alignas(64) uint8_t code_stage[kN * kW];
    alignas(64) float stages[2][kN * kW];  // the strip being decoded and the one pending
    Pending pending;
    int which = 0;
    for_strips<kW>(s, g0, g1, [&](const Strip& t, const Strip& next) {
      counted += decode_strip<kN, kW>(codes, scales, s, t, next, store, w, code_stage,
                                      stages[which], pending);
      if (pending.stage == stages[which]) which ^= 1;
    });
    write_rows<kW>(pending, 0, kN, s.cols, store);  // the last
  });
  return counted;
}

}  // namespace

#define TACO_TACO_TOKENS_DECODE(Store)                                                   \
  int64_t taco_tokens_decode(const uint8_t* c, const uint8_t* sc, const Fp8GroupSpec& s, \
                             int64_t g0, int64_t g1, Store st, Scratch* w) {             \
    return decode_strips(c, sc, s, g0, g1, st, w);                                       \
  }
TACO_TACO_TOKENS_DECODE(StoreF32)
TACO_TACO_TOKENS_DECODE(AccumulateF32)

}  // namespace taco::cpu::fp8_detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
