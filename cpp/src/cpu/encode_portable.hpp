#pragma once
// The encoders of the portable kernels (the baseline build, and the parts of the NEON build that have no
// NEON-specific form): the closed form (closed_form.hpp) and the 16-entry maps in plain C++, written for the
// compiler's vectorizer (GCC and Clang, -O3): fixed-width loops over small arrays of lanes, stage by stage,
// selects instead of branches, and the rare lanes the formula cannot settle handed to the exact search out
// of line. No intrinsics: what the target cannot vectorize (the table lookups on SSE2) stays scalar.
// Included by encode.hpp inside its ISA namespace (its headers come first, there).
constexpr int kPortableLanes = 16;

// Whether fmaf is one instruction here (aarch64, x86 with -mfma): then x = fma(|r|, A, B) is computed
// exactly as the tables were built and the closed form's margin is the tables' width. Without it (the
// x86-64 baseline: SSE2) x = |r| * A + B in two roundings, which differs from the fused result by less
// than 2^-12 (|r| * A and x stay below 2^11 where the formula decides: each rounding is then within
// 2^-13); the lanes within kNoFmaMargin of an integer go to the search, so the formula still decides only
// where its fused value would have decided the same code.
#if defined(__FP_FAST_FMAF) || defined(__aarch64__)
constexpr bool kFusedMultiplyAdd = true;
#else
constexpr bool kFusedMultiplyAdd = false;
#endif
constexpr float kNoFmaMargin = 4.8828125e-4f;  // 2^-11
constexpr float kNoFmaLimit = 2048.0f;         // |r| * A and x beyond it go to the search

// The closed form on kPortableLanes values r (|r| < 2): the codes, per lane whether it is unsure (its code
// must come from the search), and whether any is. Stage by stage over the lanes, each stage a loop the
// vectorizer takes.
inline bool closed_form_lanes(const ClosedForm& cf, const float* __restrict r, std::int32_t* __restrict code,
                              std::int32_t* __restrict unsure_lane) {
  constexpr int N = kPortableLanes;
  float a[N], x[N], d[N];
  std::int32_t bin[N], run[N];
  for (int l = 0; l < N; ++l) {
    a[l] = __builtin_fabsf(r[l]);
    // the biased exponent / 2 less kBinBias / 2, in [0, kBins - 1] (NaN: the top bin; the lane is unsure anyway)
    std::int32_t h = std::int32_t(f32_bits(a[l]) >> 24) - kBinBias / 2;
    h = h < 0 ? 0 : h;
    h = h > kBins - 1 ? kBins - 1 : h;
    bin[l] = h + (r[l] <= 0.0f ? kBins : 0);
  }
  for (int l = 0; l < N; ++l) run[l] = cf.run[bin[l]] + (a[l] >= cf.up[bin[l]] ? 1 : 0);
  float prod[N];  // |r| * A without a fused multiply-add (its size bounds the rounding error)
  if constexpr (kFusedMultiplyAdd) {
    for (int l = 0; l < N; ++l) x[l] = __builtin_fmaf(a[l], cf.A[run[l]], cf.B[run[l]]);
    for (int l = 0; l < N; ++l) prod[l] = 0.0f;
  } else {
    for (int l = 0; l < N; ++l) {
      prod[l] = a[l] * cf.A[run[l]];
      x[l] = prod[l] + cf.B[run[l]];
    }
  }
  const float lo_margin = kFusedMultiplyAdd ? cf.width : cf.width + kNoFmaMargin;
  const float hi_margin = kFusedMultiplyAdd ? 1.0f : 1.0f - kNoFmaMargin;
  const std::uint32_t limit = f32_bits(kNoFmaLimit), abs = 0x7fffffffu;
  const std::uint32_t lo_bits = f32_bits(lo_margin), hi_bits = f32_bits(hi_margin);
  std::int32_t k[N];
  for (int l = 0; l < N; ++l) {
    // x in [+0, kNoFmaLimit): its integer part and fraction; outside (or NaN), or |r| * A beyond the limit
    // where the margin argument ends, d = 0, i.e. unsure. No table lookups in this loop, and the compares
    // on bit patterns (non-negative floats order as their patterns; NaN patterns lie above the limit's):
    // GCC keeps float compares as branches here (they may trap), integer ones it vectorizes.
    const std::uint32_t in = std::uint32_t(f32_bits(x[l]) < limit) & std::uint32_t((f32_bits(prod[l]) & abs) < limit);
    const float xc = bits_f32(f32_bits(x[l]) & (0u - in));  // x, or +0 outside
    k[l] = std::int32_t(xc);
    d[l] = xc - float(k[l]);  // in [0, 1)
    const std::uint32_t du = f32_bits(d[l]);
    unsure_lane[l] = 1 - (std::int32_t(du >= lo_bits) & std::int32_t(du < hi_bits));
  }
  for (int l = 0; l < N; ++l) {
    const std::int32_t c = k[l] > cf.lo[run[l]] ? k[l] : cf.lo[run[l]];
    code[l] = c < cf.hi[run[l]] ? c : cf.hi[run[l]];
  }
  std::int32_t unsure = 0;
  for (int l = 0; l < N; ++l) unsure |= unsure_lane[l];
  return unsure != 0;
}

