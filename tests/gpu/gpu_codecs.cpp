// The CUDA codecs (kernels/cuda/codec_fp8_*) against the CPU reference (kernels/cpu/codec_fp8.cpp):
// every FP8 codec and option (format, G, scale mode, axis), fp32 and bf16 inputs, shapes whose
// rows and columns G divides and shapes that leave short tail groups, on fresh random data
// (Gaussian, sparse outliers, outlier channels, with NaN and Inf, finite values near FLT_MAX that
// decode to Inf).
//
// Tolerance: none. The device arithmetic is the reference's, operation for operation (explicit
// round-to-nearest intrinsics, the same sum and butterfly orders), so
//   - encoded bytes (header, payload, scales, padding) are identical;
//   - decoded fp32 and bf16 values are identical in their bits, except that NaN payloads may
//     differ (a GPU add on NaN returns the canonical NaN): NaN must meet NaN;
//   - the non-finite group counts are the CPU's, for every output (fp32, bf16, accumulate);
//   - a measured call's error sums (decoded on the device and summed in registers) are the host's
//     sums over its own decode, to 1e-9 relative (the same squares added in another order).
// Header checks: each corruption must give the device status and the error line the host
// decoder gives, and leave the output untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "kernels/check.h"
#include "kernels/roundtrip_error.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/support/test_util.h"

namespace taco {
namespace {

using test::describe;
using test::DeviceArray;

enum class Data { gaussian, outliers, channels, nonfinite, extreme, near_max };
const char* data_name(Data d) {
  switch (d) {
    case Data::gaussian:
      return "gaussian";
    case Data::outliers:
      return "outliers";
    case Data::channels:
      return "channels";
    case Data::nonfinite:
      return "nonfinite";
    case Data::extreme:
      return "extreme";
    case Data::near_max:
      return "near_max";
  }
  return "?";
}

// Gaussian (std 1e-3); 0.1% of elements x100; every 97th channel x50; a few NaN/Inf; or rows of
// std 1e-39 (subnormal), 1e-37, 1e-30, 1e30 and 1e36 in turn (taco's tiny-group and prescaled
// paths; along tokens, groups that mix them); or every third row of random signs times 3.3e38,
// 0.9 FLT_MAX or FLT_MAX (times 0.98 .. 1) in turn, which fp8_block e8m0, taco E5M2 and the
// bf16 outputs decode to Inf in places (issue 22, item 10: the decoders count those groups).
std::vector<float> make_data(Data d, MessageShape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1e-3f);
  const size_t n = size_t(shape.count());
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  switch (d) {
    case Data::gaussian:
      break;
    case Data::outliers:
      for (size_t k = 0; k < n / 1000 + 1; ++k) x[pick(rng)] *= 100.f;
      break;
    case Data::channels:
      for (size_t i = 0; i < n; ++i) {
        if ((i % size_t(shape.cols)) % 97 == 3) x[i] *= 50.f;
      }
      break;
    case Data::nonfinite:
      x[pick(rng)] = std::nanf("");
      x[pick(rng)] = INFINITY;
      x[pick(rng)] = -INFINITY;
      break;
    case Data::extreme: {
      const float stds[] = {1e-39f, 1e-37f, 1e-30f, 1e30f, 1e36f};
      for (size_t i = 0; i < n; ++i) x[i] = x[i] * 1e3f * stds[(i / size_t(shape.cols)) % 5];
      break;
    }
    case Data::near_max: {
      const float mags[] = {3.3e38f, 0.9f * FLT_MAX, FLT_MAX};
      std::uniform_real_distribution<float> jitter(0.98f, 1.f);
      for (size_t i = 0; i < n; ++i) {
        const size_t row = i / size_t(shape.cols);
        if (row % 3 == 1) x[i] = (rng() % 2 ? 1.f : -1.f) * mags[(row / 3) % 3] * jitter(rng);
      }
      break;
    }
  }
  return x;
}

std::vector<CodecOptions> all_fp8_options() {
  std::vector<CodecOptions> out;
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    out.push_back(CodecOptions{CodecKind::fp8_tensor, f, 0, Fp8Scales::single, GroupAxis::hidden});
    for (int g : kGroupSizes) {
      for (GroupAxis axis : {GroupAxis::hidden, GroupAxis::token}) {
        for (Fp8Scales s : {Fp8Scales::single, Fp8Scales::e8m0}) {
          out.push_back(CodecOptions{CodecKind::fp8_block, f, g, s, axis});
        }
        for (Fp8Scales s : {Fp8Scales::dual, Fp8Scales::single, Fp8Scales::e8m0}) {
          out.push_back(CodecOptions{CodecKind::taco, f, g, s, axis});
        }
      }
    }
  }
  return out;
}

