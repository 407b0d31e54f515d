#pragma once
// Per-element math is written once and compiled for both host and device.
#if defined(__CUDACC__)
#define OCTOPT_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__)
// always inlined, so that the per-instruction-set CPU kernels get the code in their own ISA
#define OCTOPT_HD inline __attribute__((always_inline))
#else
#define OCTOPT_HD inline
#endif

#include <cstdint>

#include "numerics/optim_list.hpp"

// The CUDA stream type, declared without including CUDA headers: the same type as the runtime's
// own `typedef struct CUstream_st* cudaStream_t`, so both may be seen in one translation unit.
struct CUstream_st;

namespace octopt {

using cudaStream_t = ::CUstream_st*;

// The optimizers of the fused step, from the list in numerics/optim_list.hpp (stored numbers: new kinds go at the
// end of that list).
enum class OptimKind : std::uint8_t {
#define OCTOPT_KIND_ENUMERATOR(name) name,
  OCTOPT_OPTIMIZERS(OCTOPT_KIND_ENUMERATOR)
#undef OCTOPT_KIND_ENUMERATOR
};
#define OCTOPT_KIND_COUNT(name) +1
inline constexpr int kNumOptimKinds = 0 OCTOPT_OPTIMIZERS(OCTOPT_KIND_COUNT);
#undef OCTOPT_KIND_COUNT
// The numbers files and the XLA handlers store must not move.
static_assert(int(OptimKind::adam) == 0 && int(OptimKind::sgd) == 2 && int(OptimKind::ademamix) == 6 &&
                  int(OptimKind::nadam) == 10,
              "optim_list.hpp: optimizers keep their numbers; add new ones at the end");

// The most state buffers (slots s[0], s[1], ...) an optimizer may have: the width of every per-tensor state array.
// Adan has four (m, n, the gradient-difference EMA and the previous gradient).
inline constexpr int kMaxStateSlots = 4;

}  // namespace octopt
