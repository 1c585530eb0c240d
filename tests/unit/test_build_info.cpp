// The element types every layer shares: bf16 rounding must match CUDA's __float2bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/runtime/device.h"
#include "kernels/dtype.h"

using taco::bf16_to_float;
using taco::float_to_bf16;

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 lies between 1 + 2^-7 and 1 + 2^-6 exactly: ties go to even (1 + 2^-6).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Just above the tie rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))),
            1.0f + std::ldexp(1.0f, -7));
}

TEST(DType, Bf16KeepsNonFinite) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(taco::dtype_size(taco::DType::bf16), 2u);
  EXPECT_EQ(taco::dtype_size(taco::DType::f32), 4u);
  EXPECT_STREQ(taco::dtype_name(taco::DType::bf16), "bf16");
}

TEST(Device, CpuSelectedWhenGpuNotWanted) {
  auto info = taco::select_device(false, 0);
  EXPECT_EQ(info.kind, taco::DeviceKind::cpu);
  EXPECT_GE(taco::cuda_device_count(), 0);
}
