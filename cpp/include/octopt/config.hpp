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

// The CUDA stream type, declared without including CUDA headers: the same type as the runtime's
// own `typedef struct CUstream_st* cudaStream_t`, so both may be seen in one translation unit.
struct CUstream_st;

namespace octopt {

using cudaStream_t = ::CUstream_st*;

// The optimizers of the fused step. New kinds go at the end: the values are stored (state files,
// the XLA handlers' `kind` attribute) and must keep their numbers.
enum class OptimKind : std::uint8_t {
  adam = 0,
  adamw,
  sgd,
  rmsprop,
  adagrad,
  lion,
  ademamix,
  lamb,
  lars,
  radam,
  nadam
};
inline constexpr int kNumOptimKinds = 11;

}  // namespace octopt
