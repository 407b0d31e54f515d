#pragma once
// CPU kernels over block ranges, compiled once per instruction set (kernels_impl.cpp) and chosen
// at run time. Every variant computes bit-identical results: no FMA contraction, IEEE division
// and square root, and exact (not approximate) code search.
#include <cstdint>

#include "octopt/blockwise.hpp"
#include "octopt/optim.hpp"

namespace octopt::cpu {

enum class OptimPhase { single, norms, apply };

struct OptimBuffers;  // per-thread scratch, defined in kernels_impl.cpp

using OptimBlockFn = std::int64_t (*)(const StepConfig& cfg, const StepTensor& slot, std::int64_t b0, std::int64_t b1,
                                      OptimPhase phase, double* norms);

struct Kernels {
  const char* name;
  // Blocks [b0, b1): returns the number of blocks whose input holds NaN/Inf.
  std::int64_t (*quantize)(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size, int bits,
                           Rounding rounding, std::uint64_t key, std::uint8_t* codes, float* absmax, std::int64_t b0,
                           std::int64_t b1);
  void (*dequantize)(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb, int block_size,
                     int bits, DType out_dtype, void* out, std::int64_t b0, std::int64_t b1);
  OptimBlockFn (*select_optim)(OptimKind kind, DType param, DType grad);
  // Blocks [b0, b1) of a gradient: how many hold NaN/Inf.
  std::int64_t (*count_nonfinite)(const void* g, DType dtype, std::int64_t n, int block_size, std::int64_t b0,
                                  std::int64_t b1);
  bool vbmi;  // 8-bit codes are decoded with AVX-512 VBMI byte tables
};

const Kernels& kernels_baseline();
const Kernels& kernels_avx2();        // only on x86-64 builds
const Kernels& kernels_avx512();      // only on x86-64 builds
const Kernels& kernels_avx512vbmi();  // only on x86-64 builds: kernels_avx512 with VBMI decoding
const Kernels& kernels_neon();        // only on aarch64 builds

// The variant in use: OCTOPT_ISA=baseline|avx2|avx512|avx512vbmi|neon when set (and supported), else the best
// the CPU supports. Throws std::invalid_argument for a forced variant the CPU cannot run.
const Kernels& active();
// Forces a variant by name ("" = the start-up choice: OCTOPT_ISA when set, else automatic); used by
// tests to compare every path.
void set_isa(const char* name);

}  // namespace octopt::cpu
