#pragma once
// Exact nearest-code search and code lookup for one block, in three instruction sets. The
// search is the same branch-free binary search over the decision thresholds everywhere; the
// SIMD variants hold each level of the search in registers (AVX-512) or gather it (AVX2).
// Included by kernels_impl.cpp after its target pragma: everything here is compiled per ISA.
#include <cstdint>
#include <cstring>

#if defined(OCTOPT_X86_KERNELS)
#include <immintrin.h>
#endif
#if defined(OCTOPT_ISA_NEON)
#include <arm_neon.h>
#endif

#include "cpu/closed_form.hpp"
#include "cpu/octave_table.hpp"
#include "octopt/numerics/codebook.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/numerics/rng.hpp"

namespace octopt::cpu::OCTOPT_ISA_NS {

#if defined(OCTOPT_ISA_NEON)
#include "cpu/encode_neon.hpp"
#endif

// Thresholds reordered by search level: level s (s = size/2 .. 1) holds size/(2s) entries,
// entry j being thresholds[j * 2s + s - 1], starting at offset size/(2s) - 1.
struct Levels {
  alignas(64) float lvl[256];   // the decision thresholds, by level (nearest rounding)
  alignas(64) float vals[256];  // the map values, by level (stochastic rounding brackets r by them)
  int size;
  bool simd;      // the sign rule is a no-op for this map, so the plain search is the whole answer
  ClosedForm cf;  // valid: 256-entry maps of evenly spaced runs (the dynamic maps) encode by formula
  alignas(64) std::uint8_t planes[4][256];  // byte k of values[c] (little-endian), for byte-table decoding
#if defined(OCTOPT_ISA_NEON)
  ClosedFormPlanes cfp;  // cf's tables as byte planes, for tbl lookups (valid with cf)
#elif defined(OCTOPT_ISA_PORTABLE)
  OctaveTable octave;  // valid: 256-entry maps encode by one lookup a lane (the portable encoder)
#endif
};

inline void level_order(const float* sorted, int size, float* out) {
  for (int s = size / 2; s >= 1; s /= 2) {
    const int off = size / (2 * s) - 1;
    for (int j = 0; j < size / (2 * s); ++j) out[off + j] = sorted[j * 2 * s + s - 1];
  }
  for (int i = size - 1; i < 256; ++i) out[i] = 3.0e38f;
}

inline void make_levels(const Codebook& cb, Levels& L) {
  L.size = cb.size;
  level_order(cb.thresholds, cb.size, L.lvl);
  level_order(cb.values, cb.size, L.vals);
  bool has_zero = false;
  for (int i = 0; i < cb.size; ++i) has_zero |= cb.values[i] == 0.0f;
  L.simd = has_zero || cb.first_nonneg == 0 || cb.last_nonpos == cb.size - 1;
  if (cb.size == 256 && L.simd)
    build_closed_form(cb, L.cf);
  else
    L.cf = ClosedForm();
#if defined(OCTOPT_ISA_NEON)
  if (L.cf.valid) make_closed_form_planes(L.cf, L.cfp);
#elif defined(OCTOPT_ISA_PORTABLE)
  build_octave_table(cb, L.octave);
#endif
  for (int c = 0; c < 256; ++c) {
    std::uint32_t u;
    std::memcpy(&u, cb.values + (c < cb.size ? c : 0), 4);
    for (int k = 0; k < 4; ++k) L.planes[k][c] = std::uint8_t(u >> (8 * k));
  }
}

#if defined(OCTOPT_ISA_PORTABLE)
#include "cpu/encode_portable.hpp"
#endif
#include "cpu/encode_avx2.hpp"

#if defined(OCTOPT_ISA_AVX512)
// Codebook::nonzero_floor on 16 lanes: a positive value whose code is a zero entry gets the floor.
inline __m512i apply_floor(const Codebook& cb, __m512 r, __m512i c) {
  if (cb.nonzero_floor < 0) return c;
  const __mmask16 pos = _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __mmask16 in = _mm512_cmpge_epi32_mask(c, _mm512_set1_epi32(cb.zero_lo)) &
                       _mm512_cmple_epi32_mask(c, _mm512_set1_epi32(cb.zero_hi));
  return _mm512_mask_mov_epi32(c, pos & in, _mm512_set1_epi32(cb.nonzero_floor));
}
#endif

#if defined(OCTOPT_ISA_AVX512)
// The level search on one vector: the number of level-ordered entries <= r among the first size - 1.
inline __m512i search_levels(const float* lv, int size, __m512 r) {
  __m512i c = _mm512_setzero_si512();
  auto step = [&](__m512 t, int s) {
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(t, r, _CMP_LE_OQ), c, _mm512_set1_epi32(s));
  };
  const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64);
  if (size == 16) {
    step(_mm512_set1_ps(lv[0]), 8);
    step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 3), _mm512_maskz_loadu_ps(0x3, lv + 1)), 4);
    step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 2), _mm512_maskz_loadu_ps(0xf, lv + 3)), 2);
    step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 1), _mm512_maskz_loadu_ps(0xff, lv + 7)), 1);
    return c;
  }
  step(_mm512_set1_ps(lv[0]), 128);
  step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 7), _mm512_maskz_loadu_ps(0x3, lv + 1)), 64);
  step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 6), _mm512_maskz_loadu_ps(0xf, lv + 3)), 32);
  step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 5), _mm512_maskz_loadu_ps(0xff, lv + 7)), 16);
  step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), _mm512_loadu_ps(lv + 15)), 8);
  step(_mm512_permutex2var_ps(_mm512_loadu_ps(lv + 31), _mm512_srli_epi32(c, 3), _mm512_loadu_ps(lv + 47)), 4);
  {
    const __m512i j = _mm512_srli_epi32(c, 2);
    const __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(lv + 63), j, _mm512_loadu_ps(lv + 79));
    const __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(lv + 95), j, _mm512_loadu_ps(lv + 111));
    step(_mm512_mask_blend_ps(_mm512_test_epi32_mask(j, b5), lo, hi), 2);
  }
  {
    const __m512i j = _mm512_srli_epi32(c, 1);
    const __mmask16 s5 = _mm512_test_epi32_mask(j, b5);
    __m512 q[2];
    for (int h = 0; h < 2; ++h)
      q[h] = _mm512_mask_blend_ps(
          s5, _mm512_permutex2var_ps(_mm512_loadu_ps(lv + 127 + 64 * h), j, _mm512_loadu_ps(lv + 143 + 64 * h)),
          _mm512_permutex2var_ps(_mm512_loadu_ps(lv + 159 + 64 * h), j, _mm512_loadu_ps(lv + 175 + 64 * h)));
    step(_mm512_mask_blend_ps(_mm512_test_epi32_mask(j, b6), q[0], q[1]), 1);
  }
  return c;
}