// Bits equal, or both NaN.
size_t count_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::isnan(a[i]) ? std::isnan(b[i]) : std::memcmp(&a[i], &b[i], 4) == 0;
    bad += !same;
  }
  return bad;
}

size_t count_mismatches(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return count_mismatches(test::to_float(a), test::to_float(b));
}

size_t count_byte_mismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t bad = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) bad += a[i] != b[i];
  return bad;
}

template <class T>
std::vector<T> as(const std::vector<float>& x);
template <>
std::vector<float> as(const std::vector<float>& x) {
  return x;
}
template <>
std::vector<bf16> as(const std::vector<float>& x) {
  return test::to_bf16(x);
}

// One of the self-check's sums (k = 0: error^2, 1: signal^2) against the host's: the same squares
// in double, added in another order, so equal to 1e-9 relative (a wrong element, row or scale moves
// the error by far more), and NaN or Inf where the host's is.
void expect_same_sum(double got, double want, DType decoded, int k) {
  SCOPED_TRACE(describe(k == 0 ? "error^2" : "signal^2", ", decoded ", dtype_name(decoded)));
  if (std::isfinite(want)) {
    EXPECT_NEAR(got, want, 1e-9 * want);
  } else {
    EXPECT_EQ(std::isnan(got), std::isnan(want)) << got << " against " << want;
    if (!std::isnan(want)) {
      EXPECT_EQ(got, want);
    }
  }
}

