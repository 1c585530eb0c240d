// TEST ONLY: the CPU FP8 codecs exactly as they were before they were made fast (commit 2ad94ea,
// kernels/cpu/codec_fp8.cpp, scalar per group), kept as the bit-for-bit reference that
// test_codec_cpu_bits compares the fast codecs against on fresh random inputs. Only the namespace
// changed, and the FP8 conversion and the butterflies are local copies of the original ones so
// that a change there cannot hide from the comparison. Do not optimise this file. One change
// since, to what decode returns only (its values are untouched): it also counts the groups whose
// outputs overflow to Inf from finite codes (issue 22, item 10), by kernels/codec_fp8.h's rule.
#include "tests/unit/reference/codec_fp8_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/check.h"

namespace taco::cpu::reference {
namespace {

// kernels/hadamard.cpp's butterflies and hadamard_scale as they were.
void hadamard_butterflies(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int base = 0; base < n; base += 2 * h) {
      float* lo = x + base;
      float* hi = x + base + h;
      for (int i = 0; i < h; ++i) {
        const float a = lo[i], b = hi[i];
        lo[i] = a + b;
        hi[i] = a - b;
      }
    }
  }
}
float hadamard_scale(int n) { return float(1.0 / std::sqrt(double(n))); }

constexpr float kLambda = 1e-6f;  // keeps a finite on an all-zero group
constexpr float kMinAdaptive = 1e-3f;
constexpr float kMaxAdaptive = 1e3f;
constexpr float kPrescaleSumOfSquares = 0x1p64f;  // above: x * 2^floor(log2 a) first
constexpr int64_t kMaxGroup = 1 << 16;
constexpr int64_t kParallelMin = 1 << 16;  // smaller messages: threads cost more than they save
constexpr uint8_t kPoisonedE8m0 = 0xFF;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline float to_float(float v) { return v; }
inline float to_float(bf16 v) { return bf16_to_float(v); }

inline void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

void check_spec(const Fp8GroupSpec& s) {
  TACO_CHECK(s.rows >= 0 && s.cols >= 0, "negative message shape");
  TACO_CHECK(s.group >= 0 && s.group <= kMaxGroup, "group size out of range");
  TACO_CHECK(!s.hadamard || (s.group > 0 && (s.group & (s.group - 1)) == 0),
             "the Hadamard transform needs a power-of-two group");
}

// Where group g lives: n elements at base, base + stride, ...
struct GroupRef {
  int64_t base;
  int64_t stride;
  int n;
};

GroupRef group_at(const Fp8GroupSpec& s, int64_t g) {
  if (!s.along_tokens) {
    const int64_t per_row = (s.cols + s.group - 1) / s.group;
    const int64_t r = g / per_row, j = g % per_row;
    return {r * s.cols + j * s.group, 1, int(std::min(s.group, s.cols - j * s.group))};
  }
  const int64_t rb = g / s.cols, c = g % s.cols;
  return {rb * s.group * s.cols + c, s.cols, int(std::min(s.group, s.rows - rb * s.group))};
}

// tree_sum(x^2) over n values (adjacent partial sums first, kernels/codec_fp8.h); sq is scratch
// of next_pow2(n). Each stage packs its sums to the front: sq[i] = sq[2i] + sq[2i + 1].
float sum_of_squares(const float* v, int n, float* sq) {
  const int p = int(next_pow2(n));
  for (int i = 0; i < n; ++i) sq[i] = v[i] * v[i];
  for (int i = n; i < p; ++i) sq[i] = 0.f;
  for (int len = p; len > 1; len /= 2) {
    for (int i = 0; i < len / 2; ++i) sq[i] = sq[2 * i] + sq[2 * i + 1];
  }
  return sq[0];
}

// a = clamp(fp8_max / sqrt(ss / n + lambda), 1e-3, 1e3).
float adaptive_scale(float ss, int n, float target) {
  const float a = target / std::sqrt(ss / float(n) + kLambda);
  return std::min(std::max(a, kMinAdaptive), kMaxAdaptive);
}

// Exponent e of the power of two 2^e <= a (a > 0, normal).
int floor_log2(float a) {
  int ex;
  std::frexp(a, &ex);
  return ex - 1;
}

// Smallest k with m <= target * 2^k (m > 0, finite).
int e8m0_exponent(float m, float target) {
  int em, et;
  const float fm = std::frexp(m, &em), ft = std::frexp(target, &et);
  return em - et + (fm > ft ? 1 : 0);
}