// values[c] for 16 codes c in [0, size).
inline __m512 lookup_values(const Codebook& cb, __m512i c) {
  if (cb.size == 16) return _mm512_permutexvar_ps(c, _mm512_loadu_ps(cb.values));
  const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64), b7 = _mm512_set1_epi32(128);
  const __mmask16 s5 = _mm512_test_epi32_mask(c, b5), s6 = _mm512_test_epi32_mask(c, b6);
  __m512 q[4];
  for (int k = 0; k < 4; ++k)
    q[k] = _mm512_mask_blend_ps(
        s5, _mm512_permutex2var_ps(_mm512_loadu_ps(cb.values + 64 * k), c, _mm512_loadu_ps(cb.values + 64 * k + 16)),
        _mm512_permutex2var_ps(_mm512_loadu_ps(cb.values + 64 * k + 32), c, _mm512_loadu_ps(cb.values + 64 * k + 48)));
  const __m512 lo = _mm512_mask_blend_ps(s6, q[0], q[1]);
  const __m512 hi = _mm512_mask_blend_ps(s6, q[2], q[3]);
  return _mm512_mask_blend_ps(_mm512_test_epi32_mask(c, b7), lo, hi);
}

// The stochastic draws (rng.hpp: draw_u01) of elements index0 + i, i = 0..15, of one segment, as the scalar
// ones bit for bit.
inline __m512 uniform16(DrawKey k, std::uint64_t index0) {
  __m512i x = _mm512_add_epi32(_mm512_set1_epi32(std::int32_t(std::uint32_t(index0) + k.add)),
                               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  x = _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 16)), _mm512_set1_epi32(std::int32_t(kDrawMul1)));
  x = _mm512_xor_si512(x, _mm512_set1_epi32(std::int32_t(k.mix)));
  x = _mm512_mullo_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 15)), _mm512_set1_epi32(std::int32_t(kDrawMul2)));
  x = _mm512_srli_epi32(_mm512_xor_si512(x, _mm512_srli_epi32(x, 15)), 8);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(5.9604644775390625e-08f));
}

