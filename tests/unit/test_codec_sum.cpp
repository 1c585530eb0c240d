// Codec::decode_sum_encode, the middle step of the two-shot all-reduce on the host (the bytes the
// device kernels are held to): the codecs without a transform sum values, exactly as
// decode_accumulate into zeros and then encode; taco sums its transform's coefficients
// (kernels/codec_fp8.h), which must be the same sum: the coefficients transform back to the
// value-domain sum, the message differs from the value-domain path's only where fp32 rounding
// tips a code, its error against the exact sum is no larger, and the bytes do not depend on the
// CPU's vector width.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "compression/codec.h"
#include "compression/wire_format.h"
#include "kernels/check.h"
#include "kernels/codec_fp8.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_codec_common.h"

using namespace taco;

namespace {

const WireContext kCtx{std::nullopt, -1, 0};

CodecOptions opts(CodecKind kind, Fp8Format format, int group, Fp8Scales scales, GroupAxis axis) {
  return canonical(CodecOptions{kind, format, group, scales, axis});
}

// p encodings of fresh random messages (a few outliers, one message ten times the others), each
// in a slot of `slot` bytes; `x` gets the inputs.
struct Messages {
  std::vector<std::vector<float>> x;
  std::vector<uint8_t> slots;
  size_t size = 0;
};

Messages make_messages(const Codec& codec, MessageShape s, int p, uint64_t seed) {
  Messages m;
  m.size = codec.max_encoded_size(s, DType::f32);
  m.slots.assign(size_t(p) * m.size, 0);
  for (int i = 0; i < p; ++i) {
    std::vector<float> x =
        test::random_normal(size_t(s.count()), seed + uint64_t(i), 0.f, i == 1 ? 10.f : 1.f);
    for (size_t k = 7 * size_t(i); k < x.size(); k += 97) x[k] *= 40.f;
    codec.encode(x.data(), s, m.slots.data() + size_t(i) * m.size, m.size);
    m.x.push_back(std::move(x));
  }
  return m;
}

std::vector<float> decoded(const Codec& codec, const std::vector<uint8_t>& buf, MessageShape s) {
  std::vector<float> out(size_t(s.count()));
  codec.decode(buf.data(), buf.size(), s, out.data(), kCtx);
  return out;
}

// The value-domain reference: decode_accumulate of each message into zeros, then encode.
std::vector<uint8_t> value_domain_sum(const Codec& codec, const Messages& m, MessageShape s, int p,
                                      std::vector<float>* acc) {
  acc->assign(size_t(s.count()), 0.f);
  for (int i = 0; i < p; ++i) {
    codec.decode_accumulate(m.slots.data() + size_t(i) * m.size, m.size, s, acc->data(), kCtx);
  }
  std::vector<uint8_t> out(codec.max_encoded_size(s, DType::f32));
  codec.encode(acc->data(), s, out.data(), out.size());
  return out;
}

std::vector<uint8_t> sum_of(const Codec& codec, const Messages& m, MessageShape s, int p,
                            std::vector<float>* sum, int64_t* nonfinite = nullptr) {
  sum->assign(size_t(s.count()), -7.f);
  std::vector<uint8_t> out(codec.max_encoded_size(s, DType::f32));
  const DecodeResult r = codec.decode_sum_encode(m.slots.data(), m.size, p, m.size, s, sum->data(),
                                                 out.data(), out.size(), kCtx);
  if (nonfinite) *nonfinite = r.nonfinite_groups;
  return out;
}

double l2(const std::vector<float>& a, const std::vector<double>& exact) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - exact[i]) * (double(a[i]) - exact[i]);
  return std::sqrt(e);
}

using CodecSum = test::FreshSeedTest;

}  // namespace

