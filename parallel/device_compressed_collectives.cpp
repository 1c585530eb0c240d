// The pipeline layout of parallel/device_compressed_collectives.h (host code, the same in every
// build); the device calls are in device_compressed_collectives_cuda.cpp, or refused by
// device_compressed_collectives_nocuda.cpp.
#include "parallel/device_compressed_collectives.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace taco {

// --- the pipeline layout -------------------------------------------------------------------

int DeviceCompressedCollectives::auto_pieces(size_t logical_bytes) {
  if (logical_bytes < 2 * kAutoPieceBytes) return 1;
  return int(std::min<size_t>(size_t(kMaxAutoPieces), logical_bytes / kAutoPieceBytes));
}

int DeviceCompressedCollectives::resolve_pieces(int pieces, size_t logical_bytes, bool enqueues) {
  TACO_CHECK(pieces >= 0, "pipeline pieces " + std::to_string(pieces) + " is negative");
  if (pieces != kAutoPieces) return pieces;
  return enqueues ? auto_pieces(logical_bytes) : 1;
}

std::vector<int64_t> DeviceCompressedCollectives::piece_bounds(int64_t units, int pieces,
                                                               int64_t align) {
  TACO_CHECK(units >= 0 && pieces >= 1 && align >= 1, "piece_bounds(" + std::to_string(units) +
                                                          ", " + std::to_string(pieces) + ", " +
                                                          std::to_string(align) + ")");
  const int64_t blocks = (units + align - 1) / align;
  const int k = int(std::max<int64_t>(1, std::min<int64_t>(pieces, blocks)));
  std::vector<int64_t> bounds(size_t(k) + 1);
  for (int j = 0; j <= k; ++j) {
    bounds[size_t(j)] = std::min(units, CompressedCollectives::chunk_begin(blocks, k, j) * align);
  }
  return bounds;
}

std::vector<DeviceCompressedCollectives::Piece> DeviceCompressedCollectives::split_pieces(
    MessageShape full, int shards, int pieces) {
  const bool flat = full.rows == 1;
  const int64_t units = flat ? full.cols : full.rows;
  TACO_CHECK(
      shards >= 1 && units % shards == 0,
      "split_pieces: " + std::to_string(units) + " units in " + std::to_string(shards) + " shards");
  const std::vector<int64_t> b = piece_bounds(units / shards, pieces, flat ? kFlatPieceAlign : 1);
  std::vector<Piece> out;
  for (size_t j = 0; j + 1 < b.size(); ++j) {
    Piece piece;
    piece.begin = b[j];
    piece.count = b[j + 1] - b[j];
    piece.shape = flat ? MessageShape{1, piece.count * shards}
                       : MessageShape{piece.count * shards, full.cols};
    out.push_back(piece);
  }
  return out;
}

void DeviceCompressedCollectives::set_pieces(int pieces) {
  TACO_CHECK(pieces >= 0, "pipeline pieces " + std::to_string(pieces) + " is negative");
  pieces_ = pieces;
}

}  // namespace taco