// stochastic_code for 16 lanes (the sign rule is a no-op here: L.simd).
inline __m512i stochastic_codes(const Codebook& cb, const Levels& L, __m512 r, __m512 u) {
  const int n = cb.size;
  __m512i cnt = search_levels(L.vals, n, r);  // values <= r among the first n - 1
  cnt = _mm512_mask_add_epi32(cnt, _mm512_cmp_ps_mask(_mm512_set1_ps(cb.values[n - 1]), r, _CMP_LE_OQ), cnt,
                              _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i lo = _mm512_max_epi32(_mm512_sub_epi32(cnt, one), _mm512_setzero_si512());
  const __m512i hi = _mm512_min_epi32(cnt, _mm512_set1_epi32(n - 1));
  const __m512 vlo = lookup_values(cb, lo), vhi = lookup_values(cb, hi);
  // below the first value (cnt 0) and from the last one up (cnt n) lo == hi, the one code there is
  const __m512 w = _mm512_mul_ps(u, _mm512_sub_ps(vhi, vlo));
  return apply_floor(cb, r, _mm512_mask_mov_epi32(lo, _mm512_cmp_ps_mask(w, _mm512_sub_ps(r, vlo), _CMP_LT_OQ), hi));
}

// stochastic_codes for a 16-entry map, U vectors at a time stage by stage (each vector's search, lookups
// and division are one long dependent chain), with the map in registers.
template <int U>
inline void stochastic16(const Codebook& cb, const Levels& L, const __m512* r, const __m512* u, __m512i* code) {
  const __m512 l8 = _mm512_set1_ps(L.vals[0]), l4 = _mm512_maskz_loadu_ps(0x3, L.vals + 1);
  const __m512 l2 = _mm512_maskz_loadu_ps(0xf, L.vals + 3), l1 = _mm512_maskz_loadu_ps(0xff, L.vals + 7);
  const __m512 V = _mm512_loadu_ps(cb.values), last = _mm512_set1_ps(cb.values[15]);
  const __m512i one = _mm512_set1_epi32(1), fifteen = _mm512_set1_epi32(15);
  __m512i c[U];
  for (int k = 0; k < U; ++k)
    c[k] = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(l8, r[k], _CMP_LE_OQ), _mm512_set1_epi32(8));
  for (int k = 0; k < U; ++k)
    c[k] = _mm512_mask_add_epi32(
        c[k], _mm512_cmp_ps_mask(_mm512_permutexvar_ps(_mm512_srli_epi32(c[k], 3), l4), r[k], _CMP_LE_OQ), c[k],
        _mm512_set1_epi32(4));
  for (int k = 0; k < U; ++k)
    c[k] = _mm512_mask_add_epi32(
        c[k], _mm512_cmp_ps_mask(_mm512_permutexvar_ps(_mm512_srli_epi32(c[k], 2), l2), r[k], _CMP_LE_OQ), c[k],
        _mm512_set1_epi32(2));
  for (int k = 0; k < U; ++k)
    c[k] = _mm512_mask_add_epi32(
        c[k], _mm512_cmp_ps_mask(_mm512_permutexvar_ps(_mm512_srli_epi32(c[k], 1), l1), r[k], _CMP_LE_OQ), c[k], one);
  for (int k = 0; k < U; ++k) {
    const __m512i cnt = _mm512_mask_add_epi32(c[k], _mm512_cmp_ps_mask(last, r[k], _CMP_LE_OQ), c[k], one);
    const __m512i lo = _mm512_max_epi32(_mm512_sub_epi32(cnt, one), _mm512_setzero_si512());
    const __m512i hi = _mm512_min_epi32(cnt, fifteen);
    const __m512 vlo = _mm512_permutexvar_ps(lo, V), vhi = _mm512_permutexvar_ps(hi, V);
    const __m512 w = _mm512_mul_ps(u[k], _mm512_sub_ps(vhi, vlo));
    code[k] = apply_floor(cb, r[k],
                          _mm512_mask_mov_epi32(lo, _mm512_cmp_ps_mask(w, _mm512_sub_ps(r[k], vlo), _CMP_LT_OQ), hi));
  }
}

inline void encode_block_stochastic(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                                    std::uint64_t key, std::int64_t i0, std::uint8_t* codes) {
  const __m512 vs = _mm512_set1_ps(scale);
  const DrawKey dk = draw_key(key, std::uint64_t(i0));  // the block lies in one segment (encode_codes)
  int i = 0;
  if (cb.size == 16) {
    for (; i + 64 <= len; i += 64) {
      __m512 r[4], u[4];
      __m512i c[4];
      for (int k = 0; k < 4; ++k) {
        r[k] = _mm512_div_ps(_mm512_loadu_ps(v + i + 16 * k), vs);
        u[k] = uniform16(dk, std::uint64_t(i0 + i + 16 * k));
      }
      stochastic16<4>(cb, L, r, u, c);
      for (int k = 0; k < 4; ++k) _mm512_mask_cvtepi32_storeu_epi8(codes + i + 16 * k, 0xffff, c[k]);
    }
  }
  for (; i < len; i += 16) {
    const __mmask16 m = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
    const __m512 r = _mm512_div_ps(_mm512_maskz_loadu_ps(m, v + i), vs);
    const __m512 u = uniform16(dk, std::uint64_t(i0 + i));
    _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, stochastic_codes(cb, L, r, u));
  }
}
#endif

