// The concrete codecs behind make_codec (compression/codec.h); nothing else includes this.
#pragma once

#include <memory>

#include "compression/codec.h"

namespace taco {

// Codec none: the raw values (compression/codec_none.cpp).
std::unique_ptr<Codec> make_none_codec();

// fp8_tensor, fp8_block and taco: grouped FP8 (compression/codec_fp8.cpp).
std::unique_ptr<Codec> make_fp8_codec(const CodecOptions& options);

}  // namespace taco
