#pragma once
// The encoders of the portable kernels (the baseline build, and the parts of the NEON build that have no
// NEON-specific form): the octave table (octave_table.hpp) for 256-entry maps and the 16-entry maps in plain C++,
// written for the compiler's vectorizer (GCC and Clang, -O3): fixed-width loops over small arrays of lanes, stage
// by stage, selects instead of branches, and the rare lanes the table cannot settle handed to the exact search out
// of line. No intrinsics: what the target cannot vectorize (the table lookups on SSE2) stays scalar.
// Included by encode.hpp inside its ISA namespace (its headers come first, there).
constexpr int kPortableLanes = 16;

// The lanes of a group whose octave entry is unsure (a bucket where the code changes twice, or |r| above the
// bucket of 1.0: Inf, NaN) get the exact search (rare; out of line so that the main loop stays small).
__attribute__((noinline)) inline void octave_settle(const Codebook& cb, const std::uint32_t* r_bits,
                                                    const std::uint64_t* entry, int n, std::uint8_t* codes) {
  for (int l = 0; l < n; ++l)
    if ((entry[l] >> 32) & kOctaveUnsure) codes[l] = std::uint8_t(nearest_code(cb, bits_f32(r_bits[l])));
}

// Nearest codes of a block of a 256-entry map by its octave table (octave_table.hpp), kStageLanes values at a
// time in three loops: the quotients and their bucket indices and the codes vectorize; the entries in between are
// one scalar 64-bit load a lane (SSE2 has no gather). In groups of 16 lanes GCC unrolls and scalarizes all of it.
constexpr int kStageLanes = 256;  // values per round of the stage loops below
inline void encode_block_octave(const Codebook& cb, const OctaveTable& t, const float* __restrict v, int len,
                                float scale, std::uint8_t* __restrict codes) {
  constexpr int N = kStageLanes;
  alignas(64) std::uint32_t r_bits[N];
  alignas(64) std::int32_t index[N];
  alignas(64) std::uint64_t entry[N];
  const std::uint64_t* table = t.entries.data();
  const int shift = t.shift;
  const std::int32_t base = t.base, top = t.buckets, side = t.buckets + 1;
  for (int i = 0; i < len; i += N) {
    const int n = len - i < N ? len - i : N;
    const float* x = v + i;
    std::uint8_t* out = codes + i;
    for (int l = 0; l < n; ++l) {
      const std::uint32_t u = f32_bits(x[l] / scale);
      r_bits[l] = u;
      std::int32_t q = std::int32_t((u & 0x7fffffffu) >> shift) - base;
      q = q < 0 ? 0 : q;
      q = q > top ? top : q;
      index[l] = q + (-std::int32_t(u >> 31) & side);  // the negative side's entries follow the positive's
    }
    for (int l = 0; l < n; ++l) entry[l] = table[index[l]];
    std::uint32_t unsure = 0;
    for (int l = 0; l < n; ++l) {
      // |r| bits and the change point are below 2^31: the signed compare is the unsigned one (SSE2 has only that)
      const std::uint32_t at = std::uint32_t(entry[l]), w = std::uint32_t(entry[l] >> 32);
      out[l] = std::uint8_t(std::int32_t(r_bits[l] & 0x7fffffffu) >= std::int32_t(at) ? w >> 8 : w);
      unsure |= w;
    }
    if (__builtin_expect((unsure & kOctaveUnsure) != 0, 0)) octave_settle(cb, r_bits, entry, n, out);
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
// compares, the bracketing pair, and the draw uniform01(key, i0 + i) (32-bit lanes: draw_u01). Whole loops over up
// to kStageLanes values, each stage its own loop (in groups of 16 lanes GCC unrolls them and vectorizes less), the
// bracketing pair one 64-bit load a lane. kSignRule: keep_sign_lane, which the caller leaves out where it changes no
// code (stochastic_sign_rule_is_identity).
template <bool kSignRule>
inline void encode_block16_stochastic_portable(const Codebook& cb, const float* __restrict v, int len, float scale,
                                               std::uint64_t key, std::int64_t i0, std::uint8_t* __restrict codes) {
  constexpr int N = kStageLanes;
  float vals[16];
  std::uint64_t pair[17];
  for (int k = 0; k < 16; ++k) vals[k] = cb.values[k];
  // by the count of values <= r: the bracketing pair's lower value (low word) and its width vhi - vlo (high word;
  // at 0 and 16 the pair is one code, width 0), so that a lane looks up one pair and computes no index
  for (int c = 0; c <= 16; ++c) {
    const int lo = c > 0 ? c - 1 : 0, hi = c < 15 ? c : 15;
    pair[c] = std::uint64_t(f32_bits(vals[lo])) | std::uint64_t(f32_bits(vals[hi] - vals[lo])) << 32;
  }
  const std::int32_t first_pos = kSignRule ? first_positive16(cb) : 0;
  const DrawKey dk = draw_key(key, std::uint64_t(i0));  // the block lies in one segment (encode_codes)
  alignas(64) float r[N], u[N];
  alignas(64) std::int32_t cnt[N];
  alignas(64) std::uint64_t bracket[N];
  for (int i = 0; i < len; i += N) {
    const int n = len - i < N ? len - i : N;
    for (int l = 0; l < n; ++l) r[l] = v[i + l] / scale;
    for (int l = 0; l < n; ++l) u[l] = draw_u01(dk, std::uint32_t(std::uint64_t(i0 + i + l)));
    for (int l = 0; l < n; ++l) {
      std::int32_t c = 0;
      for (int k = 0; k < 16; ++k) c += vals[k] <= r[l] ? 1 : 0;
      cnt[l] = c;
    }
    for (int l = 0; l < n; ++l) bracket[l] = pair[cnt[l]];
    for (int l = 0; l < n; ++l) {
      // at cnt 0 and 16 the width is 0 and lo == hi: the one code there, whatever the compare says. Otherwise
      // vlo <= r < vhi, so r - vlo is +0 or positive, or -0 (r = -0 at a zero entry), and u * width is +0 or
      // positive: without its sign bit r - vlo compares with it as the bit patterns do (an integer compare, which
      // vectorizes; GCC keeps a float compare as a branch).
      const std::int32_t lo = cnt[l] > 0 ? cnt[l] - 1 : 0, hi = cnt[l] < 15 ? cnt[l] : 15;
      const float vlo = bits_f32(std::uint32_t(bracket[l])), w = u[l] * bits_f32(std::uint32_t(bracket[l] >> 32));
      std::int32_t c = f32_bits(w) < (f32_bits(r[l] - vlo) & 0x7fffffffu) ? hi : lo;
      if (kSignRule) c = keep_sign_lane(cb, first_pos, r[l], c);
      codes[i + l] = std::uint8_t(c);
    }
  }
}

// Whether keep_sign changes no stochastic code of this map: with a zero entry, or all entries of one sign (L.simd),
// the bracketing pair of a nonzero r never holds a value of the other sign, and without the zero floor nothing else
// moves a code.
inline bool stochastic_sign_rule_is_identity(const Codebook& cb, bool simd) { return simd && cb.nonzero_floor < 0; }