// The lanes of one group whose closed form is unsure get the exact search (rare; out of line so that the
// main loop stays small).
__attribute__((noinline)) inline void closed_form_settle_portable(const Codebook& cb, const float* r,
                                                                  const std::int32_t* unsure_lane, std::int32_t* code) {
  for (int l = 0; l < kPortableLanes; ++l)
    if (unsure_lane[l]) code[l] = nearest_code(cb, r[l]);
}

// Nearest codes of a block of a 256-entry map with closed-form tables; |v[i]| <= scale.
inline void encode_block_closed_form_portable(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                                              std::uint8_t* codes) {
  constexpr int N = kPortableLanes;
  const ClosedForm& cf = L.cf;
  float r[N];
  std::int32_t c[N], unsure[N];
  int i = 0;
  for (; i + N <= len; i += N) {
    for (int l = 0; l < N; ++l) r[l] = v[i + l] / scale;
    if (__builtin_expect(closed_form_lanes(cf, r, c, unsure), 0)) closed_form_settle_portable(cb, r, unsure, c);
    for (int l = 0; l < N; ++l) codes[i + l] = std::uint8_t(c[l]);
  }
  if (i < len) {
    for (int l = 0; l < N; ++l) r[l] = i + l < len ? v[i + l] / scale : 0.0f;
    if (closed_form_lanes(cf, r, c, unsure)) closed_form_settle_portable(cb, r, unsure, c);
    for (int l = 0; i + l < len; ++l) codes[i + l] = std::uint8_t(c[l]);
  }
}

// keep_sign on lanes (numerics/codebook.hpp), as selects: the conditions are combined with & (no
// short-circuit) and the sign of values[c] comes from c itself (the values are non-decreasing: values[c] < 0
// iff c < first_nonneg, values[c] > 0 iff c >= first_pos, the number of values <= 0), so that the loop
// vectorizes.
inline std::int32_t keep_sign_lane(const Codebook& cb, std::int32_t first_pos, float r, std::int32_t c) {
  const std::int32_t pos = std::int32_t(r > 0.0f), neg = std::int32_t(r < 0.0f);
  const std::int32_t up = pos & std::int32_t(c < cb.first_nonneg) & std::int32_t(cb.first_nonneg < cb.size);
  const std::int32_t down = neg & std::int32_t(c >= first_pos) & std::int32_t(cb.last_nonpos >= 0);
  c = up ? cb.first_nonneg : c;
  c = down ? cb.last_nonpos : c;
  const std::int32_t floor =
      pos & std::int32_t(cb.nonzero_floor >= 0) & std::int32_t(c >= cb.zero_lo) & std::int32_t(c <= cb.zero_hi);
  return floor ? cb.nonzero_floor : c;
}

// The number of values <= 0 of a 16-entry map (keep_sign_lane's first_pos).
inline std::int32_t first_positive16(const Codebook& cb) {
  std::int32_t n = 0;
  for (int k = 0; k < 16; ++k) n += cb.values[k] <= 0.0f ? 1 : 0;
  return n;
}

