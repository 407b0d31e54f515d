#pragma once
// Adam and AdamW over float32 parameters and gradients with both moments allocated, each quantized (8 or 4
// bits, absmax scaling) or at 32 bits (updated where it lies): one pass per block on AVX-512. The gradient's finiteness
// check, the moments' decode, the update with the block absmax of both new moments (in registers), and their encode;
// the tables of both maps come once per chunk (levels_for). No software prefetch: the four streams are sequential and
// the hardware prefetchers keep up (measured at 2^24 parameters, one thread: none 1.83 ns/param, 4 blocks
// ahead 1.84-1.89, 8 blocks 1.95). The arithmetic is update_element's, operation for operation, so the results are
// those of the generic block loop; a NaN it makes is stored as the canonical 0x7FC00000. The AVX2 loop is
// adam_blocks_avx2.hpp. Included by kernels_impl.cpp inside its ISA namespace, after the helpers it uses.

#if defined(OCTOPT_ISA_AVX512)

// max |v[i]| bits over i < len (the float whose pattern is the largest, as abs_max).
inline std::uint32_t abs_max_bits16(const float* v, int len) {
  const __m512i mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m = _mm512_setzero_si512();
  int i = 0;
  for (; i + 16 <= len; i += 16) m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(v + i), mask));
  if (i < len) {
    const __mmask16 k = __mmask16((1u << (len - i)) - 1u);
    m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, v + i), mask));
  }
  return std::uint32_t(_mm512_reduce_max_epu32(m));
}

// The update of one block in place (p; m and v decoded in the scratch), with the block absmax bits of the
// new m and v. kPlain: no maximize flip and no weight-decay term (Adam's weight decay 0, AdamW's decay 1),
// whose operations would leave every value as it is.
template <bool kAdamW, bool kPlain>
inline void adam_update_block(const SlotScalars& h, const float* g, float* p, float* m, float* v, int len,
                              __m512i& amax_m, __m512i& amax_v) {
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  const __m512i flip = _mm512_set1_epi32((h.flags & kMaximize) ? std::int32_t(0x80000000u) : 0);
  const __m512 wd = _mm512_set1_ps(h.weight_decay), decay = _mm512_set1_ps(h.decay);
  const bool couple = h.weight_decay != 0.0f;  // update_element skips Adam's coupled term at 0, as torch does
  const float w = h.one_minus_beta1;
  const bool low_w = w < 0.5f;  // rule_lerp's branch, the same for every element
  const __m512 vw = _mm512_set1_ps(w), vw1 = _mm512_set1_ps(1.0f - w);
  const __m512 beta2 = _mm512_set1_ps(h.beta2), omb2 = _mm512_set1_ps(h.one_minus_beta2);
  const __m512 bc2s = _mm512_set1_ps(h.bc2_sqrt), eps = _mm512_set1_ps(h.eps), step = _mm512_set1_ps(h.step_size);
  const __m512 canon = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
  for (int i = 0; i < len; i += 16) {
    const __mmask16 k = len - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - i)) - 1u);
    __m512 gg = _mm512_maskz_loadu_ps(k, g + i);
    __m512 pp = _mm512_maskz_loadu_ps(k, p + i);
    __m512 mm = _mm512_maskz_loadu_ps(k, m + i);
    __m512 vv = _mm512_maskz_loadu_ps(k, v + i);
    if (!kPlain) {
      gg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(gg), flip));
      if (kAdamW)
        pp = _mm512_mul_ps(pp, decay);
      else if (couple)
        gg = _mm512_add_ps(gg, _mm512_mul_ps(wd, pp));
    }
    const __m512 diff = _mm512_sub_ps(gg, mm);
    mm = low_w ? _mm512_add_ps(mm, _mm512_mul_ps(vw, diff)) : _mm512_sub_ps(gg, _mm512_mul_ps(diff, vw1));
    vv = _mm512_add_ps(_mm512_mul_ps(vv, beta2), _mm512_mul_ps(_mm512_mul_ps(omb2, gg), gg));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vv), bc2s), eps);
    pp = _mm512_sub_ps(pp, _mm512_mul_ps(step, _mm512_div_ps(mm, denom)));
    // a NaN made here is stored as the canonical 0x7FC00000, as on every backend (x86 makes 0xFFC00000)
    pp = _mm512_mask_mov_ps(pp, _mm512_cmp_ps_mask(pp, pp, _CMP_UNORD_Q), canon);
    mm = _mm512_mask_mov_ps(mm, _mm512_cmp_ps_mask(mm, mm, _CMP_UNORD_Q), canon);
    vv = _mm512_mask_mov_ps(vv, _mm512_cmp_ps_mask(vv, vv, _CMP_UNORD_Q), canon);
    _mm512_mask_storeu_ps(p + i, k, pp);
    _mm512_mask_storeu_ps(m + i, k, mm);
    _mm512_mask_storeu_ps(v + i, k, vv);
    amax_m = _mm512_mask_max_epu32(amax_m, k, amax_m, _mm512_and_si512(_mm512_castps_si512(mm), absmask));
    amax_v = _mm512_mask_max_epu32(amax_v, k, amax_v, _mm512_and_si512(_mm512_castps_si512(vv), absmask));
  }
}

template <bool kAdamW>
std::int64_t adam_fused_blocks(const StepConfig& cfg, const StepTensor& slot, const Levels* const* levels, bool vbmi,
                               std::int64_t b0, std::int64_t b1) {
  const SlotScalars& h = slot.scalars;
  const bool plain = adam_plain(h, kAdamW);
  const auto finite = [](const float* g, int len) { return is_finite_abs(bits_f32(abs_max_bits16(g, len))); };
  const auto update = [&](const float* g, float* p, float* m, float* v, int len, std::uint32_t* bits) {
    __m512i amax_m = _mm512_setzero_si512(), amax_v = _mm512_setzero_si512();
    if (plain)
      adam_update_block<kAdamW, true>(h, g, p, m, v, len, amax_m, amax_v);
    else
      adam_update_block<kAdamW, false>(h, g, p, m, v, len, amax_m, amax_v);
    bits[0] = std::uint32_t(_mm512_reduce_max_epu32(amax_m));
    bits[1] = std::uint32_t(_mm512_reduce_max_epu32(amax_v));
  };
  return adam_fused_driver(cfg, slot, levels, vbmi, b0, b1, finite, update);
}

#endif
