#pragma once
// The AVX2 encoder and decoder pieces (8 lanes): the level search, the closed-form encoder for 256-entry
// maps (the AVX-512 design, closed_form.hpp), the stochastic encoder of 16-entry maps and the 4-bit
// decode. Codes are those of the scalar search, bit for bit (bench/encoder_check.cpp --isa avx2).
// Included by encode.hpp inside its ISA namespace, after Levels; no includes of its own.

#if defined(OCTOPT_ISA_AVX2)

// Lane i of a 32-entry table t at index j[i] (bits 0..4 of j are read): a permute of each 8-entry
// quarter, then blends by bits 3 and 4. The tables are memory operands of the permutes (16 ymm registers
// do not hold the closed form's five tables). Measured against one gather per table: see docs/decisions.md.
inline __m256 lut32_ps(const float* t, __m256i j) {
  const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(j, 28));
  const __m256 b4 = _mm256_castsi256_ps(_mm256_slli_epi32(j, 27));
  const __m256 lo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(t), j),
                                     _mm256_permutevar8x32_ps(_mm256_load_ps(t + 8), j), b3);
  const __m256 hi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(t + 16), j),
                                     _mm256_permutevar8x32_ps(_mm256_load_ps(t + 24), j), b3);
  return _mm256_blendv_ps(lo, hi, b4);
}

// Lane i of a 16-entry table at index j[i] (0..15).
inline __m256 lut16_ps(__m256 t0, __m256 t1, __m256i j) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, j), _mm256_permutevar8x32_ps(t1, j),
                          _mm256_castsi256_ps(_mm256_slli_epi32(j, 28)));
}

// Codebook::nonzero_floor on 8 lanes: a positive value whose code is a zero entry gets the floor.
inline __m256i apply_floor8(const Codebook& cb, __m256 r, __m256i c) {
  if (cb.nonzero_floor < 0) return c;
  const __m256i pos = _mm256_castps_si256(_mm256_cmp_ps(r, _mm256_setzero_ps(), _CMP_GT_OQ));
  const __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(cb.zero_lo), c),
                                         _mm256_cmpgt_epi32(_mm256_set1_epi32(cb.zero_hi + 1), c));
  return _mm256_blendv_epi8(c, _mm256_set1_epi32(cb.nonzero_floor), _mm256_and_si256(pos, in));
}

// The level search (encode.hpp, Levels) on 8 lanes: the number of level-ordered entries <= r among the
// first size - 1. Small levels from registers (permutes), the two largest by gathers.
inline __m256i search_levels8(const float* lv, int size, __m256 r) {
  __m256i c = _mm256_setzero_si256();
  for (int s = size / 2; s >= 1; s /= 2) {
    const int off = size / (2 * s) - 1;
    const int entries = size / (2 * s);
    const __m256i j = _mm256_srlv_epi32(c, _mm256_set1_epi32(__builtin_ctz(unsigned(2 * s))));
    __m256 t;
    if (entries <= 8) {
      t = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lv + off), j);
    } else if (entries == 16) {
      t = lut16_ps(_mm256_loadu_ps(lv + off), _mm256_loadu_ps(lv + off + 8), j);
    } else if (entries == 32) {
      __m256 q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lv + off + 8 * k), j);
      const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(j, 28));
      const __m256 b4 = _mm256_castsi256_ps(_mm256_slli_epi32(j, 27));
      t = _mm256_blendv_ps(_mm256_blendv_ps(q[0], q[1], b3), _mm256_blendv_ps(q[2], q[3], b3), b4);
    } else {
      t = _mm256_i32gather_ps(lv + off, j, 4);
    }
    const __m256 le = _mm256_cmp_ps(t, r, _CMP_LE_OQ);
    c = _mm256_sub_epi32(c, _mm256_and_si256(_mm256_castps_si256(le), _mm256_set1_epi32(-s)));
  }
  return c;
}

// The low bytes of 8 lanes, in order, as the low 8 bytes of the result.
inline __m128i codes8(__m256i c) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  return _mm_packus_epi16(w, w);
}

