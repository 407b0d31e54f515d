#pragma once
// Adam and AdamW with both moments allocated (quantized, or 32-bit and updated where they lie): one pass per
// block on AVX2, as adam_blocks.hpp does on AVX-512 (the gradient's finiteness check, the quantized moments'
// decode, the update with the block absmax of the new moments in registers, their encode). The arithmetic is
// update_element's, operation for operation, so the results are those of the generic block loop; a NaN it makes is
// stored as the canonical 0x7FC00000 on every backend (x86 arithmetic makes 0xFFC00000). Included by kernels_impl.cpp
// inside its ISA namespace, after the helpers it uses.

#if defined(OCTOPT_ISA_AVX2)

inline std::uint32_t reduce_max_epu32(__m256i m) {
  __m128i x = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0x4e));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0xb1));
  return std::uint32_t(_mm_cvtsi128_si32(x));
}

// max |v[i]| bits over i < len (the float whose pattern is the largest, as abs_max).
inline std::uint32_t abs_max_bits8(const float* v, int len) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  int i = 0;
  for (; i + 16 <= len; i += 16) {
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), mask));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 8)), mask));
  }
  for (; i < len; i += 8) {
    const __m256i x = _mm256_castps_si256(_mm256_maskload_ps(v + i, lane_mask8(len - i)));
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(x, mask));
  }
  return reduce_max_epu32(_mm256_max_epu32(m0, m1));
}

