#pragma once
#include <cstddef>
#include <cstdint>

namespace octopt {

// Element types of parameters, gradients and (de)quantized tensors.
enum class DType : std::uint8_t { f32 = 0, f16 = 1, bf16 = 2 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
  }
  return "unknown";
}

inline std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

}  // namespace octopt
