#pragma once
// CPU load/store of one block of optimizer state (32-bit floats or 8-/4-bit codes).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "octopt/numerics/codebook.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/optim.hpp"

namespace octopt::detail {

inline void load_state_block(const StateBuffer& st, const Codebook* cbs, std::int64_t b, std::int64_t i0, int len,
                             float* out) {
  if (st.bits == 32) {
    std::memcpy(out, static_cast<const float*>(st.data) + i0, sizeof(float) * std::size_t(len));
    return;
  }
  const Codebook& cb = cbs[st.codebook];
  const float a = st.absmax[b];
  const auto* codes = static_cast<const std::uint8_t*>(st.data);
  if (st.bits == 8) {
    for (int i = 0; i < len; ++i) out[i] = cb.values[codes[i0 + i]] * a;
  } else {
    const std::uint8_t* c = codes + i0 / 2;
    for (int i = 0; i < len; ++i) out[i] = cb.values[(i & 1) ? (c[i >> 1] >> 4) : (c[i >> 1] & 0x0f)] * a;
  }
}

// The block scale: max |x|, or with percentile q in (0, 100) the q-th percentile of |x|.
inline float block_scale(const float* v, int len, float percentile, float* scratch) {
  if (percentile > 0.0f && percentile < 100.0f && len > 1) {
    for (int i = 0; i < len; ++i) scratch[i] = std::fabs(v[i]);
    const int k = std::clamp(int(std::ceil(double(percentile) / 100.0 * len)) - 1, 0, len - 1);
    std::nth_element(scratch, scratch + k, scratch + len);
    return scratch[k];
  }
  float m = 0.0f;
  for (int i = 0; i < len; ++i) m = nan_max(m, std::fabs(v[i]));
  return m;
}

// Writes a block back: new absmax (or percentile scale) first, then codes against it.
inline void store_state_block(const StateBuffer& st, const Codebook* cbs, std::int64_t b, std::int64_t i0, int len,
                              const float* v, float percentile, bool stochastic, std::uint64_t key,
                              float* scratch) {
  if (st.bits == 32) {
    std::memcpy(static_cast<float*>(st.data) + i0, v, sizeof(float) * std::size_t(len));
    return;
  }
  const Codebook& cb = cbs[st.codebook];
  const float scale = block_scale(v, len, percentile, scratch);
  st.absmax[b] = scale;
  const float div = scale > 0.0f ? scale : 1.0f;
  const bool clip = percentile > 0.0f && percentile < 100.0f;
  auto code_of = [&](int i) -> std::uint8_t {
    float r = v[i] / div;
    if (clip) r = std::clamp(r, -1.0f, 1.0f);
    return std::uint8_t(stochastic ? stochastic_code(cb, r, uniform01(key, std::uint64_t(i0 + i))) : nearest_code(cb, r));
  };
  auto* codes = static_cast<std::uint8_t*>(st.data);
  if (st.bits == 8) {
    for (int i = 0; i < len; ++i) codes[i0 + i] = code_of(i);
  } else {
    std::uint8_t* c = codes + i0 / 2;
    for (int i = 0; i < len; i += 2) {
      const std::uint8_t lo = code_of(i);
      const std::uint8_t hi = i + 1 < len ? code_of(i + 1) : std::uint8_t(0);
      c[i / 2] = std::uint8_t(lo | (hi << 4));
    }
  }
}

}  // namespace octopt::detail
