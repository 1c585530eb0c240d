// Every codec and option set round-trips fresh random messages within the error FP8 rounding
// allows, group by group, and the codecs' documented behaviours hold: exact sizes, decode-and-
// accumulate adds exactly decode's values, non-finite inputs poison their group, bf16 in and out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "compression/codec.h"
#include "compression/stats.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_codec_common.h"

using namespace taco;

namespace {

CodecOptions opts(CodecKind kind, Fp8Format format = Fp8Format::e4m3, int group = 0,
                  Fp8Scales scales = Fp8Scales::single, GroupAxis axis = GroupAxis::hidden) {
  return canonical(CodecOptions{kind, format, group, scales, axis});
}

// The option sets under test: every codec, both formats, every group size, every scale mode,
// both axes.
std::vector<CodecOptions> option_sets() {
  std::vector<CodecOptions> v = {opts(CodecKind::none), opts(CodecKind::fp8_tensor),
                                 opts(CodecKind::fp8_tensor, Fp8Format::e5m2)};
  for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
    v.push_back(opts(CodecKind::fp8_block, Fp8Format::e4m3, 32, Fp8Scales::single, axis));
    v.push_back(opts(CodecKind::fp8_block, Fp8Format::e5m2, 128, Fp8Scales::e8m0, axis));
    for (int g : kGroupSizes) {
      for (Fp8Scales s : {Fp8Scales::dual, Fp8Scales::single, Fp8Scales::e8m0}) {
        v.push_back(opts(CodecKind::taco, Fp8Format::e4m3, g, s, axis));
      }
    }
    v.push_back(opts(CodecKind::taco, Fp8Format::e5m2, 64, Fp8Scales::dual, axis));
  }
  return v;
}

// Half an FP8 ulp relative to a normal value, and half the smallest subnormal: the rounding
// error of one code (round to nearest) in units of the value and of the group's scale.
double half_ulp(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x1p-4 : 0x1p-3; }
double half_subnormal(Fp8Format f) { return f == Fp8Format::e4m3 ? 0x1p-10 : 0x1p-17; }

// Element indices of each group, derived from the codec's documented grouping.
std::vector<std::vector<int64_t>> groups_of(const CodecOptions& o, MessageShape s) {
  std::vector<std::vector<int64_t>> out;
  if (s.count() == 0) return out;
  if (o.kind == CodecKind::fp8_tensor || o.kind == CodecKind::none) {
    out.emplace_back();
    for (int64_t i = 0; i < s.count(); ++i) out.back().push_back(i);
    return out;
  }
  const int64_t g = o.group;
  if (o.axis == GroupAxis::hidden) {
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c0 = 0; c0 < s.cols; c0 += g) {
        out.emplace_back();
        for (int64_t c = c0; c < std::min(s.cols, c0 + g); ++c)
          out.back().push_back(r * s.cols + c);
      }
    }
  } else {
    for (int64_t r0 = 0; r0 < s.rows; r0 += g) {
      for (int64_t c = 0; c < s.cols; ++c) {
        out.emplace_back();
        for (int64_t r = r0; r < std::min(s.rows, r0 + g); ++r)
          out.back().push_back(r * s.cols + c);
      }
    }
  }
  return out;
}

