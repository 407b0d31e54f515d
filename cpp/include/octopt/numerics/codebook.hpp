#pragma once
// A quantization map prepared for encoding: values plus the exact decision thresholds between
// neighbours. Plain data, so it can be passed by value to a CUDA kernel or copied to shared memory.
#include <cstdint>

#include "../config.hpp"
#include "percentile.hpp"
#include "rng.hpp"

namespace octopt {

struct Codebook {
  float values[256];      // the map, ascending (non-decreasing), in [-1, 1]
  float thresholds[256];  // thresholds[k]: smallest float strictly above the exact midpoint of values[k], values[k+1]
                          // (when values[k] == values[k+1]: thresholds[k+1], so ties keep the lower index)
  std::int32_t size;      // 2^bits entries in use (16 or 256)
  std::int32_t first_nonneg;      // first index with values[i] >= 0, or size if none
  std::int32_t last_nonpos;       // index of the largest value <= 0 (the first of equal ones), or -1 if none
  std::int32_t zero_lo, zero_hi;  // indices of the entries equal to 0 (zero_lo > zero_hi if none)
  // >= 0: a positive value never gets a zero code but this one (the first positive entry). Set for
  // second-moment states: a v quantized to zero beside a nonzero m makes the step m / eps (the
  // zero-point problem, Li et al., NeurIPS 2023). -1: plain nearest rounding.
  std::int32_t nonzero_floor;
};

// A signed code never flips the sign of a nonzero value: when the nearest entry has the other
// sign (only possible for maps without zero), take the closest entry on the value's own side.
OCTOPT_HD int keep_sign(const Codebook& cb, float r, int c) {
  if (r > 0.0f && cb.values[c] < 0.0f && cb.first_nonneg < cb.size) return cb.first_nonneg;
  if (r < 0.0f && cb.values[c] > 0.0f && cb.last_nonpos >= 0) return cb.last_nonpos;
  if (cb.nonzero_floor >= 0 && r > 0.0f && c >= cb.zero_lo && c <= cb.zero_hi) return cb.nonzero_floor;
  return c;
}

// The number of thresholds <= r, by a branch-free binary search over size-1 thresholds: the
// nearest code before the sign rule and the zero floor. SIZE: the map size when known at compile time.
template <int SIZE = 0>
OCTOPT_HD int search_code(const Codebook& cb, float r) {
  const int size = SIZE ? SIZE : cb.size;
  int c = 0;
  for (int step = size >> 1; step > 0; step >>= 1) {
    // masks, not a branch: r is unpredictable, and unrolled code tempts compilers into jumps
    c += step & -static_cast<int>(cb.thresholds[c + step - 1] <= r);
  }
  return c;
}

// Index of the nearest map value to r; ties go to the lower index. r is finite.
OCTOPT_HD int nearest_code(const Codebook& cb, float r) { return keep_sign(cb, r, search_code(cb, r)); }

// Stochastic rounding between the two neighbours that bracket r, rounding up with probability
// proportional to the distance from the lower one (unbiased inside the map's range): up where
// u * (vhi - vlo) < r - vlo, u uniform in [0, 1) on a 2^-24 grid.
OCTOPT_HD int stochastic_code(const Codebook& cb, float r, float u) {
  // lo = number of values <= r, minus one
  int cnt = 0;
  for (int step = cb.size >> 1; step > 0; step >>= 1) {
    cnt = cb.values[cnt + step - 1] <= r ? cnt + step : cnt;
  }
  if (cnt < cb.size && cb.values[cnt] <= r) ++cnt;  // the search above inspects at most size-1 entries
  int c;
  if (cnt == 0) {
    c = 0;
  } else if (cnt == cb.size) {
    c = cb.size - 1;
  } else {
    const int lo = cnt - 1;
    const float vlo = cb.values[lo];
    const float vhi = cb.values[cnt];
    // u < (r - vlo) / (vhi - vlo) without the division: the same probability up to the 2^-24 grid of u
    c = (u * (vhi - vlo) < r - vlo) ? cnt : lo;
  }
  return keep_sign(cb, r, c);
}

// IEEE float32 division and product, also where a CUDA build would be allowed to approximate.
OCTOPT_HD float ieee_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
OCTOPT_HD float ieee_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The code of v in a block whose scale is `div` (> 0): r = v / div, clipped to [-1, 1] under
// percentile scaling, then the nearest code, or a stochastic one drawn with uniform01(key, index).
// The per-element form of what the CPU's vector encoders compute many lanes at a time.
OCTOPT_HD int encode_value(const Codebook& cb, float v, float div, bool clip, bool stochastic, std::uint64_t key,
                           std::int64_t index) {
  float r = ieee_div(v, div);
  if (clip) r = percentile_clip(r);
  return stochastic ? stochastic_code(cb, r, uniform01(key, std::uint64_t(index))) : nearest_code(cb, r);
}

// The value of code c in a block of absmax `scale`.
OCTOPT_HD float decode_value(const Codebook& cb, int c, float scale) { return ieee_mul(cb.values[c], scale); }

// Code of element k of a block-wise code array of `bits` (8: one per byte; 4: two per byte, the
// even element in the low nibble).
OCTOPT_HD int code_at(const std::uint8_t* codes, std::int64_t k, int bits) {
  if (bits == 8) return codes[k];
  const std::uint8_t byte = codes[k >> 1];
  return (k & 1) ? (byte >> 4) : (byte & 0x0f);
}

OCTOPT_HD bool is_finite_abs(float absval) { return absval <= 3.402823466e+38f; }

}  // namespace octopt