// The low bytes of 4 x 8 lanes, in order (32 codes).
inline __m256i codes32(const __m256i* c) {
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c[0], c[1]), _mm256_packus_epi32(c[2], c[3]));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline void store_codes8(std::uint8_t* out, __m256i c, int n) {
  const __m128i b = codes8(c);
  if (n >= 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), b);
  } else {
    alignas(16) std::uint8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(out, tmp, std::size_t(n));
  }
}

// Lanes [0, n) set, n in [0, 8]: the mask of a partial vector.
inline __m256i lane_mask8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Lane i of a 32-entry byte table (t0: entries 0..15, t1: 16..31, each in both 128-bit halves) at index
// j[i] (bits 0..4 read), zero-extended: byte shuffles, which run on more ports than the lane-crossing permutes.
inline __m256i lut32_u8(__m256i t0, __m256i t1, __m256i j) {
  const __m256i jj = _mm256_or_si256(j, _mm256_set1_epi32(std::int32_t(0x80808000u)));  // bytes 1..3 read as zero
  return _mm256_blendv_epi8(_mm256_shuffle_epi8(t0, jj), _mm256_shuffle_epi8(t1, jj), _mm256_slli_epi32(j, 3));
}

// The closed-form tables (closed_form.hpp) as the AVX2 kernel reads them: the float tables from memory (operands of
// the permutes), the run, lo and hi tables as bytes in registers.
struct ClosedForm8 {
  const ClosedForm& cf;
  __m256i run[2], lo[2], hi[2];
  __m256i down, zero2;  // mirror form: ClosedForm::down as bytes, 2 * ClosedForm::zero
  __m256i slot8;        // ClosedForm::slot8 as bytes
  __m256i zero2b;       // 2 * ClosedForm::zero in every byte (at most 254 in mirror form)
  __m256 width;
  bool mirror;  // ClosedForm::pos16 and ClosedForm::mirror: mirror_runs8 applies to every r
  explicit ClosedForm8(const ClosedForm& c) : cf(c), mirror(c.pos16 && c.mirror) {
    static_assert(2 * kBins == 32 && kMaxRuns == 32, "32-entry byte tables");
    const std::uint8_t* b[3] = {cf.run8, cf.lo8, cf.hi8};
    __m256i* t[3] = {run, lo, hi};
    for (int q = 0; q < 3; ++q)
      for (int h = 0; h < 2; ++h)
        t[q][h] = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(b[q] + 16 * h)));
    down = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(cf.down)));
    slot8 = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(cf.slot8)));
    zero2 = _mm256_set1_epi32(2 * cf.zero);
    zero2b = _mm256_set1_epi8(char(std::uint8_t(2 * cf.zero)));
    width = _mm256_set1_ps(cf.width);
  }
};

// x = fma(a, A[run], B[run]) on the positive side's runs: 16-entry tables, or (k8: ClosedForm::runs8) the 8-entry
// tables of runs 1..8, one permute each (run 0's lanes read run 8's entry: the clamp gives their code,
// closed_form8_zero_run marks them sure).
template <bool k8>
inline __m256 formula8(const ClosedForm8& R, __m256 a, __m256i run) {
  if (k8) {
    const __m256i j = _mm256_sub_epi32(run, _mm256_set1_epi32(1));
    return _mm256_fmadd_ps(a, _mm256_permutevar8x32_ps(_mm256_load_ps(R.cf.A8), j),
                           _mm256_permutevar8x32_ps(_mm256_load_ps(R.cf.B8), j));
  }
  return _mm256_fmadd_ps(a, lut16_ps(_mm256_load_ps(R.cf.A), _mm256_load_ps(R.cf.A + 8), run),
                         lut16_ps(_mm256_load_ps(R.cf.B), _mm256_load_ps(R.cf.B + 8), run));
}

// k8: a lane of the zero run (run 0; always finite, as a NaN or infinite r falls into the top bin) is sure: its
// code is that run's one code, which the clamp to [lo[0], hi[0]] (lo[0] == hi[0]) gives whatever its x (run 8's
// formula, a finite value for such a small |r|).
template <bool k8>
inline void closed_form8_zero_run(__m256i run, __m256& unsure) {
  if (k8) unsure = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(run, _mm256_setzero_si256())), unsure);
}