#if defined(OCTOPT_ISA_AVX512)
// The search levels of a 256-entry map held in registers (level s: 256/(2s) thresholds).
struct Tables256 {
  __m512 l128, l64, l32, l16, l8, l4a, l4b, l2[4], l1[8];
  explicit Tables256(const Levels& L) {
    l128 = _mm512_set1_ps(L.lvl[0]);
    l64 = _mm512_maskz_loadu_ps(0x3, L.lvl + 1);
    l32 = _mm512_maskz_loadu_ps(0xf, L.lvl + 3);
    l16 = _mm512_maskz_loadu_ps(0xff, L.lvl + 7);
    l8 = _mm512_loadu_ps(L.lvl + 15);
    l4a = _mm512_loadu_ps(L.lvl + 31);
    l4b = _mm512_loadu_ps(L.lvl + 47);
    for (int k = 0; k < 4; ++k) l2[k] = _mm512_loadu_ps(L.lvl + 63 + 16 * k);
    for (int k = 0; k < 8; ++k) l1[k] = _mm512_loadu_ps(L.lvl + 127 + 16 * k);
  }
};

// Nearest codes of v[i, i + 16 U) / scale (lanes at or past len are masked off). U independent
// vectors per call: the eight levels are a dependent chain (about 70 cycles of latency per
// vector), so interleaving several keeps the permute and compare units busy. Measured on a Zen 5
// core, one 256-element block L2-resident: U = 4 0.53, U = 8 0.35, U = 16 0.35 ns/element.
template <int U>
inline void encode256(const Codebook& cb, const Tables256& T, const float* v, int i, int len, __m512 vs,
                      std::uint8_t* codes) {
  const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64);
  __mmask16 m[U];
  __m512 r[U];
  __m512i c[U];
  for (int u = 0; u < U; ++u) {
    const int rem = len - i - 16 * u;
    m[u] = rem >= 16 ? __mmask16(0xffff) : rem <= 0 ? __mmask16(0) : __mmask16((1u << rem) - 1u);
    r[u] = _mm512_div_ps(_mm512_maskz_loadu_ps(m[u], v + i + 16 * u), vs);
    c[u] = _mm512_mask_mov_epi32(_mm512_setzero_si512(), _mm512_cmp_ps_mask(T.l128, r[u], _CMP_LE_OQ),
                                 _mm512_set1_epi32(128));
  }
#define OCTOPT_LEVEL(T_EXPR, S)                                                                              \
  for (int u = 0; u < U; ++u) {                                                                              \
    const __m512 t = (T_EXPR);                                                                               \
    c[u] = _mm512_mask_add_epi32(c[u], _mm512_cmp_ps_mask(t, r[u], _CMP_LE_OQ), c[u], _mm512_set1_epi32(S)); \
  }
  OCTOPT_LEVEL(_mm512_permutexvar_ps(_mm512_srli_epi32(c[u], 7), T.l64), 64)
  OCTOPT_LEVEL(_mm512_permutexvar_ps(_mm512_srli_epi32(c[u], 6), T.l32), 32)
  OCTOPT_LEVEL(_mm512_permutexvar_ps(_mm512_srli_epi32(c[u], 5), T.l16), 16)
  OCTOPT_LEVEL(_mm512_permutexvar_ps(_mm512_srli_epi32(c[u], 4), T.l8), 8)
  OCTOPT_LEVEL(_mm512_permutex2var_ps(T.l4a, _mm512_srli_epi32(c[u], 3), T.l4b), 4)
  OCTOPT_LEVEL(_mm512_mask_blend_ps(_mm512_test_epi32_mask(_mm512_srli_epi32(c[u], 2), b5),
                                    _mm512_permutex2var_ps(T.l2[0], _mm512_srli_epi32(c[u], 2), T.l2[1]),
                                    _mm512_permutex2var_ps(T.l2[2], _mm512_srli_epi32(c[u], 2), T.l2[3])),
               2)
  OCTOPT_LEVEL(
      _mm512_mask_blend_ps(_mm512_test_epi32_mask(_mm512_srli_epi32(c[u], 1), b6),
                           _mm512_mask_blend_ps(_mm512_test_epi32_mask(_mm512_srli_epi32(c[u], 1), b5),
                                                _mm512_permutex2var_ps(T.l1[0], _mm512_srli_epi32(c[u], 1), T.l1[1]),
                                                _mm512_permutex2var_ps(T.l1[2], _mm512_srli_epi32(c[u], 1), T.l1[3])),
                           _mm512_mask_blend_ps(_mm512_test_epi32_mask(_mm512_srli_epi32(c[u], 1), b5),
                                                _mm512_permutex2var_ps(T.l1[4], _mm512_srli_epi32(c[u], 1), T.l1[5]),
                                                _mm512_permutex2var_ps(T.l1[6], _mm512_srli_epi32(c[u], 1), T.l1[7]))),
      1)
