// The fast CPU FP8 codecs (kernels/cpu/codec_fp8.cpp) must write the same bytes and decode to
// the same bits as the original scalar ones (tests/unit/reference/, kept verbatim for this):
// every codec, format, scale mode, group size 32..512 (and non-power-of-two blocks), both axes,
// fp32 and bf16 inputs, store / accumulate / bf16 outputs, on shapes with partial last groups
// and on values that take the rare paths (near FLT_MAX, subnormal, NaN/Inf, all-zero groups).
// There is no tolerance: one differing byte, bit or count fails.
//
// Two checks: fresh random inputs against the reference (every run new ones), and a checksum of
// every byte and bit on seeded inputs whose expected value was produced by the ORIGINAL code at
// commit 2ad94ea (before any of the speed work), so that a change to the reference copy itself
// cannot go unnoticed either. TACO_CODEC_BITS_DUMP=FILE writes all those bytes to FILE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec_fp8.h"
#include "tests/unit/reference/codec_fp8_reference.h"
#include "tests/unit/test_codec_common.h"

namespace taco {
namespace {

namespace ref = cpu::reference;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The bits of a decoded value, every NaN as one: IEEE 754 leaves the sign and payload of a NaN
// that arithmetic produces (Inf - Inf in the butterflies, a NaN code times a scale) unspecified,
// and they follow the operand order the compiler picks (the original code compiled at -O2 and
// -O3 -march=x86-64-v2 already differ), so they are no part of the codecs' contract. Everything
// else, the position of every NaN included, must match.
uint32_t bits_of(float f) {
  if (std::isnan(f)) return 0x7FC00000u;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint16_t bits_of(bf16 b) {
  return (b.bits & 0x7F80u) == 0x7F80u && (b.bits & 0x7Fu) ? 0x7FC0u : b.bits;
}

// Values in runs of random length, each run of one kind, so that whole groups (and parts of
// groups) see each kind: ordinary Gaussians at a random magnitude, outliers, near FLT_MAX,
// subnormals, zeros, constants, NaN/Inf, and any float bit pattern at all.
std::vector<float> random_message(size_t n, std::mt19937_64& rng) {
  std::vector<float> x(n);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> kind_of(0, 11), run_of(1, 700), exp_of(-40, 40);
  size_t i = 0;
  while (i < n) {
    const int kind = kind_of(rng);
    const size_t end = std::min(n, i + size_t(run_of(rng)));
    const float mag = std::ldexp(1.f, exp_of(rng));
    for (; i < end; ++i) {
      float v = normal(rng);
      switch (kind) {
        case 0:
        case 1:
        case 2:
          v *= mag;
          break;  // Gaussian
        case 3:
          v *= (rng() % 97 == 0 ? 1e4f : 1.f) * mag;
          break;  // outliers
        case 4:
          v = (v < 0 ? -1.f : 1.f) * FLT_MAX * (0.5f + float(rng() % 1000) / 2000.f);
          break;
        case 5:
          v *= 1e-40f;
          break;  // subnormal
        case 6:
          v = 0.f;
          break;
        case 7:
          v = mag;
          break;  // constant
        case 8:
          if (rng() % 61 == 0) v = (rng() % 2) ? INFINITY : -INFINITY;
          if (rng() % 83 == 0) v = NAN;
          break;
        case 9:
          v = from_bits(uint32_t(rng()));
          break;  // anything
        case 10:
          v = (v < 0 ? -1.f : 1.f) * (rng() % 2 ? 3.3e38f : 0.9f * FLT_MAX);
          break;
        default:
          v *= 1e-30f;
          break;  // tiny normals
      }
      x[i] = v;
    }
  }
  return x;
}

struct Case {
  Fp8GroupSpec spec;
  bool bf16_input;
};

std::string describe(const Case& c) {
  const Fp8GroupSpec& s = c.spec;
  return "[" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "] G " +
         std::to_string(s.group) + (s.along_tokens ? " token" : " hidden") +
         (s.hadamard ? " taco" : " block") + (s.format == Fp8Format::e4m3 ? " e4m3" : " e5m2") +
         " scales " + std::to_string(int(s.scales)) + (c.bf16_input ? " bf16" : " fp32");
}

// Every option combination the kernels take, on the given shape.
std::vector<Case> cases_for(int64_t rows, int64_t cols) {
  std::vector<Case> out;
  const int groups[] = {0, 32, 48, 64, 100, 128, 256, 512};
  for (int g : groups) {
    for (int hadamard = 0; hadamard < 2; ++hadamard) {
      if (hadamard && (g == 0 || (g & (g - 1)))) continue;
      for (int tokens = 0; tokens < (g ? 2 : 1); ++tokens) {
        for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
          for (Fp8Scales sc : {Fp8Scales::dual, Fp8Scales::single, Fp8Scales::e8m0}) {
            for (int b = 0; b < 2; ++b) {
              Case c;
              c.spec = Fp8GroupSpec{rows, cols, g, tokens == 1, hadamard == 1, f, sc};
              c.bf16_input = b == 1;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

// FNV-1a, 64 bit.
struct Checksum {
  uint64_t h = 1469598103934665603ull;
  std::FILE* dump = nullptr;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    if (dump) std::fwrite(p, 1, n, dump);
  }
};

// Encodes x with the fast codec and the reference, decodes the result (and a buffer of random
// bytes) both ways into fp32, accumulated fp32 and bf16, and compares everything bit for bit.
// `sum` receives every byte the fast codec produced.
void check_case(const Case& c, const std::vector<float>& x, std::mt19937_64& rng, Checksum* sum) {
  SCOPED_TRACE(describe(c));
  const Fp8GroupSpec& s = c.spec;
  const size_t n = size_t(s.count()), ns = s.scale_bytes();
  std::vector<uint8_t> codes(n, 0xAB), scales(ns, 0xCD), rcodes(n, 0xAB), rscales(ns, 0xCD);
  Fp8EncodeCounts got, want;
  if (c.bf16_input) {
    std::vector<bf16> xb(n);
    for (size_t i = 0; i < n; ++i) xb[i] = float_to_bf16(x[i]);
    got = cpu::fp8_group_encode(xb.data(), s, codes.data(), scales.data());
    want = ref::fp8_group_encode(xb.data(), s, rcodes.data(), rscales.data());
  } else {
    got = cpu::fp8_group_encode(x.data(), s, codes.data(), scales.data());
    want = ref::fp8_group_encode(x.data(), s, rcodes.data(), rscales.data());
  }
  ASSERT_EQ(got.nonfinite_values, want.nonfinite_values);
  ASSERT_EQ(got.nonfinite_groups, want.nonfinite_groups);
  ASSERT_EQ(codes, rcodes) << "codes differ";
  ASSERT_EQ(scales, rscales) << "scales differ";
  if (sum) {
    sum->add(codes.data(), n);
    sum->add(scales.data(), ns);
    sum->add(&got, sizeof got);
  }

  // The message just encoded, then random bytes (what a flipped payload could hold).
  std::vector<uint8_t> junk_codes(n), junk_scales(ns);
  for (auto& b : junk_codes) b = uint8_t(rng());
  for (auto& b : junk_scales) b = uint8_t(rng());
  const uint8_t* inputs[2][2] = {{codes.data(), scales.data()},
                                 {junk_codes.data(), junk_scales.data()}};
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which ? "random bytes" : "encoded message");
    const uint8_t *pc = inputs[which][0], *ps = inputs[which][1];
    std::vector<float> out(n), rout(n);
    ASSERT_EQ(cpu::fp8_group_decode(pc, ps, s, out.data(), false),
              ref::fp8_group_decode(pc, ps, s, rout.data(), false));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(out[i]), bits_of(rout[i])) << "fp32 decode, element " << i;
    }
    if (sum) {
      for (float& v : out) v = from_bits(bits_of(v));
      sum->add(out.data(), 4 * n);
    }

    std::normal_distribution<float> normal(0.f, 1.f);
    for (size_t i = 0; i < n; ++i) out[i] = rout[i] = normal(rng);
    ASSERT_EQ(cpu::fp8_group_decode(pc, ps, s, out.data(), true),
              ref::fp8_group_decode(pc, ps, s, rout.data(), true));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(out[i]), bits_of(rout[i])) << "decode-accumulate, element " << i;
    }

    std::vector<bf16> ob(n), rob(n);
    ASSERT_EQ(cpu::fp8_group_decode(pc, ps, s, ob.data()),
              ref::fp8_group_decode(pc, ps, s, rob.data()));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(ob[i]), bits_of(rob[i])) << "bf16 decode, element " << i;
    }
    if (sum) {
      for (bf16& v : ob) v.bits = bits_of(v);
      sum->add(ob.data(), 2 * n);
    }
  }
}