// The positive side's up[bin] (as floats, or as the bit patterns less one: up_m1): k8, read through the 8-entry
// table of the boundary bins (ClosedForm::bins8, which k8 requires); else the 16-entry table. `bin` has bytes 1..3
// set to 0x80.
template <bool k8>
inline __m256 up_at8(const ClosedForm8& R, const float* up16, const float* up8, __m256i bin) {
  if (k8) return _mm256_permutevar8x32_ps(_mm256_load_ps(up8), _mm256_shuffle_epi8(R.slot8, bin));
  return lut16_ps(_mm256_load_ps(up16), _mm256_load_ps(up16 + 8), bin);
}

// frac(x) < width (the search decides), or x NaN. x - trunc(x): trunc is the code's conversion (x >= 0 in every
// run; a negative x gives a negative difference and goes to the search, which is exact).
inline __m256 unsure8(const ClosedForm8& R, __m256 x, __m256i xi) {
  return _mm256_cmp_ps(_mm256_sub_ps(x, _mm256_cvtepi32_ps(xi)), R.width, _CMP_NGE_UQ);
}

// The closed form on U vectors of 8 lanes, stage by stage across them (each vector's stages are one
// dependent chain): the codes, and per vector the lanes (all ones) the search must settle.
template <int U>
inline void closed_form8(const ClosedForm8& R, const __m256* r, __m256i* code, __m256* unsure) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 a[U], t[U];
  __m256i bin[U], run[U];
  for (int u = 0; u < U; ++u) {
    a[u] = _mm256_and_ps(r[u], absmask);
    // as closed_form16 (encode.hpp): the biased exponent / 2 less kBinBias / 2, clamped at 0 by a saturating
    // 16-bit subtraction; the permutes and blends read bits 0..4 only (a NaN lane goes to the search anyway)
    const __m256i h = _mm256_srli_epi32(_mm256_castps_si256(a[u]), 24);
    bin[u] = _mm256_subs_epu16(h, _mm256_set1_epi32(kBinBias / 2));
    bin[u] = _mm256_or_si256(bin[u],
                             _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(r[u], _mm256_setzero_ps(), _CMP_LE_OQ)),
                                              _mm256_set1_epi32(kBins)));
  }
  for (int u = 0; u < U; ++u) {
    t[u] = lut32_ps(R.cf.up, bin[u]);
    run[u] = lut32_u8(R.run[0], R.run[1], bin[u]);
  }
  for (int u = 0; u < U; ++u)
    run[u] = _mm256_sub_epi32(run[u], _mm256_castps_si256(_mm256_cmp_ps(a[u], t[u], _CMP_GE_OQ)));
  __m256 x[U];
  for (int u = 0; u < U; ++u) x[u] = _mm256_fmadd_ps(a[u], lut32_ps(R.cf.A, run[u]), lut32_ps(R.cf.B, run[u]));
  for (int u = 0; u < U; ++u) {
    const __m256i xi = _mm256_cvttps_epi32(x[u]);
    unsure[u] = unsure8(R, x[u], xi);  // NaN (r not finite) too
    code[u] =
        _mm256_min_epi32(_mm256_max_epi32(xi, lut32_u8(R.lo[0], R.lo[1], run[u])), lut32_u8(R.hi[0], R.hi[1], run[u]));
  }
}

// The run and formula value x = fma(|r|, A[run], B[run]) of vectors whose lanes are all > 0 (a second moment's, nearly
// always): the positive side's 16 bins and (pos16) 16 runs, so a float table is one permute (k8) or two and a blend,
// a byte table one shuffle.
template <int U, bool k8>
inline void pos_runs8(const ClosedForm8& R, const __m256* r, __m256i* run, __m256* x) {
  const __m256i z = _mm256_set1_epi32(std::int32_t(0x80808000u));  // bytes 1..3 of an index read as zero
  for (int u = 0; u < U; ++u) {
    const __m256i bin = _mm256_or_si256(
        _mm256_subs_epu16(_mm256_srli_epi32(_mm256_castps_si256(r[u]), 24), _mm256_set1_epi32(kBinBias / 2)), z);
    run[u] =
        _mm256_sub_epi32(_mm256_shuffle_epi8(R.run[0], bin),
                         _mm256_castps_si256(_mm256_cmp_ps(r[u], up_at8<k8>(R, R.cf.up, R.cf.up8, bin), _CMP_GE_OQ)));
  }
  for (int u = 0; u < U; ++u) x[u] = formula8<k8>(R, r[u], run[u]);
}

