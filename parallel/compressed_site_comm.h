// A SiteComm that compresses the sites its CompressionPolicy names (docs/design.md §3, §5).
//
// The codec of each (layer, site) is resolved from the policy once, into a table, and again when
// the policy changes (calibration of group auto); a call looks its codec up there. A message
// under the policy's min_bytes, codec none, a site that is never compressed (sp.grad,
// tied.grad, ...), a codec: auto site whose CodecAutotune predicts no gain for the message, or a
// group of one: the backend's native collective, exactly as SiteComm does it. Otherwise the
// compressed collective of parallel/compressed_collectives.h.
// Messages are [rows, cols] as SiteComm's calls pass them (rows = 0: flat, [1, numel]); p2p sends
// carry no rows and travel flat.
//
// Accounting per site (SiteCommStats): logical bytes, wire bytes (the encoded bytes this rank
// sent), saved bytes (what the native collective would have sent, bytes_sent_estimate, minus
// that), groups decoded as NaN, and, while measure_errors(true), the error of this rank's own
// encode/decode round trip of every compressed message (no extra communication).
//
// Device tensors over a device communicator (NCCL, or MPI staged through the host) whose codec
// has a device path go through DeviceCompressedCollectives (parallel/
// device_compressed_collectives.h), pipelined in the policy's `chunks` pieces, on the default
// stream; the same bytes and the same accounting. Otherwise (a plain host MPI communicator, a
// CPU-only build) device tensors are staged through host memory and the CPU codecs run there.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "compression/calibration.h"
#include "compression/codec.h"
#include "compression/policy.h"
#include "parallel/codec_autotune.h"
#include "parallel/compressed_collectives.h"
#include "parallel/device_compressed_collectives.h"
#include "parallel/site_comm.h"

namespace taco {

// group: auto during training (compression/calibration.h): every site the policy still has to
// calibrate gets a GroupCalibrator, fed the tensors the compressing SiteComms send there during
// the first calibrate_steps steps. Ranks see different tensors, so world rank 0's choice is the
// one every rank applies.
class SiteCalibration {
 public:
  explicit SiteCalibration(CompressionPolicy& policy);

  bool active() const { return !pending_.empty(); }
  // A message sent at `site` while it is being calibrated (host memory).
  void observe(Site site, const void* x, DType dtype, MessageShape shape);
  // Ends one training step. On the step that completes calibration, world rank 0's choice for
  // each site is broadcast over `world` (every rank calls this) and applied to the policy, and
  // this rank's choices, with rank 0's group and axis, are returned; otherwise {}.
  std::vector<CalibrationChoice> end_step(Communicator& world);

 private:
  CompressionPolicy& policy_;
  std::vector<std::pair<Site, std::unique_ptr<GroupCalibrator>>> pending_;
};

class CompressedSiteComm : public SiteComm {
 public:
  // `policy` (and `calibration`, when given) must outlive this object.
  CompressedSiteComm(Communicator& comm, const CompressionPolicy& policy,
                     SiteCalibration* calibration = nullptr);

  // Whether compressed calls measure their error (the trainer turns it on for logged steps).
  void measure_errors(bool on) { measure_ = on; }
  // codec: auto's decisions on this group (parallel/codec_autotune.h); null before its first.
  CodecAutotune* autotune() const { return autotune_.get(); }
  // Where the policy says codec: auto at the model-wide point-to-point `site` (pp.act,
  // pp.grad), decides now how messages like `like` (its size, dtype and memory are read, never
  // its data) will travel; nothing otherwise. Every rank of the group must call it, in the
  // same order (the trainer does, before the first step): CodecAutotune::prepare_point_to_point.
  void prepare_point_to_point(Site site, const Tensor& like);

  void all_reduce(const Tensor& x, int rows, Site site, int layer) override;
  void reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site, int layer) override;
  void all_gather(const Tensor& in, const Tensor& out, int rows, Site site, int layer) override;
  void send(const Tensor& x, int peer, Site site, int layer) override;
  void recv(const Tensor& x, int peer, Site site, int layer) override;
  void send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in, int src,
                 Site in_site) override;

 private:
  // The codec for the message `t` of `op` at (site, layer) ([rows, cols] as the call passes
  // them), or nullptr for the native path.
  const Codec* codec_for(Site site, int layer, CommOp op, const Tensor& t, int rows);
  // Resolves codec_table_ from the policy as it is now.
  void build_codec_table();
  // codec: auto at (site, layer): whether `t` goes through `candidate`.
  bool auto_compresses(Site site, int layer, CommOp op, const Tensor& t, int rows,
                       const Codec& candidate);
  CodecAutotune& tuner();  // autotune_, made on first use
  // Whether a message of t with codec runs the device collectives (else it is staged on the
  // host); on_device also makes those collectives on first use.
  bool device_path(const Tensor& t, const Codec& codec) const;
  bool on_device(const Tensor& t, const Codec& codec);
  // Host memory of a tensor: itself, or a copy of a device tensor in `stage` (copy = false
  // sizes it only); write_back copies a staged result to the device.
  void* host(const Tensor& t, std::vector<uint8_t>& stage, bool copy);
  void write_back(const Tensor& t, const std::vector<uint8_t>& stage);
  void observe(Site site, const void* x, DType dtype, MessageShape shape);
  // observe for a message in device memory: a host copy, only while calibration wants one.
  void observe_device(Site site, const Tensor& t, MessageShape shape);
  void record(Site site, CommOp native, size_t logical, const CompressedCall& call, double seconds);

  const CompressionPolicy& policy_;
  SiteCalibration* calibration_;
  CompressedCollectives collectives_;
  std::unique_ptr<DeviceCompressedCollectives> device_collectives_;  // made on first use
  std::unique_ptr<CodecAutotune> autotune_;                          // made on first use
  std::vector<std::unique_ptr<Codec>> codecs_;                       // one per distinct option set
  // The policy resolved per (layer, site): the codec (nullptr for none) and whether codec: auto
  // only proposes it. codec_table_[row * kNumSites + site]: row 0 for model-wide sites, 1 + layer
  // for per-layer ones. Built at the policy's revision table_revision_ (-1: not yet).
  struct TableEntry {
    const Codec* codec = nullptr;
    bool automatic = false;
  };
  std::vector<TableEntry> codec_table_;
  int table_revision_ = -1;
  std::vector<uint8_t> stage_in_, stage_out_;  // host copies of device tensors
  bool measure_ = false;
};

}  // namespace taco