// Per group: ||x^ - x|| <= half_ulp * ||x|| + sqrt(n) * half_subnormal * scale + 1e-5 ||x||,
// where scale = M / fp8_max and M is the largest |value| the group quantizes (after the
// Hadamard transform for full TACO groups; the adaptive scale a cancels). The transform is
// orthonormal, so the code-domain error carries over to x unchanged; e8m0 rounds the scale up
// to a power of two, at most doubling it; 1e-5 covers the fp32 arithmetic around the rounding.
void expect_within_fp8_bounds(const CodecOptions& o, const std::vector<float>& x,
                              const std::vector<float>& xhat, MessageShape s) {
  if (o.kind == CodecKind::none) {
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(xhat[i], x[i]) << i;
    return;
  }
  int failures = 0;
  for (const auto& idx : groups_of(o, s)) {
    const size_t n = idx.size();
    std::vector<double> v(n);
    double norm = 0, err = 0;
    for (size_t i = 0; i < n; ++i) {
      v[i] = x[size_t(idx[i])];
      norm += v[i] * v[i];
      const double d = double(xhat[size_t(idx[i])]) - v[i];
      err += d * d;
    }
    if (o.kind == CodecKind::taco && int64_t(n) == o.group) test::orthonormal_wht(v);
    double m = 0;
    for (double y : v) m = std::max(m, std::fabs(y));
    const double scale = m / fp8_max(o.format) * (o.scales == Fp8Scales::e8m0 ? 2.0 : 1.0);
    const double bound = (half_ulp(o.format) + 1e-5) * std::sqrt(norm) +
                         std::sqrt(double(n)) * half_subnormal(o.format) * scale;
    if (!(std::sqrt(err) <= bound) && ++failures <= 3) {
      ADD_FAILURE() << describe(o) << ": group starting at element " << idx[0] << " error "
                    << std::sqrt(err) << " > bound " << bound;
    }
  }
}

std::vector<float> decode_to_float(const Codec& codec, const std::vector<uint8_t>& buf,
                                   MessageShape s) {
  std::vector<float> out(size_t(s.count()), -7.f);
  codec.decode(buf.data(), buf.size(), s, out.data(), WireContext{std::nullopt, -1, 0});
  return out;
}

std::vector<uint8_t> encode(const Codec& codec, const std::vector<float>& x, MessageShape s,
                            EncodeResult* result = nullptr) {
  std::vector<uint8_t> buf(codec.max_encoded_size(s, DType::f32));
  const EncodeResult r = codec.encode(x.data(), s, buf.data(), buf.size());
  EXPECT_EQ(r.bytes, buf.size());
  if (result) *result = r;
  return buf;
}

std::vector<float> roundtrip(const Codec& codec, const std::vector<float>& x, MessageShape s) {
  return decode_to_float(codec, encode(codec, x, s), s);
}

// `fraction` of the elements, each picked once, multiplied by `mul`.
std::vector<float> with_outliers(std::vector<float> x, uint64_t seed, double fraction, float mul) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> index(x.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  std::shuffle(index.begin(), index.end(), rng);
  for (size_t k = 0; k < size_t(double(x.size()) * fraction); ++k) x[index[k]] *= mul;
  return x;
}

using CodecRoundTrip = test::FreshSeedTest;

}  // namespace

TEST_F(CodecRoundTrip, NearZeroGaussianStaysWithinFp8RoundingPerGroup) {
  const MessageShape s{64, 512};
  const std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    const std::vector<float> xhat = roundtrip(*codec, x, s);
    expect_within_fp8_bounds(o, x, xhat, s);
    // Statistically, round to nearest on Gaussian data costs about 2.6e-2 (E4M3) and twice that
    // (E5M2) relative L2 (DESIGN.md §4); 3.0e-2 / 6.0e-2 leave room for 32k samples, and
    // e8m0's power-of-two scale (up to one binade of subnormal range lost).
    const double rel = test::relative_l2(xhat.data(), x.data(), x.size());
    if (o.kind != CodecKind::none) {
      EXPECT_LE(rel, o.format == Fp8Format::e4m3 ? 3.0e-2 : 6.0e-2);
    }
  }
}

TEST_F(CodecRoundTrip, GaussianWithOutliersStaysWithinFp8RoundingPerGroup) {
  const MessageShape s{64, 512};
  const std::vector<float> x = with_outliers(
      test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f), seed_ + 1, 1e-3, 100.f);
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    expect_within_fp8_bounds(o, x, roundtrip(*codec, x, s), s);
  }
}