// The same for a map in mirror form (ClosedForm::mirror) and any sign: the positive side's tables on |r|, a negative
// lane's run compare lowered by down[bin]; neg: the lanes r <= 0, whose code is reflected (max(2 zero - c, 0)).
template <int U, bool k8>
inline void mirror_runs8(const ClosedForm8& R, const __m256* r, __m256i* run, __m256* x, __m256i* neg) {
  const __m256i z = _mm256_set1_epi32(std::int32_t(0x80808000u));
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  __m256 a[U];
  for (int u = 0; u < U; ++u) {
    // r <= 0 takes the reflected code (zero included: a floor is for r > 0 only, and zero reflects to itself)
    neg[u] = _mm256_castps_si256(_mm256_cmp_ps(r[u], _mm256_setzero_ps(), _CMP_LE_OQ));
    const __m256i ab = _mm256_and_si256(_mm256_castps_si256(r[u]), absmask);
    a[u] = _mm256_castsi256_ps(ab);
    const __m256i bin =
        _mm256_or_si256(_mm256_subs_epu16(_mm256_srli_epi32(ab, 24), _mm256_set1_epi32(kBinBias / 2)), z);
    const __m256i t = _mm256_castps_si256(
        up_at8<k8>(R, reinterpret_cast<const float*>(R.cf.up_m1), reinterpret_cast<const float*>(R.cf.up8_m1), bin));
    const __m256i adj = _mm256_add_epi32(ab, _mm256_and_si256(_mm256_shuffle_epi8(R.down, bin), neg[u]));
    run[u] = _mm256_sub_epi32(_mm256_shuffle_epi8(R.run[0], bin), _mm256_cmpgt_epi32(adj, t));
  }
  for (int u = 0; u < U; ++u) x[u] = formula8<k8>(R, a[u], run[u]);
}

