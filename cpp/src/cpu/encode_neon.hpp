#pragma once
// The NEON forms of the encoder and decoder (aarch64): the closed form (closed_form.hpp) with its 32-entry
// tables looked up by `tbl` on byte planes, the decode of 16-entry maps by one `tbl`, and the 4-bit packing.
// The design is the AVX-512 path's; the bits are every path's. 256-entry maps decode by the scalar loop
// (decode_block): llvm-mca puts byte-plane tbl/tbx lookups of the 256-byte planes at 3.4x its cost on
// Neoverse V1 (bench/mca/neon_loops.cpp keeps that variant; bench/README.md has the numbers).
//
// Byte planes: a table of 32-bit entries T[j] is kept as four byte tables P_k[j] = byte k of T[j]; one
// `tbl` looks up 16 lanes' byte k at once (vqtbl2q_u8: 32 entries, vqtbl4q_u8 + vqtbx4q_u8: 64 at a time), and
// two rounds of zips put the four bytes back together as 16 floats. The closed form's run, lo and hi tables
// hold small integers, so one plane is all of them.
// Included by encode.hpp inside its ISA namespace, before Levels (which holds a ClosedFormPlanes); everything
// the NEON build does not do here comes from encode_portable.hpp.
// The closed form's tables as byte planes (built with the Levels, once per map).
struct ClosedFormPlanes {
  alignas(16) std::uint8_t up[4][2 * kBins];
  alignas(16) std::uint8_t A[4][kMaxRuns];
  alignas(16) std::uint8_t B[4][kMaxRuns];
  alignas(16) std::uint8_t run[2 * kBins];
  alignas(16) std::uint8_t lo[kMaxRuns];
  alignas(16) std::uint8_t hi[kMaxRuns];
};

inline void make_closed_form_planes(const ClosedForm& cf, ClosedFormPlanes& P) {
  for (int j = 0; j < 32; ++j) {
    std::uint32_t u[3];
    std::memcpy(&u[0], &cf.up[j], 4);
    std::memcpy(&u[1], &cf.A[j], 4);
    std::memcpy(&u[2], &cf.B[j], 4);
    for (int k = 0; k < 4; ++k) {
      P.up[k][j] = std::uint8_t(u[0] >> (8 * k));
      P.A[k][j] = std::uint8_t(u[1] >> (8 * k));
      P.B[k][j] = std::uint8_t(u[2] >> (8 * k));
    }
    P.run[j] = std::uint8_t(cf.run[j]);  // < kMaxRuns
    P.lo[j] = std::uint8_t(cf.lo[j]);    // codes < 256
    P.hi[j] = std::uint8_t(cf.hi[j]);
  }
}

// Four byte planes (16 lanes each, lane order) to four vectors of 4 floats: lanes 0-3, 4-7, 8-11, 12-15.
inline void interleave_planes(uint8x16_t b0, uint8x16_t b1, uint8x16_t b2, uint8x16_t b3, float32x4_t* f) {
  const uint16x8_t lo01 = vreinterpretq_u16_u8(vzip1q_u8(b0, b1)), hi01 = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
  const uint16x8_t lo23 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3)), hi23 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
  f[0] = vreinterpretq_f32_u16(vzip1q_u16(lo01, lo23));
  f[1] = vreinterpretq_f32_u16(vzip2q_u16(lo01, lo23));
  f[2] = vreinterpretq_f32_u16(vzip1q_u16(hi01, hi23));
  f[3] = vreinterpretq_f32_u16(vzip2q_u16(hi01, hi23));
}

// A 32-entry float table (byte planes) at 16 byte indices < 32.
inline void lookup32(const std::uint8_t (*planes)[32], uint8x16_t idx, float32x4_t* f) {
  uint8x16_t b[4];
  for (int k = 0; k < 4; ++k) b[k] = vqtbl2q_u8(vld1q_u8_x2(planes[k]), idx);
  interleave_planes(b[0], b[1], b[2], b[3], f);
}