#undef OCTOPT_LEVEL
  for (int u = 0; u < U; ++u) _mm512_mask_cvtepi32_storeu_epi8(codes + i + 16 * u, m[u], apply_floor(cb, r[u], c[u]));
}
#endif

#if defined(OCTOPT_ISA_AVX512)
// The closed-form tables (closed_form.hpp) in registers: a 32-entry table takes one two-source permute.
struct ClosedFormRegs {
  __m512 up[2], A[2], B[2], width;
  __m512i run[2], lo[2], hi[2];
  explicit ClosedFormRegs(const ClosedForm& cf) {
    for (int h = 0; h < 2; ++h) {
      up[h] = _mm512_load_ps(cf.up + 16 * h);
      A[h] = _mm512_load_ps(cf.A + 16 * h);
      B[h] = _mm512_load_ps(cf.B + 16 * h);
      run[h] = _mm512_load_si512(cf.run + 16 * h);
      lo[h] = _mm512_load_si512(cf.lo + 16 * h);
      hi[h] = _mm512_load_si512(cf.hi + 16 * h);
    }
    width = _mm512_set1_ps(cf.width);
  }
};

// The closed form (closed_form.hpp) on U vectors of 16 lanes, stage by stage across the U vectors (each vector's stages
// are a dependent chain of about 40 cycles; interleaving keeps the units busy): the codes, and per vector the lanes the
// search must settle.
template <int U>
inline void closed_form16(const ClosedFormRegs& R, const __m512* r, __m512i* code, __mmask16* unsure) {
  __m512 a[U], t[U];
  __m512i bin[U], run[U];
  for (int u = 0; u < U; ++u) {
    a[u] = _mm512_abs_ps(r[u]);
    // the biased exponent / 2 (< 128) fits the low 16 bits of a lane: a saturating 16-bit subtraction clamps at 0;
    // no clamp above: |r| < 2 (r = v / absmax) puts it at most at kBins - 1, and a NaN lane (exponent 255, bin 79,
    // of which the permutes read the low 5 bits) goes to the search anyway
    const __m512i h = _mm512_srli_epi32(_mm512_castps_si512(a[u]), 24);
    bin[u] = _mm512_subs_epu16(h, _mm512_set1_epi32(kBinBias / 2));
    bin[u] = _mm512_mask_or_epi32(bin[u], _mm512_cmp_ps_mask(r[u], _mm512_setzero_ps(), _CMP_LE_OQ), bin[u],
                                  _mm512_set1_epi32(kBins));
  }
  for (int u = 0; u < U; ++u) {
    t[u] = _mm512_permutex2var_ps(R.up[0], bin[u], R.up[1]);
    run[u] = _mm512_permutex2var_epi32(R.run[0], bin[u], R.run[1]);
  }
  for (int u = 0; u < U; ++u)
    run[u] = _mm512_mask_add_epi32(run[u], _mm512_cmp_ps_mask(a[u], t[u], _CMP_GE_OQ), run[u], _mm512_set1_epi32(1));
  __m512 x[U];
  for (int u = 0; u < U; ++u)
    x[u] = _mm512_fmadd_ps(a[u], _mm512_permutex2var_ps(R.A[0], run[u], R.A[1]),
                           _mm512_permutex2var_ps(R.B[0], run[u], R.B[1]));
  for (int u = 0; u < U; ++u) {
    const __m512 d = _mm512_reduce_ps(x[u], _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // x - floor(x)
    unsure[u] = _mm512_cmp_ps_mask(d, R.width, _CMP_NGE_UQ);                             // NaN (r not finite) too
    code[u] = _mm512_min_epi32(
        _mm512_max_epi32(_mm512_cvttps_epi32(x[u]), _mm512_permutex2var_epi32(R.lo[0], run[u], R.lo[1])),
        _mm512_permutex2var_epi32(R.hi[0], run[u], R.hi[1]));
  }
}

// Nearest codes of a block of a 256-entry map with closed-form tables; lanes the formula cannot
// settle take the level search (a whole vector at a time; rare). Four vectors at a time, then one.
// Requires |v[i]| <= scale (absmax scaling, as every caller of encode_block has): see closed_form16.
// The codes of 16 lanes (mask m) of v / scale for which the closed form left some lanes unsure: the formula
// again, then the search for those lanes. Out of line (rare), so that the main loop keeps nothing of its
// vectors in memory for it.
__attribute__((noinline)) inline void closed_form_settle(const Codebook& cb, const Levels& L, const ClosedFormRegs& R,
                                                         const float* v, __mmask16 m, __m512 vs, std::uint8_t* codes) {
  __m512 r = _mm512_div_ps(_mm512_maskz_loadu_ps(m, v), vs);
  __m512i c;
  __mmask16 unsure;
  closed_form16<1>(R, &r, &c, &unsure);
  unsure &= m;
  if (unsure) c = _mm512_mask_mov_epi32(c, unsure, apply_floor(cb, r, search_levels(L.lvl, 256, r)));
  _mm512_mask_cvtepi32_storeu_epi8(codes, m, c);
}

inline void encode_block_closed_form(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                                     std::uint8_t* codes) {
  const ClosedFormRegs R(L.cf);
  const __m512 vs = _mm512_set1_ps(scale);
  int i = 0;
  for (; i + 64 <= len; i += 64) {
    __m512 r[4];
    __m512i c[4];
    __mmask16 unsure[4];
    for (int u = 0; u < 4; ++u) r[u] = _mm512_div_ps(_mm512_loadu_ps(v + i + 16 * u), vs);
    closed_form16<4>(R, r, c, unsure);
    // one test for the four vectors; the rare unsure group is redone out of line
    if (__builtin_expect((unsure[0] | unsure[1] | unsure[2] | unsure[3]) != 0, 0)) {
      for (int u = 0; u < 4; ++u) closed_form_settle(cb, L, R, v + i + 16 * u, 0xffff, vs, codes + i + 16 * u);
    } else {
      for (int u = 0; u < 4; ++u) _mm512_mask_cvtepi32_storeu_epi8(codes + i + 16 * u, 0xffff, c[u]);
    }
  }
  for (; i < len; i += 16) {
    const __mmask16 m = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
    __m512 r = _mm512_div_ps(_mm512_maskz_loadu_ps(m, v + i), vs);
    __m512i c;
    __mmask16 unsure;
    closed_form16<1>(R, &r, &c, &unsure);
    if (__builtin_expect((unsure & m) != 0, 0))
      closed_form_settle(cb, L, R, v + i, m, vs, codes + i);
    else
      _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, c);
  }
}

