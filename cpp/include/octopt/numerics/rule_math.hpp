#pragma once
// The float operations the update rules (rules/*.hpp) share, written once for host and device.
#include <cmath>

#include "../config.hpp"

namespace octopt {

OCTOPT_HD float rule_sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// torch's lerp: a + w (b - a) for w < 0.5, else b - (b - a)(1 - w).
OCTOPT_HD float rule_lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

// a * b + c rounded once (correctly rounded on every backend, so bit-identical; Muon: torch's vectorized CPU lerp
// and add_ are fused)
OCTOPT_HD float rule_fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

OCTOPT_HD float rule_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

OCTOPT_HD double scalar_min(double a, double b) { return b < a ? b : a; }  // std::min's choice on ties

}  // namespace octopt