TEST_F(CodecSum, CodecsWithoutATransformSumValuesAsDecodeAccumulateThenEncode) {
  std::vector<CodecOptions> cases = {CodecOptions{}, opts(CodecKind::fp8_tensor, Fp8Format::e4m3, 0,
                                                          Fp8Scales::single, GroupAxis::hidden)};
  for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
    cases.push_back(opts(CodecKind::fp8_block, Fp8Format::e4m3, 32, Fp8Scales::single, axis));
    cases.push_back(opts(CodecKind::fp8_block, Fp8Format::e5m2, 128, Fp8Scales::dual, axis));
  }
  const MessageShape s{48, 200};
  for (const CodecOptions& o : cases) {
    const auto codec = make_codec(o);
    for (int p : {1, 2, 3}) {
      SCOPED_TRACE(describe(o) + " p=" + std::to_string(p));
      const Messages m = make_messages(*codec, s, p, seed_);
      std::vector<float> acc, sum;
      const std::vector<uint8_t> ref = value_domain_sum(*codec, m, s, p, &acc);
      const std::vector<uint8_t> out = sum_of(*codec, m, s, p, &sum);
      ASSERT_EQ(out.size(), ref.size());
      EXPECT_EQ(std::memcmp(out.data(), ref.data(), ref.size()), 0) << "message bytes";
      EXPECT_EQ(std::memcmp(sum.data(), acc.data(), acc.size() * 4), 0) << "the fp32 sum";
    }
  }
}