// One codec, one shape, one data set, one input type: every property of the file's header.
template <class T>
void check_case(const Codec& codec, MessageShape shape, Data data, uint64_t seed) {
  SCOPED_TRACE(describe(codec.name(), " [", shape.rows, ", ", shape.cols, "] ", data_name(data),
                        sizeof(T) == 2 ? " bf16" : " fp32", " seed ", seed));
  const DType dtype = sizeof(T) == 2 ? DType::bf16 : DType::f32;
  const std::vector<T> x = as<T>(make_data(data, shape, seed));
  const size_t n = x.size(), size = codec.max_encoded_size(shape, dtype);
  const WireContext ctx{std::nullopt, -1, 0};

  std::vector<uint8_t> cpu_wire(size);
  const EncodeResult cpu_enc = codec.encode(x.data(), shape, cpu_wire.data(), size);

  DeviceArray<T> dx(x);
  DeviceArray<uint8_t> gpu_wire(size);
  DeviceArray<int64_t> counter(std::vector<int64_t>{0});
  codec.encode_async(dx.get(), dtype, shape, gpu_wire.get(), nullptr, counter.get());
  EXPECT_EQ(count_byte_mismatches(gpu_wire.download(), cpu_wire), 0u) << "encoded bytes";
  EXPECT_EQ(counter.download()[0], cpu_enc.nonfinite_groups);
  if (data == Data::nonfinite) {
    EXPECT_GT(cpu_enc.nonfinite_groups, 0);
  }

  // Decode the CPU's bytes on the GPU (fp32, bf16, accumulate); the GPU's bytes on the CPU.
  DeviceArray<uint8_t> wire(cpu_wire);
  DeviceArray<uint32_t> status(std::vector<uint32_t>{0});
  std::vector<float> ref(n);
  const DecodeResult cpu_dec = codec.decode(cpu_wire.data(), size, shape, ref.data(), ctx);
  if (data != Data::near_max) {  // there, groups decode to Inf that were finite on the way in
    EXPECT_EQ(cpu_dec.nonfinite_groups, cpu_enc.nonfinite_groups);
  }
  {
    DeviceArray<float> out(n);
    counter.upload({0});
    codec.decode_async(wire.get(), size, shape, out.get(), DType::f32, false, nullptr, status.get(),
                       counter.get());
    EXPECT_EQ(count_mismatches(out.download(), ref), 0u) << "fp32 decode";
    EXPECT_EQ(counter.download()[0], cpu_dec.nonfinite_groups);
  }
  std::vector<bf16> ref_bf16(n);
  {
    const int64_t cpu_count =
        codec.decode(cpu_wire.data(), size, shape, ref_bf16.data(), ctx).nonfinite_groups;
    DeviceArray<bf16> out(n);
    counter.upload({0});
    codec.decode_async(wire.get(), size, shape, out.get(), DType::bf16, false, nullptr,
                       status.get(), counter.get());
    EXPECT_EQ(count_mismatches(out.download(), ref_bf16), 0u) << "bf16 decode";
    EXPECT_EQ(counter.download()[0], cpu_count) << "bf16 decode";
  }
  {
    const std::vector<float> before = make_data(Data::gaussian, shape, seed + 1);
    std::vector<float> ref_acc = before;
    const int64_t cpu_count =
        codec.decode_accumulate(cpu_wire.data(), size, shape, ref_acc.data(), ctx).nonfinite_groups;
    DeviceArray<float> acc(before);
    counter.upload({0});
    codec.decode_async(wire.get(), size, shape, acc.get(), DType::f32, true, nullptr, status.get(),
                       counter.get());
    EXPECT_EQ(count_mismatches(acc.download(), ref_acc), 0u) << "decode-accumulate";
    EXPECT_EQ(counter.download()[0], cpu_count) << "decode-accumulate";
  }
  {
    std::vector<float> from_gpu(n);
    const std::vector<uint8_t> gpu_bytes = gpu_wire.download();
    codec.decode(gpu_bytes.data(), size, shape, from_gpu.data(), ctx);
    EXPECT_EQ(count_mismatches(from_gpu, ref), 0u) << "CPU decode of GPU bytes";
  }
  // A measured call's self-check (decode and error sums in one kernel; staged along tokens where
  // the columns allow) against the host's sums over its own decode, for both decoded dtypes.
  for (const DType decoded : {DType::f32, DType::bf16}) {
    double want[3] = {0, 0, 0};
    const void* host_decoded =
        decoded == DType::f32 ? static_cast<const void*>(ref.data()) : ref_bf16.data();
    cpu::roundtrip_error_sums(x.data(), dtype, host_decoded, decoded, n, want);
    DeviceArray<double> sums(std::vector<double>(3, 0.0));
    if (!codec.decode_error_sums_async(wire.get(), size, shape, dx.get(), dtype, decoded,
                                       sums.get(), nullptr, status.get())) {
      EXPECT_EQ(codec.options().group, 0) << "only fp8_tensor decodes and sums apart";
      continue;
    }
    const std::vector<double> got = sums.download();
    for (int k = 0; k < 2; ++k) expect_same_sum(got[size_t(k)], want[k], decoded, k);
    EXPECT_EQ(got[2], want[2]) << "non-finite inputs, decoded " << dtype_name(decoded);
  }
  EXPECT_EQ(status.download()[0], 0u) << "a valid header was rejected";
}

const MessageShape kShapes[] = {
    {1024, 512},  // every G divides both ways: the vector paths
    {37, 200},    // tails along both axes, columns not a multiple of 8: scalar paths
    {1, 1000},    // one row: along tokens, every group is a tail
    {600, 72},    // tails of rows along tokens, vectorized columns
    {37, 512},    // whole groups along hidden, and tile counts that leave a warp's last lanes
                  // without a tile (G = 128: 148 tiles, 8 per warp)
    // Along tokens, columns a multiple of 64 take the staged kernels (encode, decode, decode-
    // accumulate, decode-sum-encode; kernels/cuda/codec_fp8_token_stage.cuh), other columns the
    // general ones (and the fp32 encode at G = 512).
    {261, 192},  // 2 * 128 + 5 rows: staged, with a tail group (and, for G < 128, row blocks of
                 // the last stage past the end)
    {261, 200},  // the same rows, 3 * 64 + 8 columns: the general kernels
    {1, 64},     // staged, one row: every group a tail of one
};

TEST(CudaCodecs, EncodeDecodeAndAccumulateMatchTheCpuReferenceBitForBit) {
  TACO_SKIP_WITHOUT_GPU();
  uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("first seed " + std::to_string(seed));
  for (const CodecOptions& o : all_fp8_options()) {
    const auto codec = make_codec(canonical(o));
    ASSERT_TRUE(codec->has_device_path());
    for (MessageShape shape : kShapes) {
      for (Data d : {Data::gaussian, Data::outliers, Data::channels, Data::nonfinite, Data::extreme,
                     Data::near_max}) {
        check_case<float>(*codec, shape, d, ++seed);
        check_case<bf16>(*codec, shape, d, ++seed);
        if (HasFailure()) return;  // one failing case tells the story; thousands would not
      }
    }
  }
}

