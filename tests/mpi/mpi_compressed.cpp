// Compressed collectives under mpirun (tp = 2 at np 2; tp = 4 and pairs of tp = 2 at np 4): for
// every codec, the result is the two-shot algorithm of parallel/compressed_collectives.h bit for
// bit, lies within the bound that the single-codec round trip allows (tests/unit/
// test_codec_roundtrip.cpp) of the exact sum, and is bit-identical on every rank; uneven rows;
// the native path for sites the policy leaves uncompressed; a corrupted wire buffer.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/policy.h"
#include "engine/config/config.h"
#include "kernels/check.h"
#include "parallel/compressed_collectives.h"
#include "parallel/compressed_site_comm.h"
#include "parallel/mpi_communicator.h"
#include "tests/mpi/mpi_test_fixture.h"

namespace taco {
namespace {

CodecOptions opts(CodecKind kind, Fp8Format format, int group = 0,
                  Fp8Scales scales = Fp8Scales::single, GroupAxis axis = GroupAxis::hidden) {
  return canonical(CodecOptions{kind, format, group, scales, axis});
}

// Every codec, both formats, every scale mode, both axes.
std::vector<CodecOptions> option_sets() {
  using K = CodecKind;
  using F = Fp8Format;
  using S = Fp8Scales;
  return {opts(K::fp8_tensor, F::e4m3),
          opts(K::fp8_tensor, F::e5m2),
          opts(K::fp8_block, F::e4m3, 64, S::single),
          opts(K::fp8_block, F::e5m2, 32, S::e8m0, GroupAxis::token),
          opts(K::taco, F::e4m3, 128, S::dual),
          opts(K::taco, F::e4m3, 64, S::single),
          opts(K::taco, F::e4m3, 32, S::e8m0),
          opts(K::taco, F::e4m3, 32, S::dual, GroupAxis::token),
          opts(K::taco, F::e5m2, 128, S::dual),
          opts(K::taco, F::e5m2, 64, S::e8m0)};
}

// The relative bound of one encode/decode, from test_codec_roundtrip.cpp's per-group bound
//   ||x^_g - x_g|| <= (half_ulp + 1e-5) ||x_g|| + sqrt(n_g) half_subnormal k M_g / fp8_max,
// where M_g, the largest value the group quantizes, is at most ||x_g|| (a Hadamard output is, and
// so is any single element), and k = 2 for e8m0 scales. So ||x^_g - x_g|| <= rho ||x_g|| with
//   rho = half_ulp + 1e-5 + sqrt(n_g) half_subnormal k / fp8_max,
// and, summing the squares over disjoint groups, ||x^ - x|| <= rho ||x||. n_g is G for grouped
// codecs and the whole message (`count`) for fp8_tensor.
double rho(const CodecOptions& o, int64_t count) {
  const bool e4m3 = o.format == Fp8Format::e4m3;
  const double half_ulp = e4m3 ? 0x1p-4 : 0x1p-3, half_sub = e4m3 ? 0x1p-10 : 0x1p-17;
  const double n = o.kind == CodecKind::fp8_tensor ? double(count) : double(o.group);
  const double k = o.scales == Fp8Scales::e8m0 ? 2.0 : 1.0;
  return half_ulp + 1e-5 + std::sqrt(n) * half_sub * k / fp8_max(o.format);
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// Rank r's input: Gaussian with a rank-dependent scale, 0.1% of it x100.
std::vector<float> input_of(uint64_t seed, int r, size_t n) {
  std::vector<float> x =
      test::random_normal(n, seed + 7919 * uint64_t(r + 1), 0.f, 1e-3f * float(1 + r));
  for (size_t i = (seed + r) % 997; i < n; i += 997) x[i] *= 100.f;
  return x;
}

// Chunk c of `parts` as the header documents it: the first rows % parts chunks one row longer;
// a flat [1, n] message splits its elements.
struct Chunk {
  MessageShape shape;
  int64_t offset;
};
Chunk chunk_of(MessageShape s, int parts, int c) {
  const int64_t n = s.rows == 1 ? s.cols : s.rows;
  const int64_t len = n / parts + (c < n % parts ? 1 : 0);
  const int64_t begin = c * (n / parts) + std::min<int64_t>(c, n % parts);
  if (s.rows == 1) return {{1, len}, begin};
  return {{len, s.cols}, begin * s.cols};
}

std::vector<uint8_t> encode(const Codec& codec, const float* x, MessageShape s) {
  std::vector<uint8_t> buf(codec.max_encoded_size(s, DType::f32));
  codec.encode(x, s, buf.data(), buf.size());
  return buf;
}

// FNV-1a of the result's bytes, gathered from every rank of `comm`: all must agree.
void expect_identical_on_every_rank(Communicator& comm, const std::vector<float>& out) {
  uint32_t h = 2166136261u;
  const auto* p = reinterpret_cast<const uint8_t*>(out.data());
  for (size_t i = 0; i < out.size() * sizeof(float); ++i) h = (h ^ p[i]) * 16777619u;
  std::vector<float> all(size_t(comm.size()));
  float mine;
  std::memcpy(&mine, &h, sizeof h);
  comm.all_gather(&mine, all.data(), 1, DType::f32, nullptr);
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_EQ(std::memcmp(&all[size_t(r)], &mine, sizeof mine), 0) << "rank " << r << " differs";
}

class CompressedCollectivesTest : public test::MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
    if (world_size_ == 4) pair_ = world_->split(world_rank_ / 2, world_rank_, "pair");
  }
  // The groups under test: the world (tp = world size), and pairs of it (tp = 2) at np 4.
  std::vector<Communicator*> groups() const {
    std::vector<Communicator*> g = {world_.get()};
    if (pair_) g.push_back(pair_.get());
    return g;
  }
  std::unique_ptr<MpiCommunicator> world_, pair_;
};

// out_c = D(decode_sum_encode(E(x_{0,c}), ..., E(x_{p-1,c}))) on every rank, bit for bit (taco
// sums in its coefficients, kernels/codec_fp8.h); within the bound of the exact sum:
//   ||out_c - S_c|| <= rho A_c + rho (||S_c|| + rho A_c) + 1e-6 A_c,   A_c = sum_r ||x_{r,c}||,
// the first shot's p roundings (triangle inequality), the second shot's one rounding of a sum
// that is itself off by at most rho A_c, and the fp32 additions. A rank's chunk that went
// missing or landed in the wrong place costs ~||x_{r,c}||, several times the bound.
TEST_F(CompressedCollectivesTest, AllReduceIsTwoShotWithinCodecBoundAndIdenticalOnEveryRank) {
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Communicator* comm : groups()) {
    const int p = comm->size();
    // Even rows; uneven rows with hidden not a multiple of G; an empty chunk; flat.
    for (MessageShape shape : {MessageShape{64, 256}, MessageShape{37, 96}, MessageShape{p - 1, 64},
                               MessageShape{1, 1000}}) {
      const size_t n = size_t(shape.count());
      std::vector<std::vector<float>> x(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) x[size_t(r)] = input_of(seed + n, r, n);
      for (const CodecOptions& o : option_sets()) {
        SCOPED_TRACE(describe(o) + " p=" + std::to_string(p) + " [" + std::to_string(shape.rows) +
                     ", " + std::to_string(shape.cols) + "]");
        const auto codec = make_codec(o);
        std::vector<float> out = x[size_t(comm->rank())];
        CompressedCollectives cc(*comm);
        cc.all_reduce(*codec, out.data(), DType::f32, shape, WireContext{}, false);

        for (int c = 0; c < p; ++c) {
          const Chunk ch = chunk_of(shape, p, c);
          const size_t m = size_t(ch.shape.count());
          std::vector<float> acc(m), twice(m);
          std::vector<double> exact(m, 0.0), err(m);
          double a = 0;
          std::vector<uint8_t> slots;
          size_t size = 0;
          for (int r = 0; r < p; ++r) {
            const float* xr = x[size_t(r)].data() + ch.offset;
            const auto one = encode(*codec, xr, ch.shape);
            size = one.size();
            slots.insert(slots.end(), one.begin(), one.end());
            std::vector<double> part(xr, xr + m);
            a += norm(part);
            for (size_t i = 0; i < m; ++i) exact[i] += xr[i];
          }
          std::vector<uint8_t> buf(codec->max_encoded_size(ch.shape, DType::f32));
          codec->decode_sum_encode(slots.data(), size, p, size, ch.shape, acc.data(), buf.data(),
                                   buf.size(), WireContext{});
          codec->decode(buf.data(), buf.size(), ch.shape, twice.data(), WireContext{});
          int mismatches = 0;
          for (size_t i = 0; i < m; ++i) {
            mismatches += std::memcmp(&twice[i], &out[size_t(ch.offset) + i], 4) != 0;
            err[i] = double(out[size_t(ch.offset) + i]) - exact[i];
          }
          EXPECT_EQ(mismatches, 0) << "chunk " << c << " differs from the two-shot algorithm";
          const double r1 = rho(o, ch.shape.count());
          const double bound = r1 * a + r1 * (norm(exact) + r1 * a) + 1e-6 * a;
          EXPECT_LE(norm(err), bound) << "chunk " << c;
        }
        expect_identical_on_every_rank(*comm, out);
      }
    }
  }
}

