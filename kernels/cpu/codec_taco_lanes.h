// taco's encode and decode eight groups at a time (AVX2): lane l of every vector belongs to group
// g + l, so the sum of squares, the butterflies, the absmax and the per-group scalars are all
// vertical operations with no shuffles; along hidden the groups' rows are transposed on the way in
// and out, along tokens eight neighbouring columns are eight groups already. Same bits as the
// per-group loops of kernels/cpu/codec_fp8.cpp (kernels/codec_fp8.h's steps, in its order).
//
// Each call takes the eight groups g .. g + 7 and either does all of their work or none of it and
// returns false, for the caller's per-group loop to do: where they are not eight full groups (a
// short tail group, a run that leaves a row block along tokens), and where a group takes one of
// the rare paths (a non-finite input, a sum of squares above 2^64, an all-zero group, a tiny
// group whose factor is not a normal float; decode: a poisoned group, a code that is NaN or Inf, a
// tiny decode factor, scales that could overflow). Only for CPUs with AVX2 (the caller checks).
#pragma once

#include <cstdint>

#include "kernels/codec_fp8.h"
#include "kernels/dtype.h"

namespace taco::cpu::lanes {

// spec is taco's (Hadamard on) with G in 32 .. 512, and the CPU has AVX2.
bool handles(const Fp8GroupSpec& spec);

// Groups [g, g + 8) of x -> their codes and scales (g + 8 <= spec.num_groups()).
bool encode8(const float* x, const Fp8GroupSpec& spec, int64_t g, uint8_t* codes, uint8_t* scales);
bool encode8(const bf16* x, const Fp8GroupSpec& spec, int64_t g, uint8_t* codes, uint8_t* scales);

// Groups [g, g + 8) of a message -> out (accumulate: out += decoded, fp32).
bool decode8(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec, int64_t g,
             float* out, bool accumulate);
bool decode8(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec, int64_t g,
             bf16* out);

// Along tokens, from a staged strip (kernels/cpu/codec_taco_tokens.cpp): groups [g, g + 8) are
// columns l0 .. l0 + 7 of a [G, width] block of codes, decoded into the same columns of a
// [G, width] block out (stored, never added); the scales at g as above.
bool decode8_strip(const uint8_t* codes, int64_t l0, int64_t width, const uint8_t* scales,
                   const Fp8GroupSpec& spec, int64_t g, float* out);

}  // namespace taco::cpu::lanes