// The staged along-tokens kernels on a message of more stages than a wave of blocks (8229 rows x
// 1024 columns: G = 128 gives 65 x 16 stages, several per block, so that each block's ring of
// stages wraps around), ending with a tail group, for G = 32, 64, 128 and 512 (their stage
// shapes: 4 row blocks a stage, 2, 1 with 3 ring stages, 1 with 2; bf16 at G <= 128 takes the
// paired lanes, 4 passes of a stage at G = 32, 2 at 64, 1 at 128).
TEST(CudaCodecs, StagedTokenKernelsOnALargeMessageMatchTheCpuReference) {
  TACO_SKIP_WITHOUT_GPU();
  uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("first seed " + std::to_string(seed));
  const MessageShape shape{8229, 1024};
  for (int g : {32, 64, 128, 512}) {
    for (const CodecOptions& o :
         {CodecOptions{CodecKind::taco, Fp8Format::e4m3, g, Fp8Scales::dual, GroupAxis::token},
          CodecOptions{CodecKind::fp8_block, Fp8Format::e4m3, g, Fp8Scales::single,
                       GroupAxis::token}}) {
      const auto codec = make_codec(canonical(o));
      for (Data d : {Data::gaussian, Data::nonfinite}) {
        check_case<bf16>(*codec, shape, d, ++seed);
        if (HasFailure()) return;
      }
    }
  }
}

// The two-shot all-reduce's middle step: p messages decoded, summed in fp32 in order and
// re-encoded in one kernel give the bytes of the host's Codec::decode_sum_encode (taco: summed in
// its transform's coefficients, kernels/codec_fp8.h),
// and the groups decoded as NaN or Inf are counted as the host counts them (p = 2: a message of
// values near FLT_MAX); a bad header in any message is reported.
TEST(CudaCodecs, DecodeSumEncodeMatchesTheHost) {
  TACO_SKIP_WITHOUT_GPU();
  const WireContext ctx{std::nullopt, -1, 0};
  uint64_t seed = 1000;
  for (const CodecOptions& o : all_fp8_options()) {
    const auto codec = make_codec(canonical(o));
    for (MessageShape shape : kShapes) {
      for (int p : {1, 2, 3, 4}) {  // 2 and 4 also take the whole-group kernel along hidden
        SCOPED_TRACE(describe(codec->name(), " [", shape.rows, ", ", shape.cols, "] p=", p));
        const size_t n = size_t(shape.count());
        const size_t size = codec->max_encoded_size(shape, DType::bf16);
        const size_t slot = (size + 15) / 16 * 16;
        std::vector<uint8_t> slots(size_t(p) * slot, 0);
        std::vector<float> sum(n, 0.f);
        int64_t nan_groups = 0;
        for (int i = 0; i < p; ++i) {
          const Data d = i == 2   ? Data::nonfinite
                         : i == 1 ? (p == 2 ? Data::near_max : Data::outliers)
                                  : Data::gaussian;
          const std::vector<bf16> x = test::to_bf16(make_data(d, shape, ++seed));
          codec->encode(x.data(), shape, slots.data() + size_t(i) * slot, size);
        }
        const size_t out_size = codec->max_encoded_size(shape, DType::f32);
        std::vector<uint8_t> ref(out_size);
        nan_groups = codec
                         ->decode_sum_encode(slots.data(), slot, p, size, shape, sum.data(),
                                             ref.data(), out_size, ctx)
                         .nonfinite_groups;

        DeviceArray<uint8_t> in(slots), out(out_size);
        DeviceArray<float> scratch(std::max<size_t>(n, 1));
        DeviceArray<uint32_t> status(std::vector<uint32_t>{0});
        DeviceArray<int64_t> counter(std::vector<int64_t>{0});
        codec->decode_sum_encode_async(in.get(), slot, p, size, shape, out.get(), scratch.get(),
                                       nullptr, status.get(), counter.get());
        EXPECT_EQ(status.download()[0], 0u);
        EXPECT_EQ(count_byte_mismatches(out.download(), ref), 0u) << "re-encoded bytes";
        EXPECT_EQ(counter.download()[0], nan_groups);
        if (p == 3) {
          std::vector<uint8_t> bad = slots;
          bad[slot + 1] ^= 0x40;  // message 1's magic
          DeviceArray<uint8_t> bad_in(bad);
          codec->decode_sum_encode_async(bad_in.get(), slot, p, size, shape, out.get(),
                                         scratch.get(), nullptr, status.get(), nullptr);
          EXPECT_EQ(status.download()[0], uint32_t(WireStatus::bad_magic));
        }
        if (HasFailure()) return;
      }
    }
  }
}