// Four vectors of 32-bit lanes (values < 256) to 16 bytes, lane order.
inline uint8x16_t narrow_u32(uint32x4_t a, uint32x4_t b, uint32x4_t c, uint32x4_t d) {
  const uint16x8_t ab = vcombine_u16(vmovn_u32(a), vmovn_u32(b)), cd = vcombine_u16(vmovn_u32(c), vmovn_u32(d));
  return vcombine_u8(vmovn_u16(ab), vmovn_u16(cd));
}

// The closed form on 16 lanes (four vectors r, |r| < 2): the codes, and a mask of the lanes the search must
// settle (0xff), as closed_form16 in encode.hpp does on AVX-512.
inline uint8x16_t closed_form_neon(const ClosedFormPlanes& P, float width, const float32x4_t* r, uint8x16_t* unsure) {
  float32x4_t a[4];
  uint32x4_t bin[4];
  for (int q = 0; q < 4; ++q) {
    a[q] = vabsq_f32(r[q]);
    // the biased exponent / 2 less kBinBias / 2, clamped to [0, kBins - 1] (NaN: the top bin; unsure anyway),
    // plus kBins on the r <= 0 side
    const uint32x4_t h = vshrq_n_u32(vreinterpretq_u32_f32(a[q]), 24);
    const uint32x4_t b = vminq_u32(vqsubq_u32(h, vdupq_n_u32(kBinBias / 2)), vdupq_n_u32(kBins - 1));
    bin[q] = vorrq_u32(b, vandq_u32(vclezq_f32(r[q]), vdupq_n_u32(kBins)));
  }
  const uint8x16_t bin8 = narrow_u32(bin[0], bin[1], bin[2], bin[3]);
  float32x4_t up[4];
  lookup32(P.up, bin8, up);
  uint32x4_t ge[4];
  for (int q = 0; q < 4; ++q) ge[q] = vcgeq_f32(a[q], up[q]);
  // run + (a >= up): the all-ones mask narrowed to 0xff is -1
  const uint8x16_t run8 = vsubq_u8(vqtbl2q_u8(vld1q_u8_x2(P.run), bin8), narrow_u32(ge[0], ge[1], ge[2], ge[3]));
  float32x4_t A[4], B[4];
  lookup32(P.A, run8, A);
  lookup32(P.B, run8, B);
  const float32x4_t w = vdupq_n_f32(width);
  uint32x4_t ok[4], k[4];
  for (int q = 0; q < 4; ++q) {
    const float32x4_t x = vfmaq_f32(B[q], a[q], A[q]);  // fma(|r|, A, B), one rounding, as the tables were built
    ok[q] = vcgeq_f32(vsubq_f32(x, vrndmq_f32(x)), w);  // false for NaN too
    k[q] = vcvtq_u32_f32(x);                            // trunc; negative (and NaN) to 0, saturating above
  }
  *unsure = vmvnq_u8(narrow_u32(ok[0], ok[1], ok[2], ok[3]));
  // trunc(x) saturated to a byte, then clamped to the run's codes (both < 256): a saturated lane had x >= 255,
  // beyond any run's hi, so the clamp gives what the 32-bit clamp gives
  const uint16x8_t k01 = vcombine_u16(vqmovn_u32(k[0]), vqmovn_u32(k[1]));
  const uint16x8_t k23 = vcombine_u16(vqmovn_u32(k[2]), vqmovn_u32(k[3]));
  const uint8x16_t k8 = vcombine_u8(vqmovn_u16(k01), vqmovn_u16(k23));
  const uint8x16_t lo = vqtbl2q_u8(vld1q_u8_x2(P.lo), run8), hi = vqtbl2q_u8(vld1q_u8_x2(P.hi), run8);
  return vminq_u8(vmaxq_u8(k8, lo), hi);
}

__attribute__((noinline)) inline void closed_form_settle_neon(const Codebook& cb, const float* v, int n, float scale,
                                                              uint8x16_t unsure, std::uint8_t* codes) {
  std::uint8_t m[16];
  vst1q_u8(m, unsure);
  for (int l = 0; l < n; ++l)
    if (m[l]) codes[l] = std::uint8_t(nearest_code(cb, v[l] / scale));
}

