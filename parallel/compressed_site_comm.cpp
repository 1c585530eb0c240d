#include "parallel/compressed_site_comm.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include "engine/runtime/arena.h"
#include "kernels/check.h"
#include "parallel/watchdog.h"

namespace taco {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// [rows, numel / rows], or flat [1, numel] for rows <= 0.
MessageShape shape_of(size_t numel, int rows, Site site) {
  if (rows <= 0) return MessageShape{1, int64_t(numel)};
  TACO_CHECK(numel % size_t(rows) == 0, std::string("message at ") + site_name(site) + " of " +
                                            std::to_string(numel) + " elements is not " +
                                            std::to_string(rows) + " rows");
  return MessageShape{rows, int64_t(numel / size_t(rows))};
}

WireContext where(Site site, int layer) { return WireContext{site, layer, -1}; }

}  // namespace

// --- SiteCalibration ---------------------------------------------------------------------------

SiteCalibration::SiteCalibration(CompressionPolicy& policy) : policy_(policy) {
  for (Site site : policy.sites_to_calibrate()) {
    // The site's options at the first layer that says auto (model-wide sites: layer -1). Rules
    // giving one site two grouped codecs with auto in different layers share this calibration.
    CodecOptions base;
    const bool per_layer = site_is_per_layer(site);
    for (int l = per_layer ? 0 : -1; l < (per_layer ? policy.n_layer() : 0); ++l) {
      base = policy.configured(l, site);
      const bool grouped = base.kind == CodecKind::fp8_block || base.kind == CodecKind::taco;
      if (grouped && base.group == kAutoGroup) break;
    }
    pending_.emplace_back(site,
                          std::make_unique<GroupCalibrator>(site, base, policy.calibrate_steps()));
  }
}

void SiteCalibration::observe(Site site, const void* x, DType dtype, MessageShape shape) {
  for (auto& [s, calibrator] : pending_) {
    if (s != site) continue;
    if (dtype == DType::f32)
      calibrator->observe(static_cast<const float*>(x), shape);
    else
      calibrator->observe(static_cast<const bf16*>(x), shape);
  }
}

std::vector<CalibrationChoice> SiteCalibration::end_step(Communicator& world) {
  if (pending_.empty()) return {};
  for (auto& [site, calibrator] : pending_) calibrator->end_step();
  if (!pending_.front().second->done()) return {};

  // Rank 0's (group, axis) per site, as int32 pairs.
  std::vector<CalibrationChoice> choices;
  std::vector<int32_t> agreed;
  for (auto& [site, calibrator] : pending_) {
    choices.push_back(calibrator->choice());
    agreed.push_back(choices.back().chosen.group);
    agreed.push_back(int32_t(choices.back().chosen.axis));
  }
  world.broadcast(agreed.data(), agreed.size() * sizeof(int32_t), DType::u8, 0, nullptr);
  for (size_t i = 0; i < pending_.size(); ++i) {
    const int group = agreed[2 * i];
    const GroupAxis axis = GroupAxis(agreed[2 * i + 1]);
    policy_.apply_calibration(pending_[i].first, group, axis);
    choices[i].chosen.group = choices[i].options.group = group;
    choices[i].chosen.axis = choices[i].options.axis = axis;
  }
  pending_.clear();
  return choices;
}

// --- CompressedSiteComm ------------------------------------------------------------------------

CompressedSiteComm::CompressedSiteComm(Communicator& comm, const CompressionPolicy& policy,
                                       SiteCalibration* calibration)
    : SiteComm(comm), policy_(policy), calibration_(calibration), collectives_(comm) {}

void CompressedSiteComm::build_codec_table() {
  const int n_layer = policy_.n_layer();
  codec_table_.assign(size_t(n_layer + 1) * kNumSites, TableEntry{});
  for (Site site : compressible_sites()) {
    const bool per_layer = site_is_per_layer(site);
    for (int l = per_layer ? 0 : -1; l < (per_layer ? n_layer : 0); ++l) {
      // What a message at or above min_bytes gets (codec_for checks the size).
      const CodecOptions options =
          canonical(policy_.resolve(l, site, std::numeric_limits<int64_t>::max()));
      if (options.kind == CodecKind::none) continue;
      const Codec* codec = nullptr;
      for (const auto& c : codecs_)
        if (c->options() == options) codec = c.get();
      if (!codec) {
        codecs_.push_back(make_codec(options));
        codec = codecs_.back().get();
      }
      codec_table_[size_t(l + 1) * kNumSites + size_t(site)] = {codec, policy_.automatic(l, site)};
    }
  }
  table_revision_ = policy_.revision();
}