TEST_F(CodecRoundTrip, HugeAndTinyMagnitudesStayWithinFp8Rounding) {
  // taco scales large groups into range before its butterflies (a sum of squares above 2^64;
  // 1e30 and 1e36 overflow it) and quantizes groups whose per-element factor would not be a
  // normal float through the scaled values instead (1e-39, subnormal inputs): every path keeps
  // the bound.
  const MessageShape s{16, 512};
  for (float magnitude : {1e-39f, 1e-37f, 1e-30f, 1e30f, 1e36f}) {
    const std::vector<float> x = test::random_normal(
        size_t(s.count()), seed_ + uint64_t(std::log10(magnitude) + 40), 0.f, magnitude);
    for (const CodecOptions& o : option_sets()) {
      if (o.kind == CodecKind::none) continue;
      SCOPED_TRACE(describe(o) + " magnitude " + std::to_string(magnitude));
      const std::vector<float> xhat = roundtrip(*make_codec(o), x, s);
      for (size_t i = 0; i < xhat.size(); ++i) ASSERT_TRUE(std::isfinite(xhat[i])) << i;
      expect_within_fp8_bounds(o, x, xhat, s);
    }
  }
}

TEST_F(CodecRoundTrip, AllZeroDecodesToExactZeros) {
  const MessageShape s{8, 256};
  const std::vector<float> x(size_t(s.count()), 0.f);
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const std::vector<float> xhat = roundtrip(*make_codec(o), x, s);
    for (float v : xhat) ASSERT_EQ(v, 0.f);
  }
}

TEST_F(CodecRoundTrip, ConstantMessageIsNearlyExact) {
  // A constant group's largest value maps to fp8_max exactly (an FP8 value), and after the
  // Hadamard transform all its energy sits in one coefficient that does the same: only fp32
  // rounding remains (1e-5). e8m0 rounds the scale to a power of two, so the value is rounded
  // to FP8 once: half an ulp (2^-4 for E4M3).
  const MessageShape s{32, 256};
  std::mt19937_64 rng(seed_);
  const float c = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
  const std::vector<float> x(size_t(s.count()), c);
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o) + " value " + std::to_string(c));
    const std::vector<float> xhat = roundtrip(*make_codec(o), x, s);
    const double tol = o.scales == Fp8Scales::e8m0 ? half_ulp(o.format) : 1e-5;
    for (float v : xhat) ASSERT_NEAR(v, c, tol * std::fabs(c));
  }
}

TEST_F(CodecRoundTrip, TinyAndRaggedLengthsRoundTripWithoutOverrun) {
  // Lengths 1, G-1, G+1 along each axis: the last group is short (no transform for TACO) and
  // nothing outside the message is read or written (the buffer is exactly sized; a canary
  // after the output stays).
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    const int g = std::max(o.group, 32);
    for (int len : {1, g - 1, g + 1}) {
      for (MessageShape s : {MessageShape{1, len}, MessageShape{len, 3}}) {
        const std::vector<float> x =
            test::random_normal(size_t(s.count()), seed_ + uint64_t(len), 0.f, 1e-3f);
        std::vector<uint8_t> buf = encode(*codec, x, s);
        std::vector<float> out(size_t(s.count()) + 4, 123.f);
        codec->decode(buf.data(), buf.size(), s, out.data(), WireContext{std::nullopt, -1, 0});
        for (size_t i = size_t(s.count()); i < out.size(); ++i) ASSERT_EQ(out[i], 123.f);
        out.resize(size_t(s.count()));
        expect_within_fp8_bounds(o, x, out, s);
      }
    }
  }
}