// Maps a group's values y to codes, given m = max|y| (fp8_block, fp8_tensor).
struct Quantizer {
  Fp8Format format;
  bool pow2 = false;
  float q = 0.f;                // dual/single: code = fp8(y / q)
  float s_k = 1.f, s_ea = 1.f;  // e8m0: code = fp8((y * 2^-k) * 2^-ea)
  int k = 0;                    // e8m0: the stored exponent

  uint8_t operator()(float y) const {
    if (pow2) return reference_float_to_fp8((y * s_k) * s_ea, format);
    return q > 0.f ? reference_float_to_fp8(y / q, format) : uint8_t(0);
  }
};

// `ea`: log2 of the power-of-two adaptive scale (e8m0 only).
Quantizer make_quantizer(float m, int ea, const Fp8GroupSpec& s) {
  Quantizer qz{s.format};
  const float target = fp8_max(s.format);
  if (s.scales != Fp8Scales::e8m0) {
    qz.q = m / target;
    return qz;
  }
  qz.pow2 = true;
  const int kq = m > 0.f ? e8m0_exponent(m, target) : ea;
  qz.k = std::clamp(kq - ea, -127, 127);
  qz.s_k = std::ldexp(1.f, -qz.k);
  qz.s_ea = std::ldexp(1.f, -ea);
  return qz;
}

// taco's quantizer (kernels/codec_fp8.h): maps the butterflies' outputs u, whose scaled values
// y = c * u the scales describe, to codes with one multiply by f; where f is not a normal float
// (a group of tiny values), through y itself as fp8_block does.
struct TacoQuantizer {
  Quantizer y;  // q / k of y = c * u
  float c = 1.f, f = 0.f;
  bool multiply = false;

  uint8_t operator()(float u) const {
    return multiply ? reference_float_to_fp8(u * f, y.format) : y(u * c);
  }
};

TacoQuantizer make_taco_quantizer(float mu, float c, int ea, const Fp8GroupSpec& s) {
  TacoQuantizer t{make_quantizer(c * mu, ea, s), c};
  if (s.scales != Fp8Scales::e8m0) {
    if (t.y.q > 0.f) t.f = c * (1.f / t.y.q);
  } else {
    t.f = (c * t.y.s_k) * t.y.s_ea;
  }
  t.multiply = std::isnormal(t.f);
  return t;
}

float absmax(const float* v, int n) {
  float m = 0.f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(v[i]));
  return m;
}

void write_scales(uint8_t* scales, int64_t g, int64_t num_groups, const Fp8GroupSpec& s,
                  const Quantizer& qz, float a) {
  switch (s.scales) {
    case Fp8Scales::dual:
      put_f32(scales + 4 * g, qz.q);
      put_f32(scales + 4 * (num_groups + g), a);
      break;
    case Fp8Scales::single:
      put_f32(scales + 4 * g, qz.q / a);
      break;
    case Fp8Scales::e8m0:
      scales[g] = uint8_t(qz.k + 127);
      break;
  }
}

void write_poisoned_scales(uint8_t* scales, int64_t g, int64_t num_groups, Fp8Scales mode) {
  switch (mode) {
    case Fp8Scales::dual:
      put_f32(scales + 4 * g, kNaN);
      put_f32(scales + 4 * (num_groups + g), kNaN);
      break;
    case Fp8Scales::single:
      put_f32(scales + 4 * g, kNaN);
      break;
    case Fp8Scales::e8m0:
      scales[g] = kPoisonedE8m0;
      break;
  }
}

// One finite group in v[0, n) (overwritten); writes its codes and scales.
void encode_group(float* v, float* scratch, const GroupRef& grp, int64_t g, int64_t num_groups,
                  const Fp8GroupSpec& s, uint8_t* codes, uint8_t* scales) {
  if (!s.hadamard) {
    const Quantizer qz = make_quantizer(absmax(v, grp.n), 0, s);
    for (int i = 0; i < grp.n; ++i) codes[grp.base + i * grp.stride] = qz(v[i]);
    write_scales(scales, g, num_groups, s, qz, 1.f);
    return;
  }
  const float target = fp8_max(s.format);
  const float ss = sum_of_squares(v, grp.n, scratch);
  float a = adaptive_scale(ss, grp.n, target);
  int ea = 0;
  if (s.scales == Fp8Scales::e8m0) {
    ea = floor_log2(a);
    a = std::ldexp(1.f, ea);
  }
  const int e = ss <= kPrescaleSumOfSquares ? 0 : floor_log2(a);
  if (e != 0) {
    const float p = std::ldexp(1.f, e);
    for (int i = 0; i < grp.n; ++i) v[i] *= p;
  }
  const bool full = grp.n == s.group;
  if (full) hadamard_butterflies(v, grp.n);
  const float c = std::ldexp(a, -e) * (full ? hadamard_scale(grp.n) : 1.f);
  const TacoQuantizer qz = make_taco_quantizer(absmax(v, grp.n), c, ea, s);
  for (int i = 0; i < grp.n; ++i) codes[grp.base + i * grp.stride] = qz(v[i]);
  write_scales(scales, g, num_groups, s, qz.y, a);
}