// Shapes with partial last groups along either axis and tiny ones, each with every case; then
// one above the size at which the codecs start threads, with every case of G = 128.
const int64_t kShapes[][2] = {{1, 1},    {1, 37},   {3, 129},  {5, 1000},
                              {33, 130}, {64, 256}, {7, 1024}, {130, 77}};
const int64_t kLargeShape[2] = {97, 768};

class CodecCpuBits : public test::FreshSeedTest {};

TEST_F(CodecCpuBits, FastCodecsMatchTheOriginalScalarCodecsBitForBit) {
  std::mt19937_64 rng(seed_);
  std::uniform_int_distribution<int64_t> rows_of(1, 60), cols_of(1, 600);
  for (int trial = 0; trial < 9; ++trial) {
    // A random shape with a random quarter of the cases; every third trial is large (threads).
    // Trials 0-2 run the AVX-512 build of the loops, 3-5 the AVX2 one, 6-8 the baseline x86-64
    // one (each where the CPU has it; the level used is in the trace).
    const bool large = trial % 3 == 2;
    const int isa = cpu::fp8_codecs_limit_isa(2 - trial / 3);
    SCOPED_TRACE("instruction set level " + std::to_string(isa) + " (2 AVX-512, 1 AVX2, 0 SSE2)");
    const int64_t rows = large ? 90 + rows_of(rng) : rows_of(rng),
                  cols = cols_of(rng) + (large ? 700 : 0);
    const std::vector<float> x = random_message(size_t(rows * cols), rng);
    for (const Case& c : cases_for(rows, cols)) {
      if (rng() % (large ? 16 : 4) != 0) continue;
      check_case(c, x, rng, nullptr);
      if (HasFatalFailure()) break;
    }
    if (HasFatalFailure()) break;
  }
  cpu::fp8_codecs_limit_isa(2);
}

