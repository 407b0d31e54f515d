#pragma once
// Adam and AdamW over float32 parameters and gradients with both moments allocated, each quantized (8 or 4
// bits, absmax scaling) or at 32 bits (updated where it lies), one pass per block, in plain C++ for the vectorizer (the
// portable kernels; the NEON build shares it): the gradient's finiteness check, the moments' decode, the update with
// the block absmax of both new moments taken on the way (as the largest bit pattern of |x|, so NaN payloads never
// decide it), and their encode. The arithmetic is update_element's, operation for operation (no contraction: the
// kernels are built with -ffp-contract=off), so the bits are those of the generic block loop and of the
// AVX-512 one (adam_blocks.hpp). A NaN stored by the update (parameter or moment) is the canonical quiet
// NaN 0x7FC00000, whatever NaN the hardware made (x86 makes 0xFFC00000, ARM 0x7FC00000).
// Included by kernels_impl.cpp inside its ISA namespace, after the helpers it uses.

#if defined(OCTOPT_ISA_PORTABLE) || defined(OCTOPT_ISA_NEON)

// The update of one block in place (p; m and v decoded in the scratch), with the largest |m| and |v| bit
// patterns. kPlain: no maximize flip and no weight-decay term (Adam's weight decay 0, AdamW's decay 1).
// kLowW: rule_lerp's branch (w < 0.5), the same for every element.
template <bool kAdamW, bool kPlain, bool kLowW>
inline void adam_update_block_portable(const SlotScalars& h, const float* __restrict g, float* __restrict p,
                                       float* __restrict m, float* __restrict v, int len, std::uint32_t& amax_m,
                                       std::uint32_t& amax_v) {
  const std::uint32_t flip = (h.flags & kMaximize) ? 0x80000000u : 0u;
  const float wd = h.weight_decay, decay = h.decay;
  const bool couple = h.weight_decay != 0.0f;  // update_element skips Adam's coupled term at 0, as torch does
  const float w = h.one_minus_beta1, w1 = 1.0f - w;
  const float beta2 = h.beta2, omb2 = h.one_minus_beta2, bc2s = h.bc2_sqrt, eps = h.eps, step = h.step_size;
  std::uint32_t am = amax_m, av = amax_v;
  for (int i = 0; i < len; ++i) {
    float gg = g[i], pp = p[i], mm = m[i], vv = v[i];
    if (!kPlain) {
      gg = bits_f32(f32_bits(gg) ^ flip);
      if (kAdamW)
        pp = pp * decay;
      else if (couple)
        gg = gg + wd * pp;
    }
    const float diff = gg - mm;
    mm = kLowW ? mm + w * diff : gg - diff * w1;
    vv = vv * beta2 + omb2 * gg * gg;
    const float denom = std::sqrt(vv) / bc2s + eps;
    pp = pp - step * (mm / denom);
    pp = canonical_nan(pp);  // numerics/convert.hpp, as update_element
    mm = canonical_nan(mm);
    vv = canonical_nan(vv);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
    const std::uint32_t um = f32_bits(mm) & 0x7fffffffu, uv = f32_bits(vv) & 0x7fffffffu;
    am = um > am ? um : am;
    av = uv > av ? uv : av;
  }
  amax_m = am;
  amax_v = av;
}

template <bool kAdamW, bool kPlain>
inline void adam_update_dispatch_portable(const SlotScalars& h, const float* g, float* p, float* m, float* v, int len,
                                          std::uint32_t& amax_m, std::uint32_t& amax_v) {
  if (h.one_minus_beta1 < 0.5f)
    adam_update_block_portable<kAdamW, kPlain, true>(h, g, p, m, v, len, amax_m, amax_v);
  else
    adam_update_block_portable<kAdamW, kPlain, false>(h, g, p, m, v, len, amax_m, amax_v);
}

template <bool kAdamW>
std::int64_t adam_fused_blocks_portable(const StepConfig& cfg, const StepTensor& slot, const Levels* const* levels,
                                        std::int64_t b0, std::int64_t b1) {
  const SlotScalars& h = slot.scalars;
  const bool plain = adam_plain(h, kAdamW);
  const auto finite = [](const float* g, int len) { return is_finite_abs(abs_max(g, len)); };
  const auto update = [&](const float* g, float* p, float* m, float* v, int len, std::uint32_t* bits) {
    if (plain)
      adam_update_dispatch_portable<kAdamW, true>(h, g, p, m, v, len, bits[0], bits[1]);
    else
      adam_update_dispatch_portable<kAdamW, false>(h, g, p, m, v, len, bits[0], bits[1]);
  };
  return adam_fused_driver(cfg, slot, levels, false, b0, b1, finite, update);
}

#endif