// The codes of 4 vectors from their runs and formula values, trunc(x) clamped to [lo[run], hi[run]] (kReflect:
// reflected where neg), on bytes: the truncated values, the runs and the signs packed
// to 32 bytes as codes32 packs codes (saturation moves a value only below 0 or above 255, where the clamp to the
// run's codes, all in [0, 255], gives the same), one shuffle per table for 32 lanes. 32 codes in codes32's order.
template <bool k8, bool kReflect>
inline __m256i codes32_of_runs8(const ClosedForm8& R, const __m256* x, const __m256i* run, const __m256i* neg,
                                __m256* unsure) {
  __m256i xi[4];
  for (int u = 0; u < 4; ++u) {
    xi[u] = _mm256_cvttps_epi32(x[u]);
    unsure[u] = unsure8(R, x[u], xi[u]);  // NaN (r not finite) too
    closed_form8_zero_run<k8>(run[u], unsure[u]);
  }
  const __m256i cb = _mm256_packus_epi16(_mm256_packus_epi32(xi[0], xi[1]), _mm256_packus_epi32(xi[2], xi[3]));
  const __m256i rb = _mm256_packus_epi16(_mm256_packus_epi32(run[0], run[1]), _mm256_packus_epi32(run[2], run[3]));
  __m256i c = _mm256_min_epu8(_mm256_max_epu8(cb, _mm256_shuffle_epi8(R.lo[0], rb)), _mm256_shuffle_epi8(R.hi[0], rb));
  if (kReflect) {
    const __m256i nb = _mm256_packs_epi16(_mm256_packs_epi32(neg[0], neg[1]), _mm256_packs_epi32(neg[2], neg[3]));
    c = _mm256_blendv_epi8(c, _mm256_subs_epu8(R.zero2b, c), nb);  // max(2 zero - c, 0)
  }
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// closed_form8 for one vector of a map in mirror form (a block's last values): 32-bit codes.
inline void closed_form8_mirror1(const ClosedForm8& R, __m256 r, __m256i& code, __m256& unsure) {
  const __m256i z = _mm256_set1_epi32(std::int32_t(0x80808000u));
  __m256i run, neg;
  __m256 x;
  mirror_runs8<1, false>(R, &r, &run, &x, &neg);
  const __m256i xi = _mm256_cvttps_epi32(x);
  unsure = unsure8(R, x, xi);  // NaN (r not finite) too
  const __m256i j = _mm256_or_si256(run, z);
  const __m256i c =
      _mm256_min_epi32(_mm256_max_epi32(xi, _mm256_shuffle_epi8(R.lo[0], j)), _mm256_shuffle_epi8(R.hi[0], j));
  code = _mm256_blendv_epi8(c, _mm256_max_epi32(_mm256_sub_epi32(R.zero2, c), _mm256_setzero_si256()), neg);
}

// Nearest codes of a block of a 256-entry map with closed-form tables, 32 codes at a time, then 8; a group
// with an unsure lane is redone by the level search (rare: ~0.1% of the vectors of an optimizer step).
// Requires |v[i]| <= scale (absmax scaling), as the AVX-512 kernel. A group of positive lanes takes the positive side
// alone (pos_runs8: a second moment's, nearly always); kMirror: the map is in mirror form (ClosedForm8::mirror),
// so any other group takes mirror_runs8 (a first moment's), else the general closed_form8. (A multiply by
// 1 / scale instead of the division, with the unsure band widened by the reciprocal's error, was measured slower
// on Zen 4: the divider is not the bound here, the extra compares are.)
template <bool kMirror, bool k8 = false>
inline void encode_groups_closed_form8(const Codebook& cb, const Levels& L, const ClosedForm8& R, const float* v,
                                       int len, float scale, std::uint8_t* codes) {
  const __m256 vs = _mm256_set1_ps(scale);
  int i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256 r[4], unsure[4];
    __m256i c[4];
    for (int u = 0; u < 4; ++u) r[u] = _mm256_div_ps(_mm256_loadu_ps(v + i + 8 * u), vs);
    // all 32 lanes > 0 (no sign bit, not zero; a NaN lane fails the compare): the positive side alone
    const __m256 le0 = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(r[0], _mm256_setzero_ps(), _CMP_NGT_UQ),
                                                 _mm256_cmp_ps(r[1], _mm256_setzero_ps(), _CMP_NGT_UQ)),
                                    _mm256_or_ps(_mm256_cmp_ps(r[2], _mm256_setzero_ps(), _CMP_NGT_UQ),
                                                 _mm256_cmp_ps(r[3], _mm256_setzero_ps(), _CMP_NGT_UQ)));
    __m256i out;
    if (R.cf.pos16 && _mm256_testz_ps(le0, le0)) {
      __m256i run[4];
      __m256 x[4];
      pos_runs8<4, k8>(R, r, run, x);
      out = codes32_of_runs8<k8, false>(R, x, run, nullptr, unsure);
    } else if (kMirror) {
      __m256i run[4], neg[4];
      __m256 x[4];
      mirror_runs8<4, k8>(R, r, run, x, neg);
      out = codes32_of_runs8<k8, true>(R, x, run, neg, unsure);
    } else {
      closed_form8<4>(R, r, c, unsure);
      out = codes32(c);
    }
    const __m256 any = _mm256_or_ps(_mm256_or_ps(unsure[0], unsure[1]), _mm256_or_ps(unsure[2], unsure[3]));
    if (__builtin_expect(!_mm256_testz_ps(any, any), 0)) {
      for (int u = 0; u < 4; ++u) c[u] = apply_floor8(cb, r[u], search_levels8(L.lvl, 256, r[u]));
      out = codes32(c);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), out);
  }
  for (; i < len; i += 8) {
    const int n = len - i;
    const __m256i m = lane_mask8(n);
    __m256 r = _mm256_div_ps(_mm256_maskload_ps(v + i, m), vs);
    __m256 unsure;
    __m256i c;
    if constexpr (kMirror)
      closed_form8_mirror1(R, r, c, unsure);
    else
      closed_form8<1>(R, &r, &c, &unsure);
    unsure = _mm256_and_ps(unsure, _mm256_castsi256_ps(m));
    if (__builtin_expect(!_mm256_testz_ps(unsure, unsure), 0)) c = apply_floor8(cb, r, search_levels8(L.lvl, 256, r));
    store_codes8(codes + i, c, n);
  }
}