TEST_F(CodecRoundTrip, EncodeWritesExactlyTheAdvertisedSize) {
  // Sizes: 48-byte header + payload and scales each padded to 16 bytes. For [64, 512] at
  // G = 128 there are 256 groups: dual 8, single 4, e8m0 1 byte of scale per group.
  const MessageShape s{64, 512};
  auto size_of = [&](Fp8Scales sc) {
    return make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 128, sc))
        ->max_encoded_size(s, DType::f32);
  };
  EXPECT_EQ(size_of(Fp8Scales::dual), 48u + 32768u + 2048u);
  EXPECT_EQ(size_of(Fp8Scales::single), 48u + 32768u + 1024u);
  EXPECT_EQ(size_of(Fp8Scales::e8m0), 48u + 32768u + 256u);
  EXPECT_EQ(make_codec(opts(CodecKind::none))->max_encoded_size(s, DType::bf16), 48u + 65536u);
  EXPECT_EQ(make_codec(opts(CodecKind::none))->max_encoded_size(s, DType::f32), 48u + 131072u);
  EXPECT_EQ(make_codec(opts(CodecKind::fp8_tensor))->max_encoded_size(s, DType::bf16),
            48u + 32768u + 16u);

  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    for (MessageShape shape : {MessageShape{3, 77}, MessageShape{130, 64}, MessageShape{1, 1}}) {
      const std::vector<float> x = test::random_normal(size_t(shape.count()), seed_);
      const size_t need = codec->max_encoded_size(shape, DType::f32);
      std::vector<uint8_t> buf(need + 64, 0xA5);
      const EncodeResult r = codec->encode(x.data(), shape, buf.data(), buf.size());
      EXPECT_EQ(r.bytes, need);
      for (size_t i = need; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xA5) << "wrote byte " << i;
      // The same input encodes to the same bytes (padding included): replicas stay identical.
      std::vector<uint8_t> again(need);
      codec->encode(x.data(), shape, again.data(), again.size());
      EXPECT_TRUE(std::equal(again.begin(), again.end(), buf.begin()));
    }
  }
}

TEST_F(CodecRoundTrip, DecodeAccumulateAddsExactlyDecodesValues) {
  const MessageShape s{48, 256};
  std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  x[1000] = std::numeric_limits<float>::quiet_NaN();  // a poisoned group accumulates NaN too
  const std::vector<float> base = test::random_normal(size_t(s.count()), seed_ + 7);
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    const std::vector<uint8_t> buf = encode(*codec, x, s);
    const std::vector<float> decoded = decode_to_float(*codec, buf, s);
    std::vector<float> acc = base;
    codec->decode_accumulate(buf.data(), buf.size(), s, acc.data(),
                             WireContext{std::nullopt, -1, 0});
    for (size_t i = 0; i < acc.size(); ++i) {
      const float want = base[i] + decoded[i];  // one fp32 add
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(acc[i])) << i;
      } else {
        ASSERT_EQ(acc[i], want) << i;
      }
    }
  }
}

TEST_F(CodecRoundTrip, NonFiniteInputPoisonsItsGroupAndIsCounted) {
  const MessageShape s{16, 256};
  std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  const size_t nan_at = 3 * 256 + 17, inf_at = 9 * 256 + 200;
  x[nan_at] = std::numeric_limits<float>::quiet_NaN();
  x[inf_at] = -std::numeric_limits<float>::infinity();
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    EncodeResult er;
    const std::vector<uint8_t> buf = encode(*codec, x, s, &er);
    std::vector<float> xhat(x.size());
    const DecodeResult dr =
        codec->decode(buf.data(), buf.size(), s, xhat.data(), WireContext{std::nullopt, -1, 0});
    EXPECT_EQ(er.nonfinite_values, 2);
    if (o.kind == CodecKind::none) {  // values pass through: NaN stays NaN, Inf stays Inf
      EXPECT_EQ(er.nonfinite_groups, 0);
      EXPECT_TRUE(std::isnan(xhat[nan_at]));
      EXPECT_EQ(xhat[inf_at], x[inf_at]);
      continue;
    }
    const auto groups = groups_of(o, s);
    int64_t poisoned = 0;
    for (const auto& idx : groups) {
      const bool bad = std::find(idx.begin(), idx.end(), int64_t(nan_at)) != idx.end() ||
                       std::find(idx.begin(), idx.end(), int64_t(inf_at)) != idx.end();
      poisoned += bad;
      for (int64_t i : idx) {
        // Every element of a poisoned group is NaN; every other element is finite.
        ASSERT_EQ(std::isnan(xhat[size_t(i)]), bad) << "element " << i;
      }
    }
    EXPECT_EQ(er.nonfinite_groups, poisoned);
    EXPECT_EQ(dr.nonfinite_groups, poisoned);
  }
}