// The staged decode-sum-encode along tokens, and the whole-group one along hidden, on a message
// of more tiles than a wave of blocks (as above; along hidden every warp runs several tiles, each
// read one tile ahead), p = 2 and 4 messages, against the host's decode_sum_encode.
// Along hidden: taco's and fp8_block's defaults (fixed at compile time in the kernel) and taco
// with e8m0 scales (the message's options), at G = 32, 128 and 512.
TEST(CudaCodecs, LargeMessageDecodeSumEncodeMatchesTheHost) {
  TACO_SKIP_WITHOUT_GPU();
  const WireContext ctx{std::nullopt, -1, 0};
  uint64_t seed = 2000;
  const MessageShape shape{8229, 1024};
  const size_t n = size_t(shape.count());
  std::vector<CodecOptions> cases;
  for (int g : {32, 128}) {
    cases.push_back({CodecKind::taco, Fp8Format::e4m3, g, Fp8Scales::dual, GroupAxis::token});
  }
  for (int g : {32, 128, 512}) {
    cases.push_back({CodecKind::taco, Fp8Format::e4m3, g, Fp8Scales::dual, GroupAxis::hidden});
    cases.push_back(
        {CodecKind::fp8_block, Fp8Format::e4m3, g, Fp8Scales::single, GroupAxis::hidden});
  }
  cases.push_back({CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::e8m0, GroupAxis::hidden});
  for (const CodecOptions& o : cases) {
    const auto codec = make_codec(canonical(o));
    for (int p : {2, 4}) {
      SCOPED_TRACE(describe(codec->name(), " p=", p));
      const size_t size = codec->max_encoded_size(shape, DType::bf16);
      const size_t slot = (size + 15) / 16 * 16;
      std::vector<uint8_t> slots(size_t(p) * slot, 0);
      std::vector<float> sum(n, 0.f);
      int64_t nan_groups = 0;
      for (int i = 0; i < p; ++i) {
        const Data d = i == 1 ? Data::nonfinite : i == 2 ? Data::outliers : Data::gaussian;
        const std::vector<bf16> x = test::to_bf16(make_data(d, shape, ++seed));
        codec->encode(x.data(), shape, slots.data() + size_t(i) * slot, size);
      }
      const size_t out_size = codec->max_encoded_size(shape, DType::f32);
      std::vector<uint8_t> ref(out_size);
      nan_groups = codec
                       ->decode_sum_encode(slots.data(), slot, p, size, shape, sum.data(),
                                           ref.data(), out_size, ctx)
                       .nonfinite_groups;

      DeviceArray<uint8_t> in(slots), out(out_size);
      DeviceArray<float> scratch(n);
      DeviceArray<uint32_t> status(std::vector<uint32_t>{0});
      DeviceArray<int64_t> counter(std::vector<int64_t>{0});
      codec->decode_sum_encode_async(in.get(), slot, p, size, shape, out.get(), scratch.get(),
                                     nullptr, status.get(), counter.get());
      EXPECT_EQ(status.download()[0], 0u);
      EXPECT_EQ(count_byte_mismatches(out.download(), ref), 0u) << "re-encoded bytes";
      EXPECT_EQ(counter.download()[0], nan_groups);
      if (HasFailure()) return;
    }
  }
}

TEST(CudaCodecs, EmptyMessageWritesTheCpuHeader) {
  TACO_SKIP_WITHOUT_GPU();
  for (const CodecOptions& o : all_fp8_options()) {
    const auto codec = make_codec(canonical(o));
    for (MessageShape shape : {MessageShape{0, 512}, MessageShape{4, 0}}) {
      const size_t size = codec->max_encoded_size(shape, DType::f32);
      std::vector<uint8_t> cpu(size);
      codec->encode(static_cast<const float*>(nullptr), shape, cpu.data(), size);
      DeviceArray<uint8_t> gpu(size);
      codec->encode_async(nullptr, DType::f32, shape, gpu.get(), nullptr, nullptr);
      EXPECT_EQ(count_byte_mismatches(gpu.download(), cpu), 0u) << codec->name();
    }
  }
}