// group == 0: one scale for the whole message, no transform.
template <class T>
Fp8EncodeCounts encode_whole(const T* x, const Fp8GroupSpec& s, uint8_t* codes, uint8_t* scales) {
  const int64_t n = s.count();
  float m = 0.f;
  int64_t bad = 0;
#pragma omp parallel for reduction(max : m) reduction(+ : bad) schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float v = to_float(x[i]);
    if (std::isfinite(v)) {
      m = std::max(m, std::fabs(v));
    } else {
      ++bad;
    }
  }
  if (bad) {
    std::memset(codes, 0, size_t(n));
    write_poisoned_scales(scales, 0, 1, s.scales);
    return {bad, 1};
  }
  const Quantizer qz = make_quantizer(m, 0, s);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) codes[i] = qz(to_float(x[i]));
  write_scales(scales, 0, 1, s, qz, 1.f);
  return {};
}

template <class T>
Fp8EncodeCounts encode_impl(const T* x, const Fp8GroupSpec& s, uint8_t* codes, uint8_t* scales) {
  check_spec(s);
  if (s.count() == 0) return {};
  if (s.group == 0) return encode_whole(x, s, codes, scales);
  const int64_t num_groups = s.num_groups();
  const int64_t p = next_pow2(s.group);
  int64_t bad_values = 0, bad_groups = 0;
#pragma omp parallel reduction(+ : bad_values, bad_groups) if (s.count() >= kParallelMin)
  {
    std::vector<float> v(static_cast<size_t>(p)), scratch(static_cast<size_t>(p));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < num_groups; ++g) {
      const GroupRef grp = group_at(s, g);
      int bad = 0;
      for (int i = 0; i < grp.n; ++i) {
        v[i] = to_float(x[grp.base + i * grp.stride]);
        bad += !std::isfinite(v[i]);
      }
      if (bad) {
        for (int i = 0; i < grp.n; ++i) codes[grp.base + i * grp.stride] = 0;
        write_poisoned_scales(scales, g, num_groups, s.scales);
        bad_values += bad;
        ++bad_groups;
        continue;
      }
      encode_group(v.data(), scratch.data(), grp, g, num_groups, s, codes, scales);
    }
  }
  return {bad_values, bad_groups};
}

// A group's decode scales; poisoned when the encoder saw a non-finite input.
struct DecodeScale {
  float mul = 1.f;  // fp8 value * mul
  float a = 1.f;    // dual: then divide by a after the transform
  bool poisoned = false;
};

DecodeScale read_scale(const uint8_t* scales, int64_t g, int64_t num_groups, Fp8Scales mode) {
  DecodeScale d;
  switch (mode) {
    case Fp8Scales::dual:
      d.mul = get_f32(scales + 4 * g);
      d.a = get_f32(scales + 4 * (num_groups + g));
      d.poisoned = std::isnan(d.mul) || std::isnan(d.a);
      break;
    case Fp8Scales::single:
      d.mul = get_f32(scales + 4 * g);
      d.poisoned = std::isnan(d.mul);
      break;
    case Fp8Scales::e8m0:
      d.poisoned = scales[g] == kPoisonedE8m0;
      d.mul = std::ldexp(1.f, int(scales[g]) - 127);
      break;
  }
  return d;
}

// A taco decode factor that lost precision: subnormal, or 0 from a non-zero scale.
bool tiny_factor(float mul, float q) {
  return std::fpclassify(mul) == FP_SUBNORMAL || (mul == 0.f && q != 0.f);
}

// The decode count's rule (kernels/codec_fp8.h): where the largest magnitude a group's finite
// codes can give, computed in fp32, reaches 2^127 (and in taco's stepwise path), the group counts
// when one of its outputs, in the output type, is NaN or Inf.
bool may_overflow(float m, float abs_a) { return !(m < 0x1p127f * abs_a); }

