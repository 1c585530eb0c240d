// A build without CUDA has the class (its pipeline layout is host code) but no device path:
// every call is the one UserError below.
#include "parallel/device_compressed_collectives.h"

#include "kernels/check.h"

namespace taco {

class DevicePipeline {};

DeviceCompressedCollectives::DeviceCompressedCollectives(Communicator& comm, int pieces)
    : comm_(comm), pieces_(pieces) {
  set_pieces(pieces);
}

DeviceCompressedCollectives::~DeviceCompressedCollectives() = default;

namespace {
[[noreturn]] void no_cuda() {
  throw UserError(
      "compressed collectives on device buffers: this build has no CUDA; keep the tensors in "
      "host memory (CompressedCollectives) or rebuild with CUDA");
}
}  // namespace

CompressedCall DeviceCompressedCollectives::all_reduce(const Codec&, void*, DType, MessageShape,
                                                       const WireContext&, bool, Stream) {
  no_cuda();
}
CompressedCall DeviceCompressedCollectives::reduce_scatter(const Codec&, const void*, void*, DType,
                                                           MessageShape, const WireContext&, bool,
                                                           Stream) {
  no_cuda();
}
CompressedCall DeviceCompressedCollectives::all_gather(const Codec&, const void*, void*, DType,
                                                       MessageShape, const WireContext&, bool,
                                                       Stream) {
  no_cuda();
}
CompressedCall DeviceCompressedCollectives::send(const Codec&, const void*, DType, MessageShape,
                                                 int, int, const WireContext&, bool, Stream) {
  no_cuda();
}
CompressedCall DeviceCompressedCollectives::recv(const Codec&, void*, DType, MessageShape, int, int,
                                                 const WireContext&, Stream) {
  no_cuda();
}
CompressedCall DeviceCompressedCollectives::send_recv(const Side&, int, const Side&, int, DType,
                                                      int, bool, Stream) {
  no_cuda();
}

}  // namespace taco