// values[c] * a for a block of codes of a 256-entry map, by byte-table lookups (AVX-512 VBMI): each
// byte plane of the map is a 256-byte table looked up 64 codes at a time, the four planes are then
// interleaved into floats. The codes are first permuted so that the interleave (which works within
// 128-bit lanes) puts the floats back in order. Not inlined: only this function uses VBMI.
__attribute__((target("avx512vbmi"), noinline)) inline void decode256_vbmi(const Levels& L, const std::uint8_t* codes,
                                                                           int len, float a, float* out) {
  alignas(64) static const std::uint8_t kOrder[64] = {0,  1,  2,  3,  16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,
                                                      4,  5,  6,  7,  20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
                                                      8,  9,  10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
                                                      12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};
  const __m512i order = _mm512_load_si512(kOrder);
  __m512i P[4][4];
  for (int k = 0; k < 4; ++k)
    for (int q = 0; q < 4; ++q) P[k][q] = _mm512_load_si512(L.planes[k] + 64 * q);
  const __m512 va = _mm512_set1_ps(a);
  for (int i = 0; i < len; i += 64) {
    const int rem = len - i;
    const __mmask64 m = rem >= 64 ? ~__mmask64(0) : (__mmask64(1) << rem) - 1;
    const __m512i c = _mm512_permutexvar_epi8(order, _mm512_maskz_loadu_epi8(m, codes + i));
    const __mmask64 hi = _mm512_movepi8_mask(c);
    __m512i b[4];
    for (int k = 0; k < 4; ++k)
      b[k] = _mm512_mask_blend_epi8(hi, _mm512_permutex2var_epi8(P[k][0], c, P[k][1]),
                                    _mm512_permutex2var_epi8(P[k][2], c, P[k][3]));
    const __m512i lo01 = _mm512_unpacklo_epi8(b[0], b[1]), hi01 = _mm512_unpackhi_epi8(b[0], b[1]);
    const __m512i lo23 = _mm512_unpacklo_epi8(b[2], b[3]), hi23 = _mm512_unpackhi_epi8(b[2], b[3]);
    const __m512i f[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                          _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    for (int j = 0; j < 4; ++j) {
      const int r = rem - 16 * j;
      if (r <= 0) break;
      const __mmask16 mj = r >= 16 ? __mmask16(0xffff) : __mmask16((1u << r) - 1u);
      _mm512_mask_storeu_ps(out + i + 16 * j, mj, _mm512_mul_ps(_mm512_castsi512_ps(f[j]), va));
    }
  }
}
#endif

// codes[i] = nearest code of v[i] / scale, i < len (one code per byte); scale >= max |v[i]|.
inline void encode_block(const Codebook& cb, const Levels& L, const float* v, int len, float scale,
                         std::uint8_t* codes) {
  int i = 0;
#if defined(OCTOPT_ISA_PORTABLE)
  if (L.size == 16) return encode_block16_portable(cb, v, len, scale, codes);
#endif
#if defined(OCTOPT_ISA_PORTABLE) && !defined(OCTOPT_ISA_NEON)
  if (L.octave.valid) return encode_block_octave(cb, L.octave, v, len, scale, codes);
#endif
  if (L.simd) {
#if defined(OCTOPT_ISA_AVX512)
    const __m512 vs = _mm512_set1_ps(scale);
    if (L.size == 256 && L.cf.valid) return encode_block_closed_form(cb, L, v, len, scale, codes);
    if (L.size == 256) {
      // whole groups of eight vectors, then the rest of the block (short blocks, partial tails)
      // two vectors at a time, so that a short block does not pay for eight
      const Tables256 T(L);
      for (; i + 128 <= len; i += 128) encode256<8>(cb, T, v, i, len, vs, codes);
      for (; i < len; i += 32) encode256<2>(cb, T, v, i, len, vs, codes);
      return;
    }
    if (L.size == 16) {
      const __m512 l8 = _mm512_set1_ps(L.lvl[0]);
      const __m512 l4 = _mm512_maskz_loadu_ps(0x3, L.lvl + 1);
      const __m512 l2 = _mm512_maskz_loadu_ps(0xf, L.lvl + 3);
      const __m512 l1 = _mm512_maskz_loadu_ps(0xff, L.lvl + 7);
      for (; i < len; i += 16) {
        const __mmask16 m = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
        const __m512 r = _mm512_div_ps(_mm512_maskz_loadu_ps(m, v + i), vs);
        __m512i c = _mm512_setzero_si512();
        auto step = [&](__m512 t, int s) {
          c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(t, r, _CMP_LE_OQ), c, _mm512_set1_epi32(s));
        };
        step(l8, 8);
        step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 3), l4), 4);
        step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 2), l2), 2);
        step(_mm512_permutexvar_ps(_mm512_srli_epi32(c, 1), l1), 1);
        _mm512_mask_cvtepi32_storeu_epi8(codes + i, m, apply_floor(cb, r, c));
      }
      return;
    }
