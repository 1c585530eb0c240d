// compression/sites.h: every message of a step has one typed Site whose name round-trips; the
// tensor-parallel mappings (parallel/tensor_parallel.h) derive their forward and backward sites
// from one base site and pick the SP or plain collective themselves; a compression rule naming
// a never-compressed site is refused.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "compression/policy.h"
#include "compression/sites.h"
#include "compression/spec.h"
#include "parallel/tensor_parallel.h"

namespace taco {
namespace {

TEST(Sites, EveryValueHasAUniqueNameThatRoundTrips) {
  std::set<std::string> names;
  for (int i = 0; i < kNumAllSites; ++i) {
    const Site s = Site(i);
    const std::string name = site_name(s);
    EXPECT_NE(name, "?") << i;
    EXPECT_TRUE(names.insert(name).second) << name << " names two sites";
    Site back;
    ASSERT_TRUE(parse_site(name, &back)) << name;
    EXPECT_EQ(back, s) << name;
  }
  Site dummy;
  EXPECT_FALSE(parse_site("attn.out", &dummy));
  EXPECT_FALSE(parse_site("", &dummy));
}

TEST(Sites, OnlyTheConfigNamesAreCompressible) {
  for (int i = 0; i < kNumAllSites; ++i) {
    const Site s = Site(i);
    EXPECT_EQ(site_is_compressible(s), site_index(site_name(s)) >= 0) << site_name(s);
  }
  EXPECT_EQ(compressible_sites().size(), size_t(kNumSites));
  for (Site s : {Site::sp_grad, Site::tied_grad, Site::dp_param, Site::ce_max, Site::grad_norm,
                 Site::loss_sum})
    EXPECT_FALSE(site_is_compressible(s)) << site_name(s);
  EXPECT_TRUE(site_is_compressible(Site::dp_grad));
  EXPECT_FALSE(site_is_per_layer(Site::sp_grad));
}

// The order logs and metrics.jsonl list sites in: by name, as the string-keyed maps did.
TEST(Sites, ByNameListsEverySiteOnceInNameOrder) {
  const auto& sorted = sites_by_name();
  std::set<Site> seen(sorted.begin(), sorted.end());
  EXPECT_EQ(seen.size(), size_t(kNumAllSites));
  for (size_t i = 1; i < sorted.size(); ++i)
    EXPECT_LT(std::string(site_name(sorted[i - 1])), std::string(site_name(sorted[i])));
}

TEST(Sites, BaseSitesDeriveTheirForwardAndBackwardSites) {
  struct Case {
    TpSite base;
    const char* fwd;
    const char* bwd;
  };
  for (const Case& c : {Case{TpSite::embed, "embed.fwd", "embed.bwd"},
                        Case{TpSite::attn_in, "attn.in.fwd", "attn.in.bwd"},
                        Case{TpSite::attn_out, "attn.out.fwd", "attn.out.bwd"},
                        Case{TpSite::mlp_in, "mlp.in.fwd", "mlp.in.bwd"},
                        Case{TpSite::mlp_out, "mlp.out.fwd", "mlp.out.bwd"},
                        Case{TpSite::head_in, "head.in.fwd", "head.in.bwd"}}) {
    EXPECT_STREQ(site_name(forward_site(c.base)), c.fwd);
    EXPECT_STREQ(site_name(backward_site(c.base)), c.bwd);
  }
}

TEST(Sites, ARuleNamingANeverCompressedSiteIsRefused) {
  for (const char* name : {"sp.grad", "tied.grad", "dp.param", "grad.norm"}) {
    CompressionSection c;
    CompressionRule r;
    r.sites = {"mlp.out.fwd", name};
    r.spec.codec = CodecKind::taco;
    r.line = 9;
    c.rules = {r};
    try {
      CompressionPolicy p(c, 2, 256, "exp.yaml");
      FAIL() << name << " accepted";
    } catch (const CompressionError& e) {
      const std::string want = std::string("exp.yaml:9: compression.rules[0].sites[1]: ") + name +
                               " is never compressed";
      EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
      EXPECT_NE(e.problem().find("expected one of embed.fwd"), std::string::npos) << e.problem();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// A group of two whose calls move nothing: only the door's calls are looked at.
class SilentCommunicator final : public Communicator {
 public:
  SilentCommunicator() : Communicator("tp") {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "mpi"; }
  void all_reduce(const void*, void*, size_t, DType, ReduceOp, Stream) override {}
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp, Stream) override {}
  void all_gather(const void*, void*, size_t, DType, Stream) override {}
  void all_to_all(const void*, void*, size_t, DType, Stream) override {}
  void send(const void*, size_t, DType, int, int, Stream) override {}
  void recv(void*, size_t, DType, int, int, Stream) override {}
  void send_recv(const void*, size_t, int, void*, size_t, int, DType, int, Stream) override {}
  void broadcast(void*, size_t, DType, int, Stream) override {}
  void barrier(Stream) override {}
};

// Records each collective as "op site layer".
class RecordingSiteComm final : public SiteComm {
 public:
  explicit RecordingSiteComm(Communicator& comm) : SiteComm(comm) {}
  void all_reduce(const Tensor&, int, Site site, int layer) override {
    log("all_reduce", site, layer);
  }
  void reduce_scatter(const Tensor&, const Tensor&, int, Site site, int layer) override {
    log("reduce_scatter", site, layer);
  }
  void all_gather(const Tensor&, const Tensor&, int, Site site, int layer) override {
    log("all_gather", site, layer);
  }
  std::vector<std::string> calls;

 private:
  void log(const char* op, Site site, int layer) {
    calls.push_back(std::string(op) + " " + site_name(site) + " " + std::to_string(layer));
  }
};

// Megatron's ColumnParallelLinear / RowParallelLinear: the mapping follows sequence parallelism,
// and each direction communicates at its own site; the returned tensor is where the result is.
TEST(TensorParallel, LayerSeamsPickTheMappingOfTheirSequenceParallelism) {
  SilentCommunicator group;
  std::vector<float> a(8), b(4);
  const Tensor full{a.data(), DType::f32, DeviceKind::cpu, a.size()};
  const Tensor shard{b.data(), DType::f32, DeviceKind::cpu, b.size()};
  for (bool sp : {false, true}) {
    RecordingSiteComm door(group);
    TensorParallel tp(&door, sp);
    tp.column_parallel_input_forward(shard, full, 2, TpSite::mlp_in, 3);
    const Tensor dln = tp.column_parallel_input_backward(full, shard, 2, TpSite::mlp_in, 3);
    const Tensor out = tp.row_parallel_output_forward(full, shard, 2, TpSite::attn_out, 1);
    const Tensor dout = tp.row_parallel_output_backward(shard, full, 2, TpSite::embed, -1);
    const std::vector<std::string> want =
        sp ? std::vector<std::string>{"all_gather mlp.in.fwd 3", "reduce_scatter mlp.in.bwd 3",
                                      "reduce_scatter attn.out.fwd 1", "all_gather embed.bwd -1"}
           : std::vector<std::string>{"all_reduce mlp.in.bwd 3", "all_reduce attn.out.fwd 1"};
    EXPECT_EQ(door.calls, want) << "sequence_parallel " << sp;
    EXPECT_EQ(dln.data, sp ? shard.data : full.data);
    EXPECT_EQ(out.data, sp ? shard.data : full.data);
    EXPECT_EQ(dout.data, sp ? full.data : shard.data);
  }
}

}  // namespace
}  // namespace taco