struct StoreF32 {
  float* out;
  void operator()(int64_t i, float v) const { out[i] = v; }
  bool nonfinite(float v) const { return !std::isfinite(v); }
};
struct AccumulateF32 {
  float* out;
  void operator()(int64_t i, float v) const { out[i] = out[i] + v; }
  bool nonfinite(float v) const { return !std::isfinite(v); }  // the decoded value it adds
};
struct StoreBf16 {
  bf16* out;
  void operator()(int64_t i, float v) const { out[i] = float_to_bf16(v); }
  bool nonfinite(float v) const { return !std::isfinite(bf16_to_float(float_to_bf16(v))); }
};

template <class Store>
int64_t decode_impl(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& s,
                    Store store) {
  check_spec(s);
  if (s.count() == 0) return 0;
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = reference_fp8_to_float(uint8_t(c), s.format);
  const int64_t num_groups = s.num_groups();

  if (s.group == 0) {
    const DecodeScale d = read_scale(scales, 0, 1, s.scales);
    const int64_t n = s.count();
    const bool check =
        !d.poisoned && may_overflow(fp8_max(s.format) * std::fabs(d.mul), std::fabs(d.a));
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float v = d.poisoned ? kNaN : table[codes[i]] * d.mul / d.a;
      store(i, v);
      bad |= int(check && store.nonfinite(v));
    }
    return d.poisoned || bad ? 1 : 0;
  }

  const int64_t p = next_pow2(s.group);
  int64_t counted = 0;  // poisoned groups and overflowing ones
#pragma omp parallel reduction(+ : counted) if (s.count() >= kParallelMin)
  {
    std::vector<float> v(static_cast<size_t>(p));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < num_groups; ++g) {
      const GroupRef grp = group_at(s, g);
      const DecodeScale d = read_scale(scales, g, num_groups, s.scales);
      if (d.poisoned) {
        for (int i = 0; i < grp.n; ++i) store(grp.base + i * grp.stride, kNaN);
        ++counted;
        continue;
      }
      if (s.hadamard) {  // x = butterflies(fp8 values) * (mul * h [/ a])
        const bool full = grp.n == s.group;
        const float h = full ? hadamard_scale(grp.n) : 1.f;
        const bool dual = s.scales == Fp8Scales::dual;
        const float mul = dual ? d.mul * (h / d.a) : d.mul * h;
        for (int i = 0; i < grp.n; ++i) v[i] = table[codes[grp.base + i * grp.stride]];
        if (full) hadamard_butterflies(v.data(), grp.n);
        const float bound = float(full ? grp.n : 1) * fp8_max(s.format) * std::fabs(mul);
        const bool tiny = tiny_factor(mul, d.mul);
        bool bad = false;
        if (tiny) {  // scale in steps, so that only the result rounds tiny
          for (int i = 0; i < grp.n; ++i) {
            const float y = (v[i] * d.mul) * h;
            store(grp.base + i * grp.stride, dual ? y / d.a : y);
            bad = bad || store.nonfinite(dual ? y / d.a : y);
          }
        } else {
          for (int i = 0; i < grp.n; ++i) {
            store(grp.base + i * grp.stride, v[i] * mul);
            bad = bad || store.nonfinite(v[i] * mul);
          }
        }
        counted += (tiny || may_overflow(bound, 1.f)) && bad;
        continue;
      }
      for (int i = 0; i < grp.n; ++i) v[i] = table[codes[grp.base + i * grp.stride]] * d.mul;
      if (s.scales == Fp8Scales::dual) {
        for (int i = 0; i < grp.n; ++i) v[i] = v[i] / d.a;
      }
      bool bad = false;
      for (int i = 0; i < grp.n; ++i) {
        store(grp.base + i * grp.stride, v[i]);
        bad = bad || store.nonfinite(v[i]);
      }
      counted += may_overflow(fp8_max(s.format) * std::fabs(d.mul), std::fabs(d.a)) && bad;
    }
  }
  return counted;
}

}  // namespace

Fp8EncodeCounts fp8_group_encode(const float* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

Fp8EncodeCounts fp8_group_encode(const bf16* x, const Fp8GroupSpec& spec, uint8_t* codes,
                                 uint8_t* scales) {
  return encode_impl(x, spec, codes, scales);
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         float* out, bool accumulate) {
  if (accumulate) return decode_impl(codes, scales, spec, AccumulateF32{out});
  return decode_impl(codes, scales, spec, StoreF32{out});
}

int64_t fp8_group_decode(const uint8_t* codes, const uint8_t* scales, const Fp8GroupSpec& spec,
                         bf16* out) {
  return decode_impl(codes, scales, spec, StoreBf16{out});
}

}  // namespace taco::cpu::reference