// out = sum_r D(E(x_{r,me})) in fp32: within rho A + 1e-6 A of the exact sum of this rank's rows.
TEST_F(CompressedCollectivesTest, ReduceScatterIsWithinCodecBoundOfTheExactSum) {
  const uint64_t seed = shared_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (Communicator* comm : groups()) {
    const int p = comm->size(), me = comm->rank();
    for (MessageShape shape : {MessageShape{64, 256}, MessageShape{8 * p, 96}}) {
      const size_t n = size_t(shape.count());
      std::vector<std::vector<float>> x(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) x[size_t(r)] = input_of(seed + n, r, n);
      const Chunk ch = chunk_of(shape, p, me);
      const size_t m = size_t(ch.shape.count());
      for (const CodecOptions& o : option_sets()) {
        SCOPED_TRACE(describe(o) + " p=" + std::to_string(p));
        const auto codec = make_codec(o);
        std::vector<float> out(m, -7.f);
        CompressedCollectives cc(*comm);
        cc.reduce_scatter(*codec, x[size_t(me)].data(), out.data(), DType::f32, shape,
                          WireContext{}, false);
        std::vector<float> acc(m, 0.f);
        std::vector<double> err(m, 0.0);
        double a = 0;
        for (int r = 0; r < p; ++r) {
          const float* xr = x[size_t(r)].data() + ch.offset;
          const auto buf = encode(*codec, xr, ch.shape);
          codec->decode_accumulate(buf.data(), buf.size(), ch.shape, acc.data(), WireContext{});
          a += norm(std::vector<double>(xr, xr + m));
          for (size_t i = 0; i < m; ++i) err[i] -= xr[i];
        }
        for (size_t i = 0; i < m; ++i) err[i] += out[i];
        EXPECT_EQ(std::memcmp(acc.data(), out.data(), m * 4), 0) << "not sum_r D(E(x_r))";
        EXPECT_LE(norm(err), rho(o, ch.shape.count()) * a + 1e-6 * a);
      }
    }
  }
}