inline void encode_block_closed_form8(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                                      std::uint8_t* codes) {
  const ClosedForm8 R(L.cf);
  if (R.mirror && L.cf.runs8 && L.cf.bins8)
    encode_groups_closed_form8<true, true>(cb, L, R, v, len, scale, codes);
  else if (R.mirror)
    encode_groups_closed_form8<true>(cb, L, R, v, len, scale, codes);
  else
    encode_groups_closed_form8<false>(cb, L, R, v, len, scale, codes);
}

// Nearest codes of a 16-entry map (L.simd) for the whole groups of 32 values of a block: search_levels8's
// four permute-compare stages, stage by stage across four vectors (each vector's search is one dependent
// chain; one at a time left the 4-bit step latency-bound). Returns the number of values done.
inline int encode_groups16(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                           std::uint8_t* codes) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256 l8 = _mm256_set1_ps(L.lvl[0]), l4 = _mm256_loadu_ps(L.lvl + 1), l2 = _mm256_loadu_ps(L.lvl + 3);
  const __m256 l1 = _mm256_loadu_ps(L.lvl + 7);
  int i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256 r[4];
    __m256i c[4];
    for (int k = 0; k < 4; ++k) r[k] = _mm256_div_ps(_mm256_loadu_ps(v + i + 8 * k), vs);
    for (int k = 0; k < 4; ++k)
      c[k] = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(l8, r[k], _CMP_LE_OQ)), _mm256_set1_epi32(8));
    for (int k = 0; k < 4; ++k)
      c[k] = _mm256_sub_epi32(
          c[k], _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(
                                     _mm256_permutevar8x32_ps(l4, _mm256_srli_epi32(c[k], 3)), r[k], _CMP_LE_OQ)),
                                 _mm256_set1_epi32(-4)));
    for (int k = 0; k < 4; ++k)
      c[k] = _mm256_sub_epi32(
          c[k], _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(
                                     _mm256_permutevar8x32_ps(l2, _mm256_srli_epi32(c[k], 2)), r[k], _CMP_LE_OQ)),
                                 _mm256_set1_epi32(-2)));
    for (int k = 0; k < 4; ++k)
      c[k] = apply_floor8(
          cb, r[k],
          _mm256_sub_epi32(c[k], _mm256_castps_si256(_mm256_cmp_ps(
                                     _mm256_permutevar8x32_ps(l1, _mm256_srli_epi32(c[k], 1)), r[k], _CMP_LE_OQ))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), codes32(c));
  }
  return i;
}

// The stochastic draws (rng.hpp: draw_u01) of 8 consecutive elements of one segment, as the scalar ones bit
// for bit: 32-bit lanes, two vpmulld per 8 draws.
struct Uniform8 {
  __m256i idx, add, mix;
  Uniform8(std::uint64_t key, std::uint64_t index0) {
    const DrawKey k = draw_key(key, index0);
    idx = _mm256_add_epi32(_mm256_set1_epi32(std::int32_t(std::uint32_t(index0))),
                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    add = _mm256_set1_epi32(std::int32_t(k.add));
    mix = _mm256_set1_epi32(std::int32_t(k.mix));
  }
  // the 8 uniforms of this position, then the position advanced by 8
  __m256 next() {
    __m256i x = _mm256_add_epi32(idx, add);
    x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 16)), _mm256_set1_epi32(std::int32_t(kDrawMul1)));
    x = _mm256_xor_si256(x, mix);
    x = _mm256_mullo_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), _mm256_set1_epi32(std::int32_t(kDrawMul2)));
    x = _mm256_srli_epi32(_mm256_xor_si256(x, _mm256_srli_epi32(x, 15)), 8);
    idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_set1_ps(5.9604644775390625e-08f));
  }
};