TEST_F(CodecRoundTrip, Bf16InputAndOutputMatchTheFp32Path) {
  // A bf16 message is its values widened to fp32 (exact), so its payload and scales equal the
  // fp32 encoding of the widened values; bf16 output is the fp32 decode rounded once (RNE).
  const MessageShape s{32, 256};
  const std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  std::vector<bf16> xb(x.size());
  std::vector<float> widened(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = float_to_bf16(x[i]);
    widened[i] = bf16_to_float(xb[i]);
  }
  for (const CodecOptions& o : option_sets()) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    std::vector<uint8_t> from_bf16(codec->max_encoded_size(s, DType::bf16));
    codec->encode(xb.data(), s, from_bf16.data(), from_bf16.size());
    const std::vector<uint8_t> from_f32 = encode(*codec, widened, s);
    if (o.kind != CodecKind::none) {
      ASSERT_EQ(from_bf16.size(), from_f32.size());
      EXPECT_TRUE(std::equal(from_bf16.begin() + kWireHeaderBytes, from_bf16.end(),
                             from_f32.begin() + kWireHeaderBytes));
    }
    const std::vector<float> as_f32 = decode_to_float(*codec, from_bf16, s);
    std::vector<bf16> as_bf16(x.size());
    codec->decode(from_bf16.data(), from_bf16.size(), s, as_bf16.data(),
                  WireContext{std::nullopt, -1, 0});
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(as_bf16[i].bits, float_to_bf16(as_f32[i]).bits) << i;
    }
    expect_within_fp8_bounds(o, widened, as_f32, s);
  }
}

TEST_F(CodecRoundTrip, DualAndSingleScalesGiveTheSameError) {
  // In fp32 the two TACO scales fold into one (DESIGN.md §4): the codes are identical and the
  // decoded values differ only by fp32 rounding of q/a, far below the FP8 error.
  const MessageShape s{64, 512};
  const std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  const auto dual = make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual));
  const auto single = make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::single));
  const std::vector<uint8_t> bd = encode(*dual, x, s), bs = encode(*single, x, s);
  EXPECT_TRUE(std::equal(bd.begin() + kWireHeaderBytes, bd.begin() + kWireHeaderBytes + 32768,
                         bs.begin() + kWireHeaderBytes));
  const std::vector<float> xd = decode_to_float(*dual, bd, s), xs = decode_to_float(*single, bs, s);
  const double ed = test::relative_l2(xd.data(), x.data(), x.size());
  const double es = test::relative_l2(xs.data(), x.data(), x.size());
  EXPECT_NEAR(ed, es, 1e-3 * ed);
}

namespace {

// Relative L2 and mean per-channel error of a codec on x [rows, cols].
struct Errors {
  double global, mean_channel;
};
Errors errors_of(const CodecOptions& o, const std::vector<float>& x, MessageShape s,
                 const std::vector<bool>& pick = {}) {
  const std::vector<float> xhat = roundtrip(*make_codec(o), x, s);
  ChannelErrors e;
  e.add(x.data(), xhat.data(), s.rows, s.cols);
  return {pick.empty() ? e.global() : e.pooled(pick), e.mean_channel()};
}

}  // namespace