#elif defined(OCTOPT_ISA_NEON)
    if (L.size == 256 && L.cf.valid) return encode_block_closed_form_neon(cb, L.cfp, L.cf.width, v, len, scale, codes);
#elif defined(OCTOPT_ISA_AVX2)
    if (L.size == 256 && L.cf.valid) return encode_block_closed_form8(cb, L, v, len, scale, codes);
    if (L.size == 16) i = encode_groups16(cb, L, v, len, scale, codes);
    const __m256 vs = _mm256_set1_ps(scale);
    for (; i + 8 <= len; i += 8) {
      const __m256 r = _mm256_div_ps(_mm256_loadu_ps(v + i), vs);
      store_codes8(codes + i, apply_floor8(cb, r, search_levels8(L.lvl, L.size, r)), 8);
    }
#endif
    // Scalar rest (the whole block on the baseline ISA): the sign rule is a no-op for this map,
    // so the search alone decides; the zero floor is applied only where the map asks for it.
    if (cb.nonzero_floor < 0) {
      if (cb.size == 256) {
        for (; i < len; ++i) codes[i] = std::uint8_t(search_code<256>(cb, v[i] / scale));
      } else {
        for (; i < len; ++i) codes[i] = std::uint8_t(search_code<16>(cb, v[i] / scale));
      }
    }
  }
  for (; i < len; ++i) codes[i] = std::uint8_t(nearest_code(cb, v[i] / scale));
}

// out[i] = values[codes[i]] * a for i < len (codes one per byte).
inline void decode_block(const Codebook& cb, const std::uint8_t* codes, int len, float a, float* out) {
  int i = 0;
#if defined(OCTOPT_ISA_AVX512)
  const __m512 va = _mm512_set1_ps(a);
  if (cb.size == 256) {
    __m512 V[16];
    for (int k = 0; k < 16; ++k) V[k] = _mm512_loadu_ps(cb.values + 16 * k);
    const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64), b7 = _mm512_set1_epi32(128);
    for (; i < len; i += 16) {
      const __mmask16 m = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
      const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes + i));
      const __mmask16 s5 = _mm512_test_epi32_mask(c, b5), s6 = _mm512_test_epi32_mask(c, b6);
      __m512 q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm512_mask_blend_ps(s5, _mm512_permutex2var_ps(V[4 * k], c, V[4 * k + 1]),
                                    _mm512_permutex2var_ps(V[4 * k + 2], c, V[4 * k + 3]));
      const __m512 lo = _mm512_mask_blend_ps(s6, q[0], q[1]);
      const __m512 hi = _mm512_mask_blend_ps(s6, q[2], q[3]);
      const __m512 val = _mm512_mask_blend_ps(_mm512_test_epi32_mask(c, b7), lo, hi);
      _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(val, va));
    }
    return;
  }
  if (cb.size == 16) {
    const __m512 V = _mm512_loadu_ps(cb.values);
    for (; i < len; i += 16) {
      const __mmask16 m = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
      const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, codes + i));
      _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_permutexvar_ps(c, V), va));
    }
    return;
  }