// The error line the host decoder throws for these bytes ("" when it accepts them).
std::string host_error(const Codec& codec, const std::vector<uint8_t>& bytes, size_t size,
                       MessageShape shape) {
  std::vector<float> out(size_t(shape.count()));
  try {
    codec.decode(bytes.data(), size, shape, out.data(), WireContext{std::nullopt, -1, 0});
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// The device's verdict on the same bytes, as the error line throw_device_wire_error builds.
std::string device_error(const Codec& codec, const std::vector<uint8_t>& bytes, size_t size,
                         MessageShape shape) {
  DeviceArray<uint8_t> in(bytes.empty() ? std::vector<uint8_t>(1) : bytes);
  DeviceArray<float> out(size_t(shape.count()));
  DeviceArray<uint32_t> status(std::vector<uint32_t>{0});
  codec.decode_async(in.get(), size, shape, out.get(), DType::f32, false, nullptr, status.get());
  const uint32_t s = status.download()[0];
  // A rejected buffer leaves the output as it was (poisoned: all 0xff bytes).
  if (s != 0) {
    for (float v : out.download()) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      EXPECT_EQ(bits, 0xffffffffu) << "a rejected buffer wrote output";
      if (bits != 0xffffffffu) break;
    }
  }
  if (s == 0) return "";
  const std::vector<uint8_t> header(bytes.begin(),
                                    bytes.begin() + std::min<size_t>(size, kWireHeaderBytes));
  try {
    codec.throw_device_wire_error(s, header.data(), size, shape, WireContext{std::nullopt, -1, 0});
  } catch (const UserError& e) {
    return e.what();
  }
  return "throw_device_wire_error did not throw";
}

TEST(CudaCodecs, HeaderChecksRejectWhatTheHostRejectsWithTheSameError) {
  TACO_SKIP_WITHOUT_GPU();
  const MessageShape shape{64, 256};
  const auto codec = make_codec(
      CodecOptions{CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual, GroupAxis::hidden});
  const std::vector<float> x = make_data(Data::gaussian, shape, 99);
  const size_t size = codec->max_encoded_size(shape, DType::f32);
  std::vector<uint8_t> good(size);
  codec->encode(x.data(), shape, good.data(), size);

  auto expect_same = [&](const std::string& what, const std::vector<uint8_t>& bytes, size_t n,
                         MessageShape expect_shape, const Codec& receiver) {
    SCOPED_TRACE(what);
    const std::string host = host_error(receiver, bytes, n, expect_shape);
    EXPECT_FALSE(host.empty()) << "the host accepted it";
    EXPECT_EQ(device_error(receiver, bytes, n, expect_shape), host);
  };
  EXPECT_EQ(device_error(*codec, good, size, shape), "");
  // Every header byte flipped: magic, version, checksum, fields, reserved bytes.
  for (size_t i = 0; i < kWireHeaderBytes; ++i) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x5a;
    expect_same(describe("byte ", i, " flipped"), bad, size, shape, *codec);
  }
  // A forged header with a valid checksum whose rows disagree with its total bytes.
  {
    std::vector<uint8_t> bad = good;
    WireHeader h;
    ASSERT_EQ(read_wire_header(good.data(), size, &h), WireStatus::ok);
    h.shape.rows ^= 1;
    write_wire_header(h, bad.data());
    expect_same("total bytes inconsistent with rows", bad, size, shape, *codec);
  }
  expect_same("truncated to 3", good, 3, shape, *codec);
  expect_same("truncated to 40", good, 40, shape, *codec);
  expect_same("one byte short", good, size - 1, shape, *codec);
  expect_same("wrong shape", good, size, MessageShape{128, 128}, *codec);
  const auto other_options = make_codec(
      CodecOptions{CodecKind::taco, Fp8Format::e4m3, 64, Fp8Scales::dual, GroupAxis::hidden});
  expect_same("wrong options", good, size, shape, *other_options);
  const auto other_codec = make_codec(CodecOptions{CodecKind::fp8_block, Fp8Format::e4m3, 128,
                                                   Fp8Scales::single, GroupAxis::hidden});
  expect_same("wrong codec", good, size, shape, *other_codec);
}

}  // namespace
}  // namespace taco