// stochastic_code for U vectors of 8 lanes of a 16-entry map (the sign rule is a no-op here: L.simd), stage by
// stage across the vectors (each one's search, lookups and division are one dependent chain), the map in registers.
template <int U>
inline void stochastic16_8(const Codebook& cb, const Levels& L, const __m256* r, const __m256* u, __m256i* code) {
  const __m256 l8 = _mm256_set1_ps(L.vals[0]), l4 = _mm256_loadu_ps(L.vals + 1), l2 = _mm256_loadu_ps(L.vals + 3);
  const __m256 l1 = _mm256_loadu_ps(L.vals + 7), last = _mm256_set1_ps(cb.values[15]);
  const __m256 V0 = _mm256_loadu_ps(cb.values), V1 = _mm256_loadu_ps(cb.values + 8);
  const __m256i one = _mm256_set1_epi32(1);
  __m256i c[U];
  // the level search: count += s where the level's entry is <= r (the compare's all-ones is -1)
  for (int k = 0; k < U; ++k)
    c[k] = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(l8, r[k], _CMP_LE_OQ)), _mm256_set1_epi32(8));
  for (int k = 0; k < U; ++k)
    c[k] = _mm256_sub_epi32(
        c[k], _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(
                                   _mm256_permutevar8x32_ps(l4, _mm256_srli_epi32(c[k], 3)), r[k], _CMP_LE_OQ)),
                               _mm256_set1_epi32(-4)));
  for (int k = 0; k < U; ++k)
    c[k] = _mm256_sub_epi32(
        c[k], _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(
                                   _mm256_permutevar8x32_ps(l2, _mm256_srli_epi32(c[k], 2)), r[k], _CMP_LE_OQ)),
                               _mm256_set1_epi32(-2)));
  for (int k = 0; k < U; ++k)
    c[k] = _mm256_sub_epi32(c[k], _mm256_castps_si256(_mm256_cmp_ps(
                                      _mm256_permutevar8x32_ps(l1, _mm256_srli_epi32(c[k], 1)), r[k], _CMP_LE_OQ)));
  for (int k = 0; k < U; ++k) {
    const __m256i cnt = _mm256_sub_epi32(c[k], _mm256_castps_si256(_mm256_cmp_ps(last, r[k], _CMP_LE_OQ)));
    const __m256i lo = _mm256_max_epi32(_mm256_sub_epi32(cnt, one), _mm256_setzero_si256());
    const __m256i hi = _mm256_min_epi32(cnt, _mm256_set1_epi32(15));
    const __m256 vlo = lut16_ps(V0, V1, lo), vhi = lut16_ps(V0, V1, hi);
    // below the first value (cnt 0) and from the last one up (cnt 16) lo == hi, the one code there is
    const __m256 w = _mm256_mul_ps(u[k], _mm256_sub_ps(vhi, vlo));
    code[k] = apply_floor8(
        cb, r[k],
        _mm256_blendv_epi8(lo, hi, _mm256_castps_si256(_mm256_cmp_ps(w, _mm256_sub_ps(r[k], vlo), _CMP_LT_OQ))));
  }
}

inline void encode_block_stochastic16(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                                      std::uint64_t key, std::int64_t i0, std::uint8_t* codes) {
  const __m256 vs = _mm256_set1_ps(scale);
  Uniform8 rng(key, std::uint64_t(i0));
  int i = 0;
  for (; i + 32 <= len; i += 32) {
    __m256 r[4], u[4];
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      r[k] = _mm256_div_ps(_mm256_loadu_ps(v + i + 8 * k), vs);
      u[k] = rng.next();
    }
    stochastic16_8<4>(cb, L, r, u, c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), codes32(c));
  }
  for (; i < len; i += 8) {
    const int n = len - i;
    const __m256 r = _mm256_div_ps(_mm256_maskload_ps(v + i, lane_mask8(n)), vs);
    const __m256 u = rng.next();
    __m256i c;
    stochastic16_8<1>(cb, L, &r, &u, &c);
    store_codes8(codes + i, c, n);
  }
}

// values[c] * a for a block of codes of a 16-entry map: the map in two registers, permutes instead of gathers.
inline int decode_block16(const Codebook& cb, const std::uint8_t* codes, int len, float a, float* out) {
  const __m256 V0 = _mm256_loadu_ps(cb.values), V1 = _mm256_loadu_ps(cb.values + 8), va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= len; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(lut16_ps(V0, V1, c), va));
  }
  return i;
}

#endif