// Every rank decodes every shard from the same bytes: out = [D(E(x_0)), ..., D(E(x_p-1))].
TEST_F(CompressedCollectivesTest, AllGatherDecodesEveryShardIdenticallyOnEveryRank) {
  const uint64_t seed = shared_seed();
  for (Communicator* comm : groups()) {
    const int p = comm->size(), me = comm->rank();
    const MessageShape shape{16 * p, 128};
    const Chunk mine = chunk_of(shape, p, me);
    const size_t m = size_t(mine.shape.count());
    for (const CodecOptions& o : option_sets()) {
      SCOPED_TRACE(describe(o) + " p=" + std::to_string(p));
      const auto codec = make_codec(o);
      std::vector<float> out(size_t(shape.count()), -7.f);
      CompressedCollectives cc(*comm);
      cc.all_gather(*codec, input_of(seed, me, m).data(), out.data(), DType::f32, shape,
                    WireContext{}, false);
      for (int r = 0; r < p; ++r) {
        const std::vector<float> xr = input_of(seed, r, m);
        std::vector<float> back(m);
        const auto buf = encode(*codec, xr.data(), mine.shape);
        codec->decode(buf.data(), buf.size(), mine.shape, back.data(), WireContext{});
        EXPECT_EQ(std::memcmp(back.data(), out.data() + size_t(r) * m, m * 4), 0) << "shard " << r;
        EXPECT_LE(test::relative_l2(back.data(), xr.data(), m), rho(o, int64_t(m)));
      }
      expect_identical_on_every_rank(*comm, out);
    }
  }
}