// NaN lanes of x as the canonical quiet NaN 0x7FC00000.
inline __m256 canonical_nan8(__m256 x) {
  return _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// NaN lanes of p[0, len), m and v as the canonical 0x7FC00000; the largest |m| and |v| bit patterns after it.
inline void canonical_nan_block(float* p, float* m, float* v, int len, std::uint32_t& amax_m, std::uint32_t& amax_v) {
  for (int i = 0; i < len; i += 8) {
    const __m256i k = lane_mask8(len - i);
    _mm256_maskstore_ps(p + i, k, canonical_nan8(_mm256_maskload_ps(p + i, k)));
    _mm256_maskstore_ps(m + i, k, canonical_nan8(_mm256_maskload_ps(m + i, k)));
    _mm256_maskstore_ps(v + i, k, canonical_nan8(_mm256_maskload_ps(v + i, k)));
  }
  amax_m = abs_max_bits8(m, len);
  amax_v = abs_max_bits8(v, len);
}

// The update of one block in place (p; m and v decoded in the scratch), with the block absmax bits of the
// new m and v (kAbsmax: they are encoded; else both lie at 32 bits and the bits go unused). kPlain: no maximize
// flip and no weight-decay term (Adam's weight decay 0, AdamW's decay 1), whose operations would leave every value
// as it is. A NaN in the new m or v reaches the new p (through m / denom), so the loop tests p alone and the rare
// block with a NaN is canonicalized afterwards (canonical_nan_block).
template <bool kAdamW, bool kPlain, bool kAbsmax>
inline void adam_update_block8(const SlotScalars& h, const float* g, float* p, float* m, float* v, int len,
                               std::uint32_t& amax_m, std::uint32_t& amax_v) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256 flip = _mm256_castsi256_ps(_mm256_set1_epi32((h.flags & kMaximize) ? std::int32_t(0x80000000u) : 0));
  const __m256 wd = _mm256_set1_ps(h.weight_decay), decay = _mm256_set1_ps(h.decay);
  const bool couple = h.weight_decay != 0.0f;  // update_element skips Adam's coupled term at 0, as torch does
  const float w = h.one_minus_beta1;
  const bool low_w = w < 0.5f;  // rule_lerp's branch, the same for every element
  const __m256 vw = _mm256_set1_ps(w), vw1 = _mm256_set1_ps(1.0f - w);
  const __m256 beta2 = _mm256_set1_ps(h.beta2), omb2 = _mm256_set1_ps(h.one_minus_beta2);
  const __m256 bc2s = _mm256_set1_ps(h.bc2_sqrt), eps = _mm256_set1_ps(h.eps), step = _mm256_set1_ps(h.step_size);
  __m256i am = _mm256_setzero_si256(), av = _mm256_setzero_si256();
  __m256 nan = _mm256_setzero_ps();
  // lanes past len load as zeros and give m = v = 0, so they leave the absmax as it is
  auto body = [&](int i, bool full, __m256i k) {
    __m256 gg = full ? _mm256_loadu_ps(g + i) : _mm256_maskload_ps(g + i, k);
    __m256 pp = full ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, k);
    __m256 mm = full ? _mm256_loadu_ps(m + i) : _mm256_maskload_ps(m + i, k);
    __m256 vv = full ? _mm256_loadu_ps(v + i) : _mm256_maskload_ps(v + i, k);
    if (!kPlain) {
      gg = _mm256_xor_ps(gg, flip);
      if (kAdamW)
        pp = _mm256_mul_ps(pp, decay);
      else if (couple)
        gg = _mm256_add_ps(gg, _mm256_mul_ps(wd, pp));
    }
    const __m256 diff = _mm256_sub_ps(gg, mm);
    mm = low_w ? _mm256_add_ps(mm, _mm256_mul_ps(vw, diff)) : _mm256_sub_ps(gg, _mm256_mul_ps(diff, vw1));
    vv = _mm256_add_ps(_mm256_mul_ps(vv, beta2), _mm256_mul_ps(_mm256_mul_ps(omb2, gg), gg));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bc2s), eps);
    pp = _mm256_sub_ps(pp, _mm256_mul_ps(step, _mm256_div_ps(mm, denom)));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(pp, pp, _CMP_UNORD_Q));
    if (full) {
      _mm256_storeu_ps(p + i, pp);
      _mm256_storeu_ps(m + i, mm);
      _mm256_storeu_ps(v + i, vv);
    } else {
      _mm256_maskstore_ps(p + i, k, pp);
      _mm256_maskstore_ps(m + i, k, mm);
      _mm256_maskstore_ps(v + i, k, vv);
    }
    if (kAbsmax) {
      am = _mm256_max_epu32(am, _mm256_and_si256(_mm256_castps_si256(mm), absmask));
      av = _mm256_max_epu32(av, _mm256_and_si256(_mm256_castps_si256(vv), absmask));
    }
  };
  int i = 0;
  for (; i + 8 <= len; i += 8) body(i, true, __m256i());
  if (i < len) body(i, false, lane_mask8(len - i));
  if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0)) return canonical_nan_block(p, m, v, len, amax_m, amax_v);
  amax_m = kAbsmax ? reduce_max_epu32(am) : 0;
  amax_v = kAbsmax ? reduce_max_epu32(av) : 0;
}

template <bool kAdamW>
std::int64_t adam_fused_blocks(const StepConfig& cfg, const StepTensor& slot, const Levels* const* levels, bool vbmi,
                               std::int64_t b0, std::int64_t b1) {
  const SlotScalars& h = slot.scalars;
  const bool plain = adam_plain(h, kAdamW);
  const auto finite = [](const float* g, int len) { return is_finite_abs(bits_f32(abs_max_bits8(g, len))); };
  const bool encoded = slot.state[0].bits != 32 || slot.state[1].bits != 32;
  const auto update = [&](const float* g, float* p, float* m, float* v, int len, std::uint32_t* bits) {
    if (!encoded)
      (plain ? adam_update_block8<kAdamW, true, false> : adam_update_block8<kAdamW, false, false>)(h, g, p, m, v, len,
                                                                                                   bits[0], bits[1]);
    else if (plain)
      adam_update_block8<kAdamW, true, true>(h, g, p, m, v, len, bits[0], bits[1]);
    else
      adam_update_block8<kAdamW, false, true>(h, g, p, m, v, len, bits[0], bits[1]);
  };
  return adam_fused_driver(cfg, slot, levels, vbmi, b0, b1, finite, update);
}

#endif