#elif defined(OCTOPT_ISA_NEON)
  if (cb.size == 16) return decode16_neon(cb, codes, len, a, out);
#elif defined(OCTOPT_ISA_AVX2)
  if (cb.size == 16) i = decode_block16(cb, codes, len, a, out);
  const __m256 va = _mm256_set1_ps(a);
  // eight scalar loads, not a gather: on Zen 4 a 256-code block decodes in 0.39 instead of 0.51 ns/code (one
  // thread, L2-resident), and gathers are slower still on Intel parts with the gather-data-sampling fix
  for (; i + 8 <= len; i += 8) {
    const std::uint8_t* c = codes + i;
    const __m128 lo = _mm_setr_ps(cb.values[c[0]], cb.values[c[1]], cb.values[c[2]], cb.values[c[3]]);
    const __m128 hi = _mm_setr_ps(cb.values[c[4]], cb.values[c[5]], cb.values[c[6]], cb.values[c[7]]);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_set_m128(hi, lo), va));
  }
#endif
  for (; i < len; ++i) out[i] = decode_value(cb, codes[i], a);
}

// 4-bit packing: byte k holds codes 2k (low nibble) and 2k+1 (high nibble; 0 past the end).
inline void pack4(const std::uint8_t* codes, int len, std::uint8_t* out) {
  int k = 0;
#if defined(OCTOPT_ISA_AVX512)
  // 64 codes as 32 16-bit words even | odd << 8; word | word >> 4 has even | odd << 4 in its low byte
  for (; 2 * k + 64 <= len; k += 32) {
    const __m512i w = _mm512_loadu_si512(codes + 2 * k);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm512_cvtepi16_epi8(_mm512_or_si512(w, _mm512_srli_epi16(w, 4))));
  }
#elif defined(OCTOPT_ISA_NEON)
  k = pack4_neon(codes, len, out);
#elif defined(OCTOPT_ISA_AVX2)
  for (; 2 * k + 64 <= len; k += 32) {
    const __m256i lo = _mm256_set1_epi16(0xff);
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * k));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * k + 32));
    const __m256i p = _mm256_packus_epi16(_mm256_and_si256(_mm256_or_si256(w0, _mm256_srli_epi16(w0, 4)), lo),
                                          _mm256_and_si256(_mm256_or_si256(w1, _mm256_srli_epi16(w1, 4)), lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_permute4x64_epi64(p, 0xd8));
  }
#endif
  for (; k < len / 2; ++k) out[k] = std::uint8_t(codes[2 * k] | (codes[2 * k + 1] << 4));
  if (len & 1) out[len / 2] = codes[len - 1];
}

inline void unpack4(const std::uint8_t* packed, int len, std::uint8_t* codes) {
  int k = 0;
#if defined(OCTOPT_ISA_AVX512)
  // 32 bytes to 32 words b; (b | b << 4) & 0x0f0f is low nibble | high nibble << 8
  for (; 2 * k + 64 <= len; k += 32) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + k)));
    _mm512_storeu_si512(codes + 2 * k, _mm512_ternarylogic_epi32(b, _mm512_slli_epi16(b, 4), _mm512_set1_epi16(0x0f0f),
                                                                 0xa8));  // (a | b) & c
  }
#elif defined(OCTOPT_ISA_NEON)
  k = unpack4_neon(packed, len, codes);
#elif defined(OCTOPT_ISA_AVX2)
  for (; 2 * k + 32 <= len; k += 16) {
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + k)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 2 * k),
                        _mm256_and_si256(_mm256_or_si256(b, _mm256_slli_epi16(b, 4)), _mm256_set1_epi16(0x0f0f)));
  }
#endif
  for (; k < len / 2; ++k) {
    codes[2 * k] = packed[k] & 0x0f;
    codes[2 * k + 1] = std::uint8_t(packed[k] >> 4);
  }
  if (len & 1) codes[len - 1] = packed[len / 2] & 0x0f;
}

// max |v[i]| as the float whose bit pattern is the largest masked pattern: exact, and NaN/Inf
// give a pattern >= 0x7f800000, i.e. a non-finite result.
inline float abs_max(const float* v, int len) {
  std::uint32_t m = 0;
  for (int i = 0; i < len; ++i) {
    std::uint32_t u;
    std::memcpy(&u, v + i, 4);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  return bits_f32(m);
}

}  // namespace octopt::cpu::OCTOPT_ISA_NS