// bf16 messages: encoded from bf16, summed in fp32, decoded to bf16; the same two-shot bound
// plus one bf16 rounding of the result (half an ulp, 2^-8 relative per element).
TEST_F(CompressedCollectivesTest, Bf16AllReduceIsWithinCodecBoundAndIdenticalOnEveryRank) {
  const uint64_t seed = shared_seed();
  Communicator& comm = *world_;
  const int p = comm.size();
  const MessageShape shape{32, 256};
  const size_t n = size_t(shape.count());
  std::vector<std::vector<float>> x(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    x[size_t(r)] = input_of(seed, r, n);
    for (float& v : x[size_t(r)]) v = bf16_to_float(float_to_bf16(v));
  }
  const CodecOptions o = opts(CodecKind::taco, Fp8Format::e4m3, 128, Fp8Scales::dual);
  const auto codec = make_codec(o);
  std::vector<bf16> held(n);
  for (size_t i = 0; i < n; ++i) held[i] = float_to_bf16(x[size_t(comm.rank())][i]);
  CompressedCollectives cc(comm);
  cc.all_reduce(*codec, held.data(), DType::bf16, shape, WireContext{}, false);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(held[i]);
  for (int c = 0; c < p; ++c) {
    const Chunk ch = chunk_of(shape, p, c);
    std::vector<double> exact(size_t(ch.shape.count()), 0.0), err(exact.size());
    double a = 0;
    for (int r = 0; r < p; ++r) {
      const float* xr = x[size_t(r)].data() + ch.offset;
      a += norm(std::vector<double>(xr, xr + exact.size()));
      for (size_t i = 0; i < exact.size(); ++i) exact[i] += xr[i];
    }
    for (size_t i = 0; i < exact.size(); ++i) err[i] = out[size_t(ch.offset) + i] - exact[i];
    // The fp32 result's bound, then one bf16 rounding of a value no larger than ||S|| + that.
    const double r1 = rho(o, 0), s = norm(exact);
    const double fp32_bound = r1 * a + r1 * (s + r1 * a) + 1e-6 * a;
    EXPECT_LE(norm(err), fp32_bound + 0x1p-8 * (s + fp32_bound));
  }
  expect_identical_on_every_rank(comm, out);
}