TEST_F(CodecSum, TacoSumsItsCoefficientsAndGetsTheValueDomainSum) {
  // [48, 200]: along hidden every row ends in a tail group (200 = 128 + 72, 3 x 64 + 8, ...),
  // along tokens every column (48 rows) at G >= 64; [256, 256]: full groups only.
  for (MessageShape s : {MessageShape{48, 200}, MessageShape{256, 256}}) {
    for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
      for (int g : {32, 128, 512}) {
        for (Fp8Scales sc : {Fp8Scales::dual, Fp8Scales::single, Fp8Scales::e8m0}) {
          for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
            const CodecOptions o = opts(CodecKind::taco, f, g, sc, axis);
            const auto codec = make_codec(o);
            for (int p : {2, 4}) {
              SCOPED_TRACE(describe(o) + " p=" + std::to_string(p) + " [" + std::to_string(s.rows) +
                           ", " + std::to_string(s.cols) + "]");
              const Messages m = make_messages(*codec, s, p, seed_ + uint64_t(g) + uint64_t(p));
              std::vector<float> acc, z;
              const std::vector<uint8_t> old_bytes = value_domain_sum(*codec, m, s, p, &acc);
              const std::vector<uint8_t> new_bytes = sum_of(*codec, m, s, p, &z);

              // The coefficients transform back to the value-domain sum, group by group; a tail
              // group has no transform and holds the very same floats.
              const bool hidden = axis == GroupAxis::hidden;
              const int64_t outer = hidden ? s.rows : s.cols, inner = hidden ? s.cols : s.rows;
              int bad_groups = 0;
              for (int64_t a = 0; a < outer; ++a) {
                for (int64_t b0 = 0; b0 < inner; b0 += g) {
                  const int64_t n = std::min<int64_t>(g, inner - b0);
                  auto at = [&](int64_t k) {
                    return size_t(hidden ? a * s.cols + b0 + k : (b0 + k) * s.cols + a);
                  };
                  std::vector<double> y(static_cast<size_t>(n), 0.0);
                  double norm = 0;
                  for (int64_t k = 0; k < n; ++k) y[size_t(k)] = z[at(k)];
                  if (n == g) test::orthonormal_wht(y);
                  double err = 0;
                  for (int64_t k = 0; k < n; ++k) {
                    const double v = acc[at(k)];
                    norm += v * v;
                    err += (y[size_t(k)] - v) * (y[size_t(k)] - v);
                    if (n < g && std::memcmp(&z[at(k)], &acc[at(k)], 4) != 0) err = 1e30;
                  }
                  // fp32 roundings of the decodes and the sums: a few ulps of the group's norm
                  if (!(std::sqrt(err) <= 1e-6 * std::sqrt(norm)) && ++bad_groups <= 3) {
                    ADD_FAILURE() << "group at " << a << ", " << b0 << ": coefficients off by "
                                  << std::sqrt(err) << " (norm " << std::sqrt(norm) << ")";
                  }
                }
              }

              // The same message up to codes that fp32 rounding tips over a rounding boundary.
              const size_t codes = size_t(s.count());
              size_t tipped = 0;
              for (size_t i = 0; i < codes; ++i)
                tipped += old_bytes[kWireHeaderBytes + i] != new_bytes[kWireHeaderBytes + i];
              // (e8m0 aside: its power-of-two scale sits exactly on a boundary whenever one
              // message's largest code dominates a group, and which side fp32 rounding picks
              // flips the whole group's codes by a factor of two, in either path.)
              if (sc != Fp8Scales::e8m0) {
                EXPECT_LE(tipped, codes / 1000 + 8) << "codes differing from the value-domain sum";
              }

              // And no further from the exact sum of the inputs than the value-domain path.
              std::vector<double> exact(codes, 0.0);
              for (const auto& x : m.x) {
                for (size_t i = 0; i < codes; ++i) exact[i] += x[i];
              }
              // With e8m0 the two paths differ in more codes (1-12 of a group of 128 in one
              // seed's message; likely ties: power-of-two scales make sums that sit exactly
              // halfway between two codes common, and the value-domain path's fp32 round trip
              // breaks them either way), so on the smallest messages (p = 2, 48 rows) the two
              // errors part by chance. Over 1500 seeds (72000 e8m0 cases) the ratio had median
              // 1.000 and maximum 1.030, and exceeded 1.02 fourteen times (so with 1.02 for every
              // scale, a run of this test failed about once in a hundred); the other scales
              // stayed within 1.003. A wrong sum moves the error far more than either bound.
              const double bound = sc == Fp8Scales::e8m0 ? 1.06 : 1.02;
              const double e_new = l2(decoded(*codec, new_bytes, s), exact);
              const double e_old = l2(decoded(*codec, old_bytes, s), exact);
              EXPECT_LE(e_new, bound * e_old) << "error against the exact sum";
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// The per-group loops (baseline x86-64) against AVX2's eight groups at a time (and the strips
// along tokens) and AVX-512, on messages of whole batches and tails: the bytes and the sums.
TEST_F(CodecSum, TacoSumBytesDoNotDependOnTheVectorWidth) {
  for (MessageShape s : {MessageShape{1024, 512}, MessageShape{600, 200}}) {
    for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
      for (int g : {32, 128, 512}) {
        for (Fp8Scales sc : {Fp8Scales::dual, Fp8Scales::e8m0}) {
          const CodecOptions o = opts(CodecKind::taco, Fp8Format::e4m3, g, sc, axis);
          SCOPED_TRACE(describe(o) + " [" + std::to_string(s.rows) + ", " + std::to_string(s.cols) +
                       "]");
          const auto codec = make_codec(o);
          const Messages m = make_messages(*codec, s, 3, seed_ + uint64_t(g));
          std::vector<std::vector<uint8_t>> out;
          std::vector<std::vector<float>> z(3);
          for (int isa : {0, 1, 2}) {
            cpu::fp8_codecs_limit_isa(isa);
            out.push_back(sum_of(*codec, m, s, 3, &z[size_t(isa)]));
          }
          cpu::fp8_codecs_limit_isa(2);
          EXPECT_TRUE(out[0] == out[1]) << "baseline against AVX2";
          EXPECT_TRUE(out[0] == out[2]) << "baseline against AVX-512";
          EXPECT_EQ(std::memcmp(z[0].data(), z[1].data(), z[0].size() * 4), 0) << "sums, AVX2";
          EXPECT_EQ(std::memcmp(z[0].data(), z[2].data(), z[0].size() * 4), 0) << "sums, AVX-512";
          if (HasFailure()) return;
        }
      }
    }
  }
}

// decode_sum_encode runs a chunk of groups at a time (zeros, each term, the encode, while the
// chunk is in cache; several chunks on several threads): its bytes, sum and counts must be those
// of the kernels' whole-message calls one after the other. Messages of several chunks, with
// tails along both axes, negative zeros (a code of 0x80) and a NaN code, at every ISA level.
TEST_F(CodecSum, TheChunkedSumIsTheWholeMessageCallsInTurn) {
  const MessageShape s{1030, 1000};  // ~1M elements: eight chunks or more, and threads
  std::vector<CodecOptions> cases;
  for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
    for (int g : {32, 128, 512})
      cases.push_back(opts(CodecKind::taco, Fp8Format::e4m3, g, Fp8Scales::dual, axis));
    cases.push_back(opts(CodecKind::taco, Fp8Format::e5m2, 128, Fp8Scales::e8m0, axis));
    cases.push_back(opts(CodecKind::fp8_block, Fp8Format::e4m3, 128, Fp8Scales::single, axis));
  }
  for (const CodecOptions& o : cases) {
    const auto codec = make_codec(o);
    const WireLayout layout = wire_layout(o, s, DType::f32);  // of the terms and of the sum
    Fp8GroupSpec spec = fp8_group_spec(o, s);
    spec.coefficients = spec.hadamard;
    for (int p : {1, 3}) {
      SCOPED_TRACE(describe(o) + " p=" + std::to_string(p));
      Messages m = make_messages(*codec, s, p, seed_ + uint64_t(o.group) + uint64_t(p));
      // Negative zeros in every term at the same elements (their sum stays -0 only if the sum
      // starts from the first term instead of from 0), and a NaN code in the last term.
      for (int i = 0; i < p; ++i) {
        uint8_t* codes = m.slots.data() + size_t(i) * m.size + layout.payload_offset;
        for (size_t k = 11; k < size_t(s.count()); k += 4099) codes[k] = 0x80;
      }
      m.slots[size_t(p - 1) * m.size + layout.payload_offset + 5000] = 0x7F;

      std::vector<float> want(size_t(s.count()), 0.f);
      std::vector<uint8_t> want_bytes(codec->max_encoded_size(s, DType::f32), 0);
      int64_t want_bad = 0;
      for (int i = 0; i < p; ++i) {
        const uint8_t* msg = m.slots.data() + size_t(i) * m.size;
        want_bad += cpu::fp8_group_decode(msg + layout.payload_offset, msg + layout.scales_offset,
                                          spec, want.data(), true);
      }
      cpu::fp8_group_encode(want.data(), spec, want_bytes.data() + layout.payload_offset,
                            want_bytes.data() + layout.scales_offset);

      for (int isa : {0, 1, 2}) {
        cpu::fp8_codecs_limit_isa(isa);
        std::vector<float> z;
        int64_t bad = -1;
        const std::vector<uint8_t> out = sum_of(*codec, m, s, p, &z, &bad);
        cpu::fp8_codecs_limit_isa(2);
        SCOPED_TRACE("isa " + std::to_string(isa));
        EXPECT_EQ(bad, want_bad);
        EXPECT_EQ(std::memcmp(z.data(), want.data(), want.size() * 4), 0) << "the fp32 sum";
        EXPECT_EQ(std::memcmp(out.data() + layout.payload_offset,
                              want_bytes.data() + layout.payload_offset,
                              out.size() - layout.payload_offset),
                  0)
            << "codes and scales";
        if (HasFailure()) return;
      }
    }
  }
}

TEST_F(CodecSum, ANonFiniteInputPoisonsItsGroupOfTheSumAndIsCounted) {
  const MessageShape s{8, 256};
  const auto codec =
      make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual, GroupAxis::hidden));
  Messages m = make_messages(*codec, s, 2, seed_);
  // Message 1, element 300 (row 1, group 0 of that row: groups are numbered row by row) is NaN.
  m.x[1][300] = std::nanf("");
  codec->encode(m.x[1].data(), s, m.slots.data() + m.size, m.size);
  std::vector<float> z;
  int64_t nonfinite = -1;
  const std::vector<uint8_t> out = sum_of(*codec, m, s, 2, &z, &nonfinite);
  EXPECT_EQ(nonfinite, 1);
  const std::vector<float> x = decoded(*codec, out, s);
  for (size_t i = 0; i < x.size(); ++i) {
    const bool poisoned_group = i >= 256 && i < 384;
    ASSERT_EQ(std::isnan(x[i]), poisoned_group) << "element " << i;
  }
}

TEST_F(CodecSum, ADamagedMessageIsRejectedAsDecodeRejectsIt) {
  const MessageShape s{4, 128};
  const auto codec =
      make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual, GroupAxis::hidden));
  Messages m = make_messages(*codec, s, 2, seed_);
  m.slots[m.size + 1] ^= 0x40;  // message 1's magic
  std::vector<float> z;
  EXPECT_THROW(sum_of(*codec, m, s, 2, &z), UserError);
}
