// The wire format rejects every malformed buffer with one clear line naming the site and rank,
// and never reads outside the buffer (run under TACO_SANITIZE=ON to have that checked too).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "kernels/check.h"
#include "tests/support/test_util.h"
#include "tests/unit/test_codec_common.h"

using namespace taco;

namespace {

const CodecOptions kTaco{CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual, GroupAxis::hidden};
const MessageShape kShape{16, 256};
const WireContext kContext{Site::attn_out_fwd, -1, 3};

std::vector<uint8_t> encoded(const Codec& codec, uint64_t seed, MessageShape s = kShape) {
  const std::vector<float> x = test::random_normal(size_t(s.count()), seed, 0.f, 1e-3f);
  std::vector<uint8_t> buf(codec.max_encoded_size(s, DType::f32));
  codec.encode(x.data(), s, buf.data(), buf.size());
  return buf;
}

// The UserError's message, or "" when decode accepted the buffer.
std::string decode_error(const Codec& codec, const uint8_t* buf, size_t size,
                         MessageShape s = kShape) {
  std::vector<float> out(size_t(s.count()));
  try {
    codec.decode(buf, size, s, out.data(), kContext);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// FNV-1a over the first 44 header bytes, as README.md specifies: lets a test forge a header
// whose checksum is right but whose fields are not.
void reseal(std::vector<uint8_t>& buf) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < 44; ++i) h = (h ^ buf[i]) * 16777619u;
  std::memcpy(buf.data() + 44, &h, 4);
}

void expect_clear_error(const std::string& msg, const std::string& what) {
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("site attn.out.fwd"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
}

class Wire : public test::FreshSeedTest {
 protected:
  void SetUp() override {
    FreshSeedTest::SetUp();
    codec_ = make_codec(kTaco);
    buf_ = encoded(*codec_, seed_);
  }
  std::unique_ptr<Codec> codec_;
  std::vector<uint8_t> buf_;
};

}  // namespace

TEST_F(Wire, HeaderRoundTripsEveryField) {
  WireHeader h;
  ASSERT_EQ(read_wire_header(buf_.data(), buf_.size(), &h), WireStatus::ok);
  EXPECT_EQ(h.version, kWireVersion);
  EXPECT_EQ(h.options, kTaco);
  EXPECT_EQ(h.dtype, DType::f32);
  EXPECT_EQ(h.shape, kShape);
  EXPECT_EQ(h.total_bytes, buf_.size());
  EXPECT_EQ(std::memcmp(buf_.data(), "TACW", 4), 0);
  EXPECT_EQ(decode_error(*codec_, buf_.data(), buf_.size()), "");
}

TEST_F(Wire, TruncatedBufferIsRejected) {
  for (size_t size : {size_t(0), size_t(3), size_t(47)}) {
    expect_clear_error(decode_error(*codec_, buf_.data(), size), "truncated header");
  }
  expect_clear_error(decode_error(*codec_, buf_.data(), buf_.size() - 1), "cut short");
  expect_clear_error(decode_error(*codec_, buf_.data(), 48), "size mismatch");
}

TEST_F(Wire, TrailingBytesAreRejected) {
  buf_.resize(buf_.size() + 16, 0);
  expect_clear_error(decode_error(*codec_, buf_.data(), buf_.size()), "trailing bytes");
}

TEST_F(Wire, WrongMagicIsRejected) {
  buf_[0] = 'X';
  expect_clear_error(decode_error(*codec_, buf_.data(), buf_.size()), "not a taco message");
}

TEST_F(Wire, WrongVersionIsRejected) {
  buf_[4] = 2;
  const std::string msg = decode_error(*codec_, buf_.data(), buf_.size());
  expect_clear_error(msg, "version 2, this build reads version 1");
  EXPECT_NE(msg.find("same taco build"), std::string::npos) << msg;
}

TEST_F(Wire, WrongCodecIsRejected) {
  const auto block =
      make_codec(CodecOptions{CodecKind::fp8_block, Fp8Format::e4m3, 128, Fp8Scales::single});
  const std::vector<uint8_t> other = encoded(*block, seed_);
  expect_clear_error(decode_error(*codec_, other.data(), other.size()),
                     "encoded with fp8_block, this receiver decodes taco");
}

TEST_F(Wire, WrongOptionsAreRejected) {
  CodecOptions g64 = kTaco;
  g64.group = 64;
  const std::vector<uint8_t> other = encoded(*make_codec(g64), seed_);
  expect_clear_error(decode_error(*codec_, other.data(), other.size()),
                     "encoded as 'taco e4m3 g64 dual hidden', this receiver expects "
                     "'taco e4m3 g128 dual hidden'");
}

TEST_F(Wire, WrongShapeIsRejected) {
  expect_clear_error(decode_error(*codec_, buf_.data(), buf_.size(), MessageShape{32, 128}),
                     "message is [16, 256], this receiver expects [32, 128]");
}

TEST_F(Wire, ForgedHeaderWithValidChecksumButBadFieldsIsRejected) {
  struct Forgery {
    size_t offset;
    uint8_t value;
    const char* what;
  };
  for (Forgery f :
       {Forgery{6, 9, "codec = 9"}, Forgery{7, 5, "dtype = 5"}, Forgery{8, 2, "format = 2"},
        Forgery{10, 7, "axis = 7"}, Forgery{12, 100, "not a valid codec configuration"},
        Forgery{24, 1, "is not rows x cols"}, Forgery{32, 0, "total_bytes"}}) {
    std::vector<uint8_t> b = buf_;
    b[f.offset] = f.value;
    reseal(b);
    expect_clear_error(decode_error(*codec_, b.data(), b.size()), f.what);
  }
}

TEST_F(Wire, EverySingleByteFlipInTheHeaderIsCaught) {
  std::mt19937_64 rng(seed_);
  for (size_t pos = 0; pos < kWireHeaderBytes; ++pos) {
    std::vector<uint8_t> b = buf_;
    b[pos] ^= uint8_t(1 + rng() % 255);  // a non-zero change
    const std::string msg = decode_error(*codec_, b.data(), b.size());
    ASSERT_FALSE(msg.empty()) << "flip at byte " << pos << " went unnoticed";
    EXPECT_NE(msg.find("rank 3: site attn.out.fwd: rejected compressed buffer"), std::string::npos)
        << msg;
  }
}

TEST_F(Wire, RandomByteFlipsAnywhereNeverCrash) {
  // Header flips are rejected (checksum); payload and scale flips decode to wrong but bounded
  // work: no crash, no read outside the buffer.
  std::mt19937_64 rng(seed_);
  std::vector<float> out(size_t(kShape.count()));
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> b = buf_;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= uint8_t(1 + rng() % 255);
    const bool header_hit = std::memcmp(b.data(), buf_.data(), kWireHeaderBytes) != 0;
    try {
      codec_->decode(b.data(), b.size(), kShape, out.data(), kContext);
      EXPECT_FALSE(header_hit) << "trial " << trial;
    } catch (const UserError& e) {
      EXPECT_TRUE(header_hit) << e.what();
    }
  }
}