// reduce-scatter and all-gather hand every rank rows / p rows: other row counts are rejected on
// every rank, before anything is sent, with one line that names the site.
TEST_F(CompressedCollectivesTest, RowsThatDoNotSplitEvenlyAreRejectedForScatterAndGather) {
  const int p = world_->size();
  const MessageShape shape{2 * p + 1, 64};
  const auto codec = make_codec(opts(CodecKind::taco, Fp8Format::e4m3, 64, Fp8Scales::dual));
  std::vector<float> in(size_t(shape.count()), 1.f), out(size_t(shape.count()));
  CompressedCollectives cc(*world_);
  for (int op = 0; op < 2; ++op) {
    try {
      if (op == 0)
        cc.reduce_scatter(*codec, in.data(), out.data(), DType::f32, shape,
                          WireContext{Site::mlp_in_bwd, -1, -1}, false);
      else
        cc.all_gather(*codec, in.data(), out.data(), DType::f32, shape,
                      WireContext{Site::mlp_in_fwd, -1, -1}, false);
      ADD_FAILURE() << "uneven rows accepted";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank " + std::to_string(world_rank_) + ": site mlp.in."),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("must be a multiple of the group size"), std::string::npos) << msg;
    }
  }
  // Nothing was left in flight: the group still works.
  std::vector<float> one = {1.f};
  world_->all_reduce(one.data(), one.data(), 1, DType::f32, ReduceOp::sum, nullptr);
  EXPECT_EQ(one[0], float(p));
}

// --- the door: CompressedSiteComm -----------------------------------------------------------

// A Communicator that forwards to another and flips one byte of every slot an all_to_all
// delivers: a compressed buffer damaged in transit.
class CorruptingCommunicator final : public Communicator {
 public:
  CorruptingCommunicator(Communicator& inner, size_t byte)
      : Communicator("corrupting"), inner_(inner), byte_(byte) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* backend() const override { return inner_.backend(); }
  void all_reduce(const void* s, void* r, size_t n, DType t, ReduceOp op, Stream st) override {
    inner_.all_reduce(s, r, n, t, op, st);
  }
  void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op, Stream st) override {
    inner_.reduce_scatter(s, r, n, t, op, st);
  }
  void all_gather(const void* s, void* r, size_t n, DType t, Stream st) override {
    inner_.all_gather(s, r, n, t, st);
  }
  void all_to_all(const void* s, void* r, size_t n, DType t, Stream st) override {
    inner_.all_to_all(s, r, n, t, st);
    for (int c = 0; c < size(); ++c) static_cast<uint8_t*>(r)[size_t(c) * n + byte_] ^= 0x5A;
  }
  void send(const void* b, size_t n, DType t, int peer, int tag, Stream st) override {
    inner_.send(b, n, t, peer, tag, st);
  }
  void recv(void* b, size_t n, DType t, int peer, int tag, Stream st) override {
    inner_.recv(b, n, t, peer, tag, st);
  }
  void send_recv(const void* sb, size_t sn, int dst, void* rb, size_t rn, int src, DType t, int tag,
                 Stream st) override {
    inner_.send_recv(sb, sn, dst, rb, rn, src, t, tag, st);
  }
  void broadcast(void* b, size_t n, DType t, int root, Stream st) override {
    inner_.broadcast(b, n, t, root, st);
  }
  void barrier(Stream st) override { inner_.barrier(st); }

 private:
  Communicator& inner_;
  size_t byte_;
};

// default none; attn.out.fwd taco e4m3 g64 dual on every layer; messages under 4096 bytes
// uncompressed; 2 layers.
CompressionPolicy test_policy() {
  CompressionSection section;
  section.min_bytes = 4096;
  CompressionRule rule;
  rule.sites = {"attn.out.fwd"};
  rule.spec.codec = CodecKind::taco;
  rule.spec.group = 64;
  section.rules.push_back(rule);
  return CompressionPolicy(section, 2, 512, "test.yaml");
}

Tensor host_tensor(std::vector<float>& v) {
  return Tensor{v.data(), DType::f32, DeviceKind::cpu, v.size()};
}

using CompressedSiteCommTest = CompressedCollectivesTest;