// Nearest codes of a block of a 256-entry map with closed-form tables; |v[i]| <= scale. 16 lanes at a time;
// a partial group reads through a zero-padded copy.
inline void encode_block_closed_form_neon(const Codebook& cb, const ClosedFormPlanes& P, float width, const float* v,
                                          int len, float scale, std::uint8_t* codes) {
  const float32x4_t vs = vdupq_n_f32(scale);
  for (int i = 0; i < len; i += 16) {
    const int n = len - i < 16 ? len - i : 16;
    const float* src = v + i;
    alignas(16) float pad[16];
    if (n < 16) {
      for (int l = 0; l < 16; ++l) pad[l] = l < n ? src[l] : 0.0f;
      src = pad;
    }
    float32x4_t r[4];
    for (int q = 0; q < 4; ++q) r[q] = vdivq_f32(vld1q_f32(src + 4 * q), vs);
    uint8x16_t unsure;
    const uint8x16_t c = closed_form_neon(P, width, r, &unsure);
    if (n == 16) {
      vst1q_u8(codes + i, c);
    } else {
      std::uint8_t tmp[16];
      vst1q_u8(tmp, c);
      for (int l = 0; l < n; ++l) codes[i + l] = tmp[l];
    }
    if (__builtin_expect(vmaxvq_u8(unsure) != 0, 0)) closed_form_settle_neon(cb, src, n, scale, unsure, codes + i);
  }
}

// values[codes[i]] * a for 16-entry maps: the 64 bytes of the map are one `tbl` table; lane j of output
// vector q reads bytes 4 c + 0..3 of code c = codes[4 q + j].
inline void decode16_neon(const Codebook& cb, const std::uint8_t* codes, int len, float a, float* out) {
  const float32x4_t va = vdupq_n_f32(a);
  const uint8x16x4_t T = vld1q_u8_x4(reinterpret_cast<const std::uint8_t*>(cb.values));
  alignas(16) static const std::uint8_t kSpread[4][16] = {
      {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
      {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
      {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
      {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
  alignas(16) static const std::uint8_t kByte[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  const uint8x16_t byte = vld1q_u8(kByte);
  int i = 0;
  for (; i + 16 <= len; i += 16) {
    const uint8x16_t c = vld1q_u8(codes + i);
    for (int q = 0; q < 4; ++q) {
      const uint8x16_t idx = vaddq_u8(vshlq_n_u8(vqtbl1q_u8(c, vld1q_u8(kSpread[q])), 2), byte);
      vst1q_f32(out + i + 4 * q, vmulq_f32(vreinterpretq_f32_u8(vqtbl4q_u8(T, idx)), va));
    }
  }
  for (; i < len; ++i) out[i] = decode_value(cb, codes[i], a);
}

// 4-bit unpacking, 32 codes per 16 bytes: low nibbles are the even elements, high nibbles the odd ones.
inline int unpack4_neon(const std::uint8_t* packed, int len, std::uint8_t* codes) {
  int k = 0;
  for (; 2 * k + 32 <= len; k += 16) {
    const uint8x16_t b = vld1q_u8(packed + k);
    const uint8x16x2_t z = vzipq_u8(vandq_u8(b, vdupq_n_u8(0x0f)), vshrq_n_u8(b, 4));
    vst1q_u8(codes + 2 * k, z.val[0]);
    vst1q_u8(codes + 2 * k + 16, z.val[1]);
  }
  return k;
}

// 4-bit packing, 32 codes (< 16) to 16 bytes.
inline int pack4_neon(const std::uint8_t* codes, int len, std::uint8_t* out) {
  int k = 0;
  for (; 2 * k + 32 <= len; k += 16) {
    const uint8x16x2_t e = vld2q_u8(codes + 2 * k);  // even and odd elements
    vst1q_u8(out + k, vorrq_u8(e.val[0], vshlq_n_u8(e.val[1], 4)));
  }
  return k;
}