// Nearest codes of a block of a 16-entry map: the number of thresholds <= r (the binary search's answer:
// the thresholds are non-decreasing) by 15 compares per lane, then the sign rule and the zero floor.
inline void encode_block16_portable(const Codebook& cb, const float* v, int len, float scale, std::uint8_t* codes) {
  constexpr int N = kPortableLanes;
  float t[15];
  for (int k = 0; k < 15; ++k) t[k] = cb.thresholds[k];
  const std::int32_t first_pos = first_positive16(cb);
  for (int i = 0; i < len; i += N) {
    const int n = len - i < N ? len - i : N;
    float r[N];
    std::int32_t c[N];
    for (int l = 0; l < N; ++l) r[l] = l < n ? v[i + l] / scale : 0.0f;
    // lanes innermost: each threshold is one compare across the 16 lanes
    for (int l = 0; l < N; ++l) c[l] = 0;
    for (int k = 0; k < 15; ++k)
      for (int l = 0; l < N; ++l) c[l] += t[k] <= r[l] ? 1 : 0;
    for (int l = 0; l < N; ++l) c[l] = keep_sign_lane(cb, first_pos, r[l], c[l]);
    for (int l = 0; l < n; ++l) codes[i + l] = std::uint8_t(c[l]);
  }
}

// Stochastic codes of a block of a 16-entry map, as stochastic_code: the number of values <= r by 16
// compares, the bracketing pair, and the draw uniform01(key, i0 + i) (32-bit lanes: draw_u01).
inline void encode_block16_stochastic_portable(const Codebook& cb, const float* v, int len, float scale,
                                               std::uint64_t key, std::int64_t i0, std::uint8_t* codes) {
  constexpr int N = kPortableLanes;
  float vals[16], below[17], width[17];
  for (int k = 0; k < 16; ++k) vals[k] = cb.values[k];
  // by the count of values <= r: the bracketing pair's lower value and its width vhi - vlo (at 0 and 16 the
  // pair is one code, width 0), so that a lane looks up two floats and computes no index
  for (int c = 0; c <= 16; ++c) {
    const int lo = c > 0 ? c - 1 : 0, hi = c < 15 ? c : 15;
    below[c] = vals[lo];
    width[c] = vals[hi] - vals[lo];
  }
  const std::int32_t first_pos = first_positive16(cb);
  const DrawKey dk = draw_key(key, std::uint64_t(i0));  // the block lies in one segment (encode_codes)
  for (int i = 0; i < len; i += N) {
    const int n = len - i < N ? len - i : N;
    float r[N], u[N], vlo[N], vw[N];
    std::int32_t c[N];
    // `#pragma GCC unroll 1`: left whole, GCC unrolls these small loops completely and then finds the
    // straight-line code unprofitable to vectorize (the portable 4-bit step took 13.4 instead of 12.0 ns/param)
    if (n == N) {
#pragma GCC unroll 1
      for (int l = 0; l < N; ++l) r[l] = v[i + l] / scale;
    } else {
      for (int l = 0; l < N; ++l) r[l] = l < n ? v[i + l] / scale : 0.0f;
    }
#pragma GCC unroll 1
    for (int l = 0; l < N; ++l) u[l] = draw_u01(dk, std::uint32_t(std::uint64_t(i0 + i + l)));
    std::int32_t cnt[N];
    for (int l = 0; l < N; ++l) cnt[l] = 0;
    for (int k = 0; k < 16; ++k)
      for (int l = 0; l < N; ++l) cnt[l] += vals[k] <= r[l] ? 1 : 0;
    for (int l = 0; l < N; ++l) {
      vlo[l] = below[cnt[l]];
      vw[l] = width[cnt[l]];
    }
#pragma GCC unroll 1
    for (int l = 0; l < N; ++l) {
      // at cnt 0 and 16 the width is 0 and lo == hi: the one code there, whatever the compare says. Otherwise
      // vlo <= r < vhi, so r - vlo is +0 or positive, or -0 (r = -0 at a zero entry), and u * width is +0 or
      // positive: without its sign bit r - vlo compares with it as the bit patterns do (an integer compare, which
      // vectorizes; GCC keeps a float compare as a branch).
      const std::int32_t lo = cnt[l] > 0 ? cnt[l] - 1 : 0, hi = cnt[l] < 15 ? cnt[l] : 15;
      const float w = u[l] * vw[l];
      c[l] = f32_bits(w) < (f32_bits(r[l] - vlo[l]) & 0x7fffffffu) ? hi : lo;
    }
    for (int l = 0; l < N; ++l) c[l] = keep_sign_lane(cb, first_pos, r[l], c[l]);
    for (int l = 0; l < n; ++l) codes[i + l] = std::uint8_t(c[l]);
  }
}