// Codec none, a message under min_bytes and a never-compressed site all take the
// backend's native collective: the communicator sees an all_reduce (no all_to_all, no
// all_gather), the site's wire bytes are the backend's own accounting, and no codec ran.
TEST_F(CompressedSiteCommTest, SitesWithoutACodecUseTheNativeCollective) {
  const uint64_t seed = shared_seed();
  const int p = world_->size();
  const CompressionPolicy policy = test_policy();
  CompressedSiteComm door(*world_, policy);
  const MessageShape shape{64, 64};
  const size_t n = size_t(shape.count()), bytes = n * 4;
  struct Case {
    Site site;
    int layer;
    size_t rows;
  };
  for (const Case& c : {Case{Site::attn_in_bwd, 1, 64}, Case{Site::attn_out_fwd, 0, 8},
                        Case{Site::sp_grad, 0, 64}}) {
    SCOPED_TRACE(site_name(c.site));
    const size_t m = c.rows * 64;
    std::vector<float> x = input_of(seed, world_rank_, m);
    const CommStats before = world_->stats();
    door.all_reduce(host_tensor(x), int(c.rows), c.site, c.layer);
    const CommStats& after = world_->stats();
    EXPECT_EQ(after[CommOp::all_reduce].calls - before[CommOp::all_reduce].calls, 1);
    EXPECT_EQ(after[CommOp::all_to_all].calls, before[CommOp::all_to_all].calls);
    EXPECT_EQ(after[CommOp::all_gather].calls, before[CommOp::all_gather].calls);
    const SiteCommStats& st = door.stats()[c.site];
    EXPECT_EQ(st.compressed_calls, 0);
    EXPECT_EQ(st.logical_bytes, int64_t(m * 4));
    EXPECT_EQ(st.wire_bytes, bytes_sent_estimate(CommOp::all_reduce, m * 4, p));
    EXPECT_EQ(st.wire_bytes,
              after[CommOp::all_reduce].bytes_sent - before[CommOp::all_reduce].bytes_sent);
    EXPECT_EQ(st.saved_bytes, 0);
    // fp32 sums in MPI's order: (p-1) roundings of at most 2^-24 of sum |x_r|.
    for (size_t i = 0; i < m; i += 97) {
      double exact = 0, abs = 0;
      for (int r = 0; r < p; ++r) {
        exact += input_of(seed, r, m)[i];
        abs += std::fabs(input_of(seed, r, m)[i]);
      }
      EXPECT_NEAR(x[i], exact, (p - 1) * 0x1p-24 * abs + 1e-30) << i;
    }
  }

  // The compressed site: all_to_all + all_gather of encoded bytes, no all_reduce, and the wire
  // bytes are the two shots' slots.
  door.reset_stats();
  std::vector<float> x = input_of(seed, world_rank_, n);
  const CommStats before = world_->stats();
  door.all_reduce(host_tensor(x), int(shape.rows), Site::attn_out_fwd, 1);
  const CommStats& after = world_->stats();
  EXPECT_EQ(after[CommOp::all_reduce].calls, before[CommOp::all_reduce].calls);
  EXPECT_EQ(after[CommOp::all_to_all].calls - before[CommOp::all_to_all].calls, 1);
  EXPECT_EQ(after[CommOp::all_gather].calls - before[CommOp::all_gather].calls, 1);
  const SiteCommStats& st = door.stats()[Site::attn_out_fwd];
  EXPECT_EQ(st.compressed_calls, 1);
  const auto codec = make_codec(policy.resolve(1, Site::attn_out_fwd, int64_t(bytes)));
  const size_t slot = codec->max_encoded_size({shape.rows / p, shape.cols}, DType::f32);
  EXPECT_EQ(st.wire_bytes, int64_t(2 * (p - 1) * slot));
  EXPECT_EQ(st.saved_bytes, bytes_sent_estimate(CommOp::all_reduce, bytes, p) - st.wire_bytes);
  EXPECT_GT(st.saved_bytes, 0);
}

