#pragma once
// Exact float32 <-> float16 / bfloat16 conversions (round to nearest even), written once so that
// the CPU and CUDA backends produce bit-identical parameters and dequantized values.
#include <cstdint>
#include <cstring>

#include "../config.hpp"
#include "../dtype.hpp"

namespace octopt {

OCTOPT_HD std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

OCTOPT_HD float bits_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The one NaN octopt stores (DESIGN.md, Numerics): a NaN made by arithmetic carries whatever sign and
// payload the hardware gives it (x86 SSE: 0xFFC00000 for an invalid operation, NVIDIA GPUs:
// 0x7FFFFFFF), so every store of a computed value replaces any NaN by the quiet NaN 0x7FC00000
// (bfloat16 0x7FC0, float16 0x7E00) and parameters, states and block scales agree bit for bit.
inline constexpr std::uint32_t kCanonicalNanF32 = 0x7fc00000u;
inline constexpr std::uint16_t kCanonicalNanBF16 = 0x7fc0u;
inline constexpr std::uint16_t kCanonicalNanF16 = 0x7e00u;

OCTOPT_HD float canonical_nan(float x) { return x != x ? bits_f32(kCanonicalNanF32) : x; }

OCTOPT_HD float bf16_to_f32(std::uint16_t h) { return bits_f32(std::uint32_t(h) << 16); }

OCTOPT_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kCanonicalNanBF16;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return std::uint16_t(u >> 16);
}

OCTOPT_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24 is exact in float32
    const float v = float(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

OCTOPT_HD std::uint16_t f32_to_f16(float f) {
  std::uint32_t u = f32_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return kCanonicalNanF16;
  if (u == 0x7f800000u) return std::uint16_t(sign | 0x7c00u);
  // 65520 is the midpoint between the largest half (65504) and 2^16; the tie rounds to even, i.e. to inf.
  if (u >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);
  if (u < 0x38800000u) {
    // Result is subnormal (or zero): adding 0.5 aligns the value to a 2^-24 grid, and the float
    // adder's own round-to-nearest-even does the rounding.
    const float aligned = bits_f32(u) + 0.5f;
    return std::uint16_t(sign | (f32_bits(aligned) - 0x3f000000u));
  }
  const std::uint32_t mant_odd = (u >> 13) & 1u;
  u += 0xc8000fffu + mant_odd;  // rebias the exponent (-112 << 23) and add the rounding bias
  return std::uint16_t(sign | (u >> 13));
}

template <DType D>
OCTOPT_HD float load_f32(const void* p, std::int64_t i) {
  if constexpr (D == DType::f32)
    return static_cast<const float*>(p)[i];
  else if constexpr (D == DType::f16)
    return f16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
  else
    return bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]);
}

template <DType D>
OCTOPT_HD void store_f32(void* p, std::int64_t i, float v) {
  if constexpr (D == DType::f32)
    static_cast<float*>(p)[i] = canonical_nan(v);
  else if constexpr (D == DType::f16)
    static_cast<std::uint16_t*>(p)[i] = f32_to_f16(v);
  else
    static_cast<std::uint16_t*>(p)[i] = f32_to_bf16(v);
}

// optax's updates from a step taken on a copy of the parameters: out[i] holds p_new and becomes
// p_new - p[i], evaluated in float32 and rounded once to the parameter's dtype (exact whenever p_new
// and p are within a factor of two of each other: Sterbenz). The XLA handlers' updates mode, CPU and
// CUDA alike.
template <DType D>
OCTOPT_HD void update_from_params(void* out, const void* p, std::int64_t i) {
  store_f32<D>(out, i, load_f32<D>(out, i) - load_f32<D>(p, i));
}

}  // namespace octopt

namespace octopt {

// bfloat16 with stochastic rounding: adding 16 random low bits before truncation rounds up with
// probability equal to the discarded fraction. Non-finite values round to nearest.
OCTOPT_HD std::uint16_t f32_to_bf16_stochastic(float f, std::uint32_t random16) {
  const std::uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f32_to_bf16(f);
  const std::uint32_t r = u + (random16 & 0xffffu);
  // rounding the largest finite values up must not produce Inf
  if ((r & 0x7f800000u) == 0x7f800000u) return std::uint16_t(u >> 16);
  return std::uint16_t(r >> 16);
}

}  // namespace octopt
