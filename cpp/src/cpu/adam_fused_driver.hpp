#pragma once
// The block loop shared by the one-pass Adam/AdamW kernels of every instruction set (adam_blocks.hpp on
// AVX-512, adam_blocks_avx2.hpp, adam_blocks_portable.hpp on the portable and NEON builds): per block the
// gradient's finiteness check, the quantized moments' decode (a 32-bit moment is updated where it lies), the
// kernel's update with the block absmax bits of both new moments, and the quantized moments' encode. Each kernel
// supplies only its vector code: the finiteness check and the update.
// Included by kernels_impl.cpp inside its ISA namespace, after the helpers it uses.

// Whether the fused path takes this tensor: both moments allocated, each at 32 bits or quantized with absmax
// scaling (percentile scaling stays on the generic loop).
inline bool adam_fused_applies(const StepConfig& cfg, const StepTensor& slot) {
  if (percentile_clips(cfg.percentile)) return false;
  for (int k = 0; k < 2; ++k)
    if (!slot.state[k].data) return false;
  return true;
}

// No maximize flip and no weight-decay term (Adam's weight decay 0, AdamW's decay 1): the update may leave
// those operations out, since they would leave every value as it is.
inline bool adam_plain(const SlotScalars& h, bool adamw) {
  return !(h.flags & kMaximize) && (adamw ? h.decay == 1.0f : h.weight_decay == 0.0f);
}

// finite(g, len): whether the block's gradient is finite. update(g, p, m, v, len, bits): the update of one
// block in place, bits[0] and bits[1] the largest |m| and |v| bit patterns.
template <class Finite, class Update>
std::int64_t adam_fused_driver(const StepConfig& cfg, const StepTensor& slot, const Levels* const* levels, bool vbmi,
                               std::int64_t b0, std::int64_t b1, Finite finite, Update update) {
  OptimScratch& s = optim_scratch();
  const int bs = slot.block_size;
  auto* const param = static_cast<float*>(slot.param);
  const auto* const grad = static_cast<const float*>(slot.grad);
  std::int64_t skipped = 0;
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * bs;
    const int len = int(std::min<std::int64_t>(bs, slot.n - i0));
    const float* g = grad + i0;
    if (!finite(g, len)) {
      ++skipped;
      continue;
    }
    float* st[2];
    for (int k = 0; k < 2; ++k) {
      const StateBuffer& sb = slot.state[k];
      st[k] = sb.bits == 32 ? static_cast<float*>(sb.data) + i0 : s.s[k];
      if (sb.bits != 32) load_state(sb, cfg.codebooks, *levels[k], vbmi, b, i0, len, s.s[k], s.codes);
    }
    std::uint32_t bits[2] = {0, 0};
    update(g, param + i0, st[0], st[1], len, bits);
    for (int k = 0; k < 2; ++k) {
      const StateBuffer& sb = slot.state[k];
      if (sb.bits == 32) continue;
      const float amax = bits_f32(bits[k]);
      sb.absmax[b] = amax;
      auto* dst = static_cast<std::uint8_t*>(sb.data);
      std::uint8_t* out = sb.bits == 8 ? dst + i0 : s.codes;
      encode_codes(cfg.codebooks[sb.codebook], *levels[k], s.s[k], len, amax > 0.0f ? amax : 1.0f, false,
                   cfg.stochastic_state || sb.stochastic, slot_key(cfg, slot, k), i0, out);
      if (sb.bits == 4) pack4(s.codes, len, dst + i0 / 2);
    }
  }
  return skipped;
}