// measure_errors(true): the site's error is this rank's own encode/decode round trip of the
// message it sent, ||D(E(x)) - x|| / ||x|| over its chunks; off, nothing is sampled.
TEST_F(CompressedSiteCommTest, MeasuredErrorIsThisRanksOwnRoundTrip) {
  const uint64_t seed = shared_seed();
  const int p = world_->size();
  const CompressionPolicy policy = test_policy();
  CompressedSiteComm door(*world_, policy);
  const MessageShape shape{32, 128};
  const size_t n = size_t(shape.count());
  const std::vector<float> input = input_of(seed, world_rank_, n);
  std::vector<float> x = input;
  door.all_reduce(host_tensor(x), int(shape.rows), Site::attn_out_fwd, 0);
  EXPECT_EQ(door.stats()[Site::attn_out_fwd].error_samples, 0);
  EXPECT_TRUE(std::isnan(door.stats()[Site::attn_out_fwd].relative_l2()));

  door.reset_stats();
  door.measure_errors(true);
  x = input;
  door.all_reduce(host_tensor(x), int(shape.rows), Site::attn_out_fwd, 0);
  const auto codec = make_codec(policy.resolve(0, Site::attn_out_fwd, int64_t(n * 4)));
  std::vector<float> back(n);
  for (int c = 0; c < p; ++c) {
    const Chunk ch = chunk_of(shape, p, c);
    const auto buf = encode(*codec, input.data() + ch.offset, ch.shape);
    codec->decode(buf.data(), buf.size(), ch.shape, back.data() + ch.offset, WireContext{});
  }
  const double expected = test::relative_l2(back.data(), input.data(), n);
  const SiteCommStats& st = door.stats()[Site::attn_out_fwd];
  EXPECT_EQ(st.error_samples, 1);
  EXPECT_NEAR(st.relative_l2(), expected, 1e-9 * expected);
  // An E4M3 round trip of Gaussian data costs about 2.6e-2 (docs/design.md §4).
  EXPECT_GT(st.relative_l2(), 5e-3);
  EXPECT_LT(st.relative_l2(), 6.25e-2);
}

// A NaN sent by one rank is never zeroed: its group decodes as NaN on every rank, the other
// groups stay finite, and every rank counts the poisoned group.
TEST_F(CompressedSiteCommTest, NonFiniteInputDecodesAsNaNOnEveryRankAndIsCounted) {
  const uint64_t seed = shared_seed();
  const CompressionPolicy policy = test_policy();
  CompressedSiteComm door(*world_, policy);
  const MessageShape shape{16, 128};  // groups of 64 along hidden: element 70 is in group 1
  std::vector<float> x = input_of(seed, world_rank_, size_t(shape.count()));
  if (world_rank_ == 0) x[70] = NAN;
  door.all_reduce(host_tensor(x), int(shape.rows), Site::attn_out_fwd, 0);
  for (int i = 64; i < 128; ++i) EXPECT_TRUE(std::isnan(x[size_t(i)])) << i;
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isfinite(x[size_t(i)])) << i;
  for (size_t i = 128; i < x.size(); ++i) ASSERT_TRUE(std::isfinite(x[i])) << i;
  EXPECT_GE(door.stats()[Site::attn_out_fwd].nonfinite_groups, 1);
}

// A buffer damaged in transit fails its header check inside the collective, on every rank that
// received it, as one line naming the rank, the site and its layer, and what was wrong (exit
// code 2).
TEST_F(CompressedSiteCommTest, CorruptedWireBufferIsRejectedWithOneLine) {
  const CompressionPolicy policy = test_policy();
  struct Case {
    size_t byte;
    const char* status;
  };
  for (const Case& c : {Case{0, "not a taco message"}, Case{20, "header checksum mismatch"}}) {
    SCOPED_TRACE(c.status);
    CorruptingCommunicator corrupting(*world_, c.byte);
    CompressedSiteComm door(corrupting, policy);
    std::vector<float> x = input_of(shared_seed(), world_rank_, 64 * 64);
    try {
      door.all_reduce(host_tensor(x), 64, Site::attn_out_fwd, 1);
      ADD_FAILURE() << "a corrupted buffer was accepted";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind("rank " + std::to_string(world_rank_) +
                              ": site attn.out.fwd layer 1: rejected compressed buffer",
                          0),
                0u)
          << msg;
      EXPECT_NE(msg.find(c.status), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace taco