TEST_F(CodecRoundTrip, TacoBeatsPerTensorScalingOnOutliers) {
  const CodecOptions tensor = opts(CodecKind::fp8_tensor);
  const CodecOptions taco = opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual);
  // Outliers at 1e4 sigma: one per-tensor scale pushes the Gaussian bulk into E4M3's subnormal
  // range, while TACO scales each group and spreads its outlier over the group. Measured over
  // 20 seeds at this size: taco's relative L2 is 3.4x to 7.0x lower; we require 2.5x.
  {
    const MessageShape s{256, 768};
    const std::vector<float> x = with_outliers(
        test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f), seed_ + 1, 1e-3, 1e4f);
    const double e_tensor = errors_of(tensor, x, s).global, e_taco = errors_of(taco, x, s).global;
    EXPECT_GE(e_tensor / e_taco, 2.5) << "fp8_tensor " << e_tensor << ", taco " << e_taco;
  }
  // Outliers at 100 sigma (DESIGN.md §4: 2.73e-2 vs 2.49e-2 on 1M elements): the bulk stays in
  // E4M3's normal range under either scale, so taco gains little, and on one message of this
  // size the gain varies with where the outliers fall: 1.002x to 1.145x over 300 seeds (mean
  // 1.068x, sd 0.026), and one seed in CI lost by 0.3%. So the claim that taco does not lose is
  // checked on the mean error of four independent messages, which halves that spread (about
  // 5 sd from a loss). Its mean per-channel error is worse on each message: every outlier's
  // energy lands on the rest of its group.
  {
    const MessageShape s{1536, 768};
    constexpr int kMessages = 4;
    double sum_tensor = 0, sum_taco = 0;
    for (int m = 0; m < kMessages; ++m) {
      SCOPED_TRACE("message " + std::to_string(m));
      const uint64_t seed = seed_ + 2 + 2 * uint64_t(m);
      const std::vector<float> x = with_outliers(
          test::random_normal(size_t(s.count()), seed, 0.f, 1e-3f), seed + 1, 1e-3, 100.f);
      const Errors e_tensor = errors_of(tensor, x, s), e_taco = errors_of(taco, x, s);
      EXPECT_NEAR(e_taco.global, 2.49e-2, 0.15 * 2.49e-2);
      EXPECT_GT(e_taco.mean_channel, 1.5 * e_tensor.mean_channel);
      sum_tensor += e_tensor.global;
      sum_taco += e_taco.global;
    }
    EXPECT_LE(sum_taco / kMessages, sum_tensor / kMessages);
  }
}

TEST_F(CodecRoundTrip, GroupingAlongTokensSparesSmallChannelsNextToOutlierChannels) {
  // 6 of 768 channels 50x larger (DESIGN.md §4): a Hadamard along hidden mixes each outlier
  // channel into its group and the small channels' error rises about 4.5x (11.7e-2 vs
  // 2.57e-2); along tokens a group never mixes channels and stays at the Gaussian level.
  const MessageShape s{512, 768};
  std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  std::vector<bool> small(768, true);
  for (int k = 0; k < 6; ++k) small[size_t(64 + 128 * k)] = false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!small[i % 768]) x[i] *= 50.f;
  }
  const auto hidden = opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual);
  const auto token = opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual, GroupAxis::token);
  const double e_hidden = errors_of(hidden, x, s, small).global;
  const double e_token = errors_of(token, x, s, small).global;
  EXPECT_NEAR(e_hidden, 11.7e-2, 0.15 * 11.7e-2);
  EXPECT_NEAR(e_token, 2.57e-2, 0.1 * 2.57e-2);
  EXPECT_GT(e_hidden, 3.5 * e_token);
}