// Ordinary activations (Gaussian, a magnitude per row from 2^-20 to 2^20, some channels x50),
// with a few all-zero rows and scattered NaN, so that most batches of eight groups take taco's
// eight-at-a-time path (kernels/cpu/codec_taco_lanes.h) and their neighbours the per-group one.
std::vector<float> ordinary_message(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::vector<float> x(size_t(rows * cols));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exp_of(-20, 20);
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = rng() % 11 == 0 ? 0.f : std::ldexp(1.f, exp_of(rng));
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * mag * (c % 37 == 5 ? 50.f : 1.f);
      if (rng() % 5000 == 0) v = NAN;
      x[size_t(r * cols + c)] = v;
    }
  }
  return x;
}

TEST_F(CodecCpuBits, TacoEightGroupsAtATimeMatchesTheOriginalBitForBit) {
  std::mt19937_64 rng(seed_);
  for (int64_t G : {32, 64, 128, 256, 512}) {
    // Along hidden: groups that run on from row to row (cols % G == 0), and rows with a short
    // tail group; along tokens: rows with a tail block, columns not a multiple of eight.
    const int64_t shapes[][2] = {{4, 19 * G}, {3, 17 * G + 37}, {2 * G + 7, 21}};
    for (const auto& shape : shapes) {
      const std::vector<float> x = ordinary_message(shape[0], shape[1], rng);
      for (const Case& c : cases_for(shape[0], shape[1])) {
        if (!c.spec.hadamard || c.spec.group != G) continue;
        check_case(c, x, rng, nullptr);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Columns of one kind each, so that along tokens whole groups are of that kind: mostly Gaussian
// at a magnitude per column (2^-20 .. 2^20), some all-zero (signed zeros among them), some so
// small that q is subnormal or 0, some near FLT_MAX; NaN and Inf scattered. Most strips of
// fp8_block along tokens (kernels/cpu/codec_fp8_tokens.cpp) then take the fast loops, and some of
// their columns the per-group path.
std::vector<float> token_message(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::vector<float> x(size_t(rows * cols));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exp_of(-20, 20), kind_of(0, 15);
  for (int64_t c = 0; c < cols; ++c) {
    const int kind = kind_of(rng);
    const float mag = std::ldexp(1.f, exp_of(rng));
    for (int64_t r = 0; r < rows; ++r) {
      float v = normal(rng);
      switch (kind) {
        case 0:
          v = rng() % 2 ? 0.f : -0.f;
          break;
        case 1:
          v *= 1e-42f;  // max / fp8_max subnormal or 0
          break;
        case 2:
          v = (v < 0 ? -1.f : 1.f) * FLT_MAX * (0.5f + float(rng() % 1000) / 2000.f);
          break;
        default:
          v *= mag;
          break;
      }
      if (rng() % 20000 == 0) v = rng() % 3 ? NAN : INFINITY;
      x[size_t(r * cols + c)] = v;
    }
  }
  return x;
}

TEST_F(CodecCpuBits, BlockAlongTokensMatchesTheOriginalBitForBit) {
  std::mt19937_64 rng(seed_);
  for (int isa = 2; isa >= 0; --isa) {
    SCOPED_TRACE("instruction set level " + std::to_string(cpu::fp8_codecs_limit_isa(isa)));
    for (int64_t G : {32, 48, 100, 128, 512}) {
      // Row blocks that end short, columns not a multiple of a vector or of a strip, a message
      // of one partial row block, and one large enough for threads (its chunks end mid-row).
      const int64_t big_rows = 2 * G + 13, big_cols = (1 << 16) / big_rows + 1 + rng() % 200;
      const int64_t shapes[][2] = {
          {2 * G + 7, 21}, {G, 300}, {G / 2 + 1, 1029}, {big_rows, big_cols}};
      for (const auto& shape : shapes) {
        const std::vector<float> x = token_message(shape[0], shape[1], rng);
        for (const Case& c : cases_for(shape[0], shape[1])) {
          if (c.spec.hadamard || !c.spec.along_tokens || c.spec.group != G) continue;
          check_case(c, x, rng, nullptr);
          if (HasFatalFailure()) break;
        }
        if (HasFatalFailure()) break;
      }
      if (HasFatalFailure()) break;
    }
    if (HasFatalFailure()) break;
  }
  cpu::fp8_codecs_limit_isa(2);
}

// taco's decode along tokens to fp32 (and accumulating) goes through staged strips of
// neighbouring columns (kernels/cpu/codec_taco_tokens.cpp: 64 columns at G = 32 and 64, 32 at 128,
// 16 at 256, 8 at 512), each written out while the next is decoded. The shapes give strips that
// end in a partial batch, rows whose width is no multiple of a strip, a short last row block, and
// (the last) chunks for two threads that begin and end mid-row; the column-wise message makes the
// lanes decline some batches of a strip (poisoned groups, from NaN and Inf inputs) and not others,
// and check_case's random bytes most of them. Every instruction-set level (taco's loops stop at
// AVX2, so levels 2 and 1 run the same path here, and 0 the per-group loops).
TEST_F(CodecCpuBits, TacoAlongTokensStagedStripsMatchTheOriginalBitForBit) {
  std::mt19937_64 rng(seed_);
  for (int isa = 2; isa >= 0; --isa) {
    SCOPED_TRACE("instruction set level " + std::to_string(cpu::fp8_codecs_limit_isa(isa)));
    for (int64_t G : {32, 64, 128, 256, 512}) {
      const int64_t strip = std::clamp<int64_t>(4096 / G, 8, 64);
      const int64_t big_rows = 2 * G + 5, big_cols = (1 << 16) / big_rows + 1 + rng() % 300;
      const int64_t shapes[][2] = {{2 * G + 7, 2 * strip + 8 + 3},
                                   {G, 3 * strip},
                                   {G, 1 + int64_t(rng() % 150)},
                                   {big_rows, big_cols}};
      for (const auto& shape : shapes) {
        if (G > 128 && shape[0] == big_rows) continue;  // the reference's time, not coverage
        for (int kind = 0; kind < 2; ++kind) {
          const std::vector<float> x = kind ? ordinary_message(shape[0], shape[1], rng)
                                            : token_message(shape[0], shape[1], rng);
          for (const Case& c : cases_for(shape[0], shape[1])) {
            if (!c.spec.hadamard || !c.spec.along_tokens || c.spec.group != G) continue;
            if (rng() % 2) continue;  // a random half of the options on each message
            check_case(c, x, rng, nullptr);
            if (HasFatalFailure()) break;
          }
          if (HasFatalFailure()) break;
        }
        if (HasFatalFailure()) break;
      }
      if (HasFatalFailure()) break;
    }
    if (HasFatalFailure()) break;
  }
  cpu::fp8_codecs_limit_isa(2);
}

// Expected value: this test run on the original code (commit 2ad94ea, before the speed work).
TEST(CodecCpuBitsGolden, SeededMessagesGiveTheOriginalCodesScalesAndValues) {
  Checksum sum;
  const char* dump = std::getenv("TACO_CODEC_BITS_DUMP");
  if (dump) sum.dump = std::fopen(dump, "wb");
  std::mt19937_64 rng(20261204);
  for (const auto& shape : kShapes) {
    const std::vector<float> x = random_message(size_t(shape[0] * shape[1]), rng);
    for (const Case& c : cases_for(shape[0], shape[1])) {
      check_case(c, x, rng, &sum);
      if (HasFatalFailure()) return;
    }
  }
  const std::vector<float> x = random_message(size_t(kLargeShape[0] * kLargeShape[1]), rng);
  for (const Case& c : cases_for(kLargeShape[0], kLargeShape[1])) {
    if (c.spec.group != 128) continue;
    check_case(c, x, rng, &sum);
    if (HasFatalFailure()) return;
  }
  if (sum.dump) std::fclose(sum.dump);
  std::printf("checksum 0x%016llx\n", (unsigned long long)sum.h);
  EXPECT_EQ(sum.h, 0xd8ee6489bb4bc63eull);
}

}  // namespace
}  // namespace taco