const Codec* CompressedSiteComm::codec_for(Site site, int layer, CommOp op, const Tensor& t,
                                           int rows) {
  if (size() == 1 || !site_is_compressible(site) || int64_t(t.bytes()) < policy_.min_bytes())
    return nullptr;
  if (table_revision_ != policy_.revision()) build_codec_table();
  if (site_is_per_layer(site))
    TACO_CHECK(layer >= 0 && layer < policy_.n_layer(),
               std::string("layer ") + std::to_string(layer) + " for site " + site_name(site));
  else
    layer = -1;
  const TableEntry& e = codec_table_[size_t(layer + 1) * kNumSites + size_t(site)];
  if (e.codec && e.automatic && !auto_compresses(site, layer, op, t, rows, *e.codec))
    return nullptr;
  return e.codec;
}

CodecAutotune& CompressedSiteComm::tuner() {
  if (!autotune_) autotune_ = std::make_unique<CodecAutotune>(comm_, policy_.auto_margin());
  return *autotune_;
}

bool CompressedSiteComm::auto_compresses(Site site, int layer, CommOp op, const Tensor& t, int rows,
                                         const Codec& candidate) {
  const AutoMessage m{
      site, layer, op, t.dtype, shape_of(t.numel, rows, site), t.device, device_path(t, candidate)};
  return tuner().compress(m, candidate);
}

void CompressedSiteComm::prepare_point_to_point(Site site, const Tensor& like) {
  // The conditions codec_for applies to such a message, the same on every rank of the group.
  TACO_CHECK(!site_is_per_layer(site),
             std::string("prepare_point_to_point at per-layer site ") + site_name(site));
  if (size() == 1 || !site_is_compressible(site) || int64_t(like.bytes()) < policy_.min_bytes())
    return;
  if (table_revision_ != policy_.revision()) build_codec_table();
  const TableEntry& e = codec_table_[size_t(site)];  // row 0: the model-wide sites
  if (!e.codec || !e.automatic) return;
  const AutoMessage m{site,
                      -1,
                      CommOp::send_recv,
                      like.dtype,
                      shape_of(like.numel, 0, site),
                      like.device,
                      device_path(like, *e.codec)};
  tuner().prepare_point_to_point(m, *e.codec);
}

bool CompressedSiteComm::device_path(const Tensor& t, const Codec& codec) const {
  // A plain MPI communicator moves host memory only: its device tensors are staged below.
  return t.device != DeviceKind::cpu && codec.has_device_path() &&
         std::string_view(communicator().backend()) != "mpi";
}

bool CompressedSiteComm::on_device(const Tensor& t, const Codec& codec) {
  if (!device_path(t, codec)) return false;
  if (!device_collectives_)
    device_collectives_ =
        std::make_unique<DeviceCompressedCollectives>(communicator(), policy_.chunks());
  return true;
}

void* CompressedSiteComm::host(const Tensor& t, std::vector<uint8_t>& stage, bool copy) {
  if (t.device == DeviceKind::cpu) return t.data;
  stage.resize(t.bytes());
  if (copy) device_copy(stage.data(), t.data, t.bytes(), DeviceKind::cpu, t.device);
  return stage.data();
}

void CompressedSiteComm::write_back(const Tensor& t, const std::vector<uint8_t>& stage) {
  if (t.device != DeviceKind::cpu)
    device_copy(t.data, stage.data(), t.bytes(), t.device, DeviceKind::cpu);
}

void CompressedSiteComm::observe(Site site, const void* x, DType dtype, MessageShape shape) {
  if (calibration_ && calibration_->active()) calibration_->observe(site, x, dtype, shape);
}

void CompressedSiteComm::observe_device(Site site, const Tensor& t, MessageShape shape) {
  if (calibration_ && calibration_->active())
    calibration_->observe(site, host(t, stage_in_, true), t.dtype, shape);
}