// Finite inputs near FLT_MAX can decode to +-Inf (issue 22, item 10): fp8_block with e8m0 scales
// on 3.3e38 (the scale 2^120 times the code 256 is 2^128), taco E5M2 on +-0.9 FLT_MAX (codes
// rounded up by up to an eighth, spread back over the group by the transform), and any codec's
// values above bf16's largest when decoded to bf16. Every group whose decoded values hold a NaN
// or Inf must be counted by the decoder, in the output type (fp32, bf16; for decode-accumulate the
// fp32 values it adds), and the ordinary rows around them count nothing. Exact counts: a decoder
// that misses the overflow reports 0 where the outputs hold Inf.
TEST_F(CodecRoundTrip, DecodersCountEveryGroupThatDecodesToInfFromFiniteInputs) {
  const MessageShape s{12, 256};
  std::vector<float> x = test::random_normal(size_t(s.count()), seed_, 0.f, 1e-3f);
  std::mt19937_64 rng(seed_ + 1);
  std::uniform_real_distribution<float> jitter(0.98f, 1.f);
  // rows 2-5 near 3.3e38, 6-9 near 0.9 FLT_MAX, 10 near FLT_MAX (above bf16's largest)
  const float fmax = std::numeric_limits<float>::max();
  for (int64_t r = 2; r < 11; ++r) {
    const float mag = r < 6 ? 3.3e38f : r < 10 ? 0.9f * fmax : fmax;
    for (int64_t c = 0; c < s.cols; ++c) {
      x[size_t(r * s.cols + c)] = (rng() % 2 ? mag : -mag) * jitter(rng);
    }
  }
  const CodecOptions cases[] = {
      opts(CodecKind::fp8_block, Fp8Format::e4m3, 128, Fp8Scales::e8m0),
      opts(CodecKind::taco, Fp8Format::e5m2, 128, Fp8Scales::dual),
      opts(CodecKind::fp8_block, Fp8Format::e5m2, 64, Fp8Scales::e8m0, GroupAxis::token),
      opts(CodecKind::fp8_block, Fp8Format::e4m3, 32, Fp8Scales::single),
      opts(CodecKind::taco, Fp8Format::e5m2, 64, Fp8Scales::single, GroupAxis::token),
      opts(CodecKind::taco, Fp8Format::e5m2, 256, Fp8Scales::e8m0),
      opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual),
      opts(CodecKind::fp8_tensor, Fp8Format::e4m3),
      opts(CodecKind::fp8_tensor, Fp8Format::e5m2)};
  const WireContext ctx{std::nullopt, -1, 0};
  for (const CodecOptions& o : cases) {
    SCOPED_TRACE(describe(o));
    const auto codec = make_codec(o);
    EncodeResult er;
    const std::vector<uint8_t> buf = encode(*codec, x, s, &er);
    EXPECT_EQ(er.nonfinite_groups, 0) << "every input is finite";
    // The groups holding a non-finite value of `out` (element i as float).
    auto bad_groups = [&](auto value_of) {
      int64_t bad = 0;
      for (const auto& idx : groups_of(o, s)) {
        bool any = false;
        for (int64_t i : idx) any = any || !std::isfinite(value_of(size_t(i)));
        bad += any;
      }
      return bad;
    };
    std::vector<float> out(x.size());
    const int64_t counted =
        codec->decode(buf.data(), buf.size(), s, out.data(), ctx).nonfinite_groups;
    const int64_t want = bad_groups([&](size_t i) { return out[i]; });
    EXPECT_EQ(counted, want) << "fp32 decode";
    std::vector<bf16> out16(x.size());
    const int64_t counted16 =
        codec->decode(buf.data(), buf.size(), s, out16.data(), ctx).nonfinite_groups;
    EXPECT_EQ(counted16, bad_groups([&](size_t i) { return bf16_to_float(out16[i]); }))
        << "bf16 decode";
    std::vector<float> acc(x.size(), 0.f);
    const int64_t counted_acc =
        codec->decode_accumulate(buf.data(), buf.size(), s, acc.data(), ctx).nonfinite_groups;
    EXPECT_EQ(counted_acc, want) << "decode-accumulate";
    // The two cases of the issue do overflow (else this test could not fail): fp8_block e8m0 on
    // every 3.3e38 group, taco E5M2 on at least one of the 0.9 FLT_MAX rows.
    if (o.kind != CodecKind::fp8_tensor && o.format == Fp8Format::e5m2 &&
        o.kind == CodecKind::taco && o.scales == Fp8Scales::dual) {
      EXPECT_GT(want, 0);
    }
    if (o.kind == CodecKind::fp8_block && o.scales == Fp8Scales::e8m0 &&
        o.axis == GroupAxis::hidden) {
      EXPECT_GE(want, 4 * s.cols / o.group);
    }
  }
}
