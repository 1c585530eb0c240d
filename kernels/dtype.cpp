#include "kernels/dtype.h"

namespace taco {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "fp32";
    case DType::bf16:
      return "bf16";
    case DType::u8:
      return "bytes";
    case DType::i32:
      return "int32";
    case DType::u16:
      return "uint16";
    case DType::f64:
      return "fp64";
  }
  return "?";
}

}  // namespace taco