void CompressedSiteComm::record(Site site, CommOp native, size_t logical,
                                const CompressedCall& call, double seconds) {
  SiteCommStats& s = account(site, logical, call.wire_bytes, seconds);
  s.compressed_calls += 1;
  s.saved_bytes += bytes_sent_estimate(native, logical, size()) - int64_t(call.wire_bytes);
  s.nonfinite_groups += call.nonfinite_groups;
  s.codec_seconds += call.codec_seconds;
  s.codec_timed_calls += call.codec_timed ? 1 : 0;
  if (call.measured) {
    s.error_samples += 1;
    s.error_sq += call.error_sq;
    s.signal_sq += call.signal_sq;
  }
}

void CompressedSiteComm::all_reduce(const Tensor& x, int rows, Site site, int layer) {
  WatchScope watch("all_reduce", site, layer, comm_);
  const Codec* codec = codec_for(site, layer, CommOp::all_reduce, x, rows);
  if (!codec) return SiteComm::all_reduce(x, rows, site, layer);
  const auto t0 = Clock::now();
  const MessageShape shape = shape_of(x.numel, rows, site);
  CompressedCall call;
  if (on_device(x, *codec)) {
    observe_device(site, x, shape);
    call = device_collectives_->all_reduce(*codec, x.data, x.dtype, shape, where(site, layer),
                                           measure_);
  } else {
    void* data = host(x, stage_in_, true);
    observe(site, data, x.dtype, shape);
    call = collectives_.all_reduce(*codec, data, x.dtype, shape, where(site, layer), measure_);
    write_back(x, stage_in_);
  }
  record(site, CommOp::all_reduce, x.bytes(), call, since(t0));
}

void CompressedSiteComm::reduce_scatter(const Tensor& in, const Tensor& out, int rows, Site site,
                                        int layer) {
  WatchScope watch("reduce_scatter", site, layer, comm_);
  const Codec* codec = codec_for(site, layer, CommOp::reduce_scatter, in, rows);
  if (!codec) return SiteComm::reduce_scatter(in, out, rows, site, layer);
  TACO_CHECK(
      in.dtype == out.dtype && out.numel * size_t(size()) == in.numel,
      std::string("reduce_scatter at ") + site_name(site) + ": output is not 1/size of the input");
  const auto t0 = Clock::now();
  const MessageShape full = shape_of(in.numel, rows, site);
  CompressedCall call;
  if (on_device(in, *codec) && out.device == in.device) {
    observe_device(site, in, full);
    call = device_collectives_->reduce_scatter(*codec, in.data, out.data, in.dtype, full,
                                               where(site, layer), measure_);
  } else {
    const void* src = host(in, stage_in_, true);
    void* dst = host(out, stage_out_, false);
    observe(site, src, in.dtype, full);
    call =
        collectives_.reduce_scatter(*codec, src, dst, in.dtype, full, where(site, layer), measure_);
    write_back(out, stage_out_);
  }
  record(site, CommOp::reduce_scatter, in.bytes(), call, since(t0));
}

void CompressedSiteComm::all_gather(const Tensor& in, const Tensor& out, int rows, Site site,
                                    int layer) {
  WatchScope watch("all_gather", site, layer, comm_);
  const Codec* codec = codec_for(site, layer, CommOp::all_gather, out, rows);
  if (!codec) return SiteComm::all_gather(in, out, rows, site, layer);
  TACO_CHECK(
      in.dtype == out.dtype && in.numel * size_t(size()) == out.numel,
      std::string("all_gather at ") + site_name(site) + ": input is not 1/size of the output");
  const auto t0 = Clock::now();
  const MessageShape full = shape_of(out.numel, rows, site);
  const MessageShape shard{full.rows == 1 ? 1 : full.rows / size(),
                           full.rows == 1 ? int64_t(in.numel) : full.cols};
  CompressedCall call;
  if (on_device(in, *codec) && out.device == in.device) {
    observe_device(site, in, shard);
    call = device_collectives_->all_gather(*codec, in.data, out.data, in.dtype, full,
                                           where(site, layer), measure_);
  } else {
    const void* src = host(in, stage_in_, true);
    void* dst = host(out, stage_out_, false);
    observe(site, src, in.dtype, shard);
    call = collectives_.all_gather(*codec, src, dst, in.dtype, full, where(site, layer), measure_);
    write_back(out, stage_out_);
  }
  record(site, CommOp::all_gather, out.bytes(), call, since(t0));
}