TEST(WireContextRank, DefaultsToTheProcessErrorRank) {
  const auto codec = make_codec(CodecOptions{});
  std::vector<uint8_t> junk(100, 0);
  set_error_rank(5);
  std::vector<float> out(4);
  try {
    codec->decode(junk.data(), junk.size(), MessageShape{1, 4}, out.data(),
                  WireContext{Site::dp_grad, -1, -1});
    FAIL() << "accepted junk";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5: site dp.grad"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
  set_error_rank(-1);
}

TEST(WireContextSite, NamesTheLayerOfAPerLayerSiteAndAQuestionMarkWithoutASite) {
  const auto codec = make_codec(CodecOptions{});
  std::vector<uint8_t> junk(100, 0);
  std::vector<float> out(4);
  auto message = [&](const WireContext& where) {
    try {
      codec->decode(junk.data(), junk.size(), MessageShape{1, 4}, out.data(), where);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted junk");
  };
  EXPECT_NE(message(WireContext{Site::mlp_in_bwd, 7, 2}).find("rank 2: site mlp.in.bwd layer 7: "),
            std::string::npos);
  EXPECT_NE(message(WireContext{std::nullopt, -1, 2}).find("rank 2: site ?: "), std::string::npos);
  EXPECT_EQ(wire_site(WireContext{Site::pp_act, -1, 0}), "pp.act");
}

TEST(WireDevicePath, IsAbsentFromACpuOnlyBuildAndSaysSo) {
  const auto codec = make_codec(CodecOptions{});
  EXPECT_FALSE(codec->has_device_path());
  EXPECT_THROW(
      codec->encode_async(nullptr, DType::f32, MessageShape{1, 1}, nullptr, nullptr, nullptr),
      UserError);
}