void CompressedSiteComm::send(const Tensor& x, int peer, Site site, int layer) {
  WatchScope watch("send", site, layer, comm_, peer);
  const Codec* codec = codec_for(site, layer, CommOp::send, x, 0);
  if (!codec) return SiteComm::send(x, peer, site, layer);
  const auto t0 = Clock::now();
  const MessageShape shape = shape_of(x.numel, 0, site);
  CompressedCall call;
  if (on_device(x, *codec)) {
    observe_device(site, x, shape);
    call = device_collectives_->send(*codec, x.data, x.dtype, shape, peer, /*tag=*/0,
                                     where(site, layer), measure_);
  } else {
    const void* data = host(x, stage_in_, true);
    observe(site, data, x.dtype, shape);
    call = collectives_.send(*codec, data, x.dtype, shape, peer, /*tag=*/0, where(site, layer),
                             measure_);
  }
  record(site, CommOp::send, x.bytes(), call, since(t0));
}

void CompressedSiteComm::recv(const Tensor& x, int peer, Site site, int layer) {
  WatchScope watch("recv", site, layer, comm_, peer);
  const Codec* codec = codec_for(site, layer, CommOp::recv, x, 0);
  if (!codec) return SiteComm::recv(x, peer, site, layer);
  const auto t0 = Clock::now();
  const MessageShape shape = shape_of(x.numel, 0, site);
  CompressedCall call;
  if (on_device(x, *codec)) {
    call = device_collectives_->recv(*codec, x.data, x.dtype, shape, peer, /*tag=*/0,
                                     where(site, layer));
  } else {
    void* data = host(x, stage_out_, false);
    call = collectives_.recv(*codec, data, x.dtype, shape, peer, /*tag=*/0, where(site, layer));
    write_back(x, stage_out_);
  }
  record(site, CommOp::recv, x.bytes(), call, since(t0));
}

void CompressedSiteComm::send_recv(const Tensor& out, int dst, Site out_site, const Tensor& in,
                                   int src, Site in_site) {
  WatchScope watch("send_recv", out_site, -1, comm_, dst, src);
  const Codec* out_codec = codec_for(out_site, -1, CommOp::send, out, 0);
  const Codec* in_codec = codec_for(in_site, -1, CommOp::recv, in, 0);
  // Both directions compressed or neither: a mixed pair would need two kinds of buffers in one
  // exchange; it falls back to sending each side as its own message.
  if (!out_codec && !in_codec) return SiteComm::send_recv(out, dst, out_site, in, src, in_site);
  if (!out_codec || !in_codec) {
    // The pipeline's exchanges are pairs (dst == src); the lower rank of the pair sends first,
    // so the two blocking calls cannot wait on each other.
    if (rank() < dst) {
      send(out, dst, out_site, -1);
      recv(in, src, in_site, -1);
    } else {
      recv(in, src, in_site, -1);
      send(out, dst, out_site, -1);
    }
    return;
  }
  TACO_CHECK(out.dtype == in.dtype, "send_recv with two dtypes");
  const auto t0 = Clock::now();
  const MessageShape out_shape = shape_of(out.numel, 0, out_site);
  const MessageShape in_shape = shape_of(in.numel, 0, in_site);
  CompressedCall call;
  if (on_device(out, *out_codec) && on_device(in, *in_codec)) {
    observe_device(out_site, out, out_shape);
    call = device_collectives_->send_recv({out_codec, out.data, out_shape, where(out_site, -1)},
                                          dst, {in_codec, in.data, in_shape, where(in_site, -1)},
                                          src, out.dtype, /*tag=*/0, measure_);
  } else {
    const void* out_data = host(out, stage_in_, true);
    void* in_data = host(in, stage_out_, false);
    observe(out_site, out_data, out.dtype, out_shape);
    call = collectives_.send_recv(
        {out_codec, const_cast<void*>(out_data), out_shape, where(out_site, -1)}, dst,
        {in_codec, in_data, in_shape, where(in_site, -1)}, src, out.dtype, /*tag=*/0, measure_);
    write_back(in, stage_out_);
  }
  const double seconds = since(t0);
  CompressedCall sent = call, received;
  sent.nonfinite_groups = 0;
  received.nonfinite_groups = call.nonfinite_groups;
  record(out_site, CommOp::send, out.bytes(), sent, seconds / 2);
  record(in_site, CommOp::recv, in.bytes(), received, seconds / 2);
}

}  // namespace taco
