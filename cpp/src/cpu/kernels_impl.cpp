// CPU kernels, compiled once per instruction set: OCTOPT_ISA_AVX512, OCTOPT_ISA_AVX2 or neither
// (baseline). Headers come first, before the target pragma, so that inline functions shared with
// other translation units keep the baseline instruction set (no ODR mixing of ISAs).
// GCC 12 reports its own _mm512_undefined_*() placeholders (self-initialized on purpose) as
// "(maybe) used uninitialized" wherever an AVX-512 intrinsic is inlined: a known false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "cpu/closed_form.hpp"
#include "kernels.hpp"
#include "octopt/numerics/codebook.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/numerics/percentile.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/numerics/trust_ratio.hpp"
#include "octopt/numerics/update_rules.hpp"

#if defined(OCTOPT_X86_KERNELS)
#include <immintrin.h>
#endif

#if defined(OCTOPT_ISA_AVX512)
#define OCTOPT_ISA_NS isa_avx512
#define OCTOPT_KERNELS_FN kernels_avx512
#define OCTOPT_ISA_NAME "avx512"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt")
#elif defined(OCTOPT_ISA_AVX2)
#define OCTOPT_ISA_NS isa_avx2
#define OCTOPT_KERNELS_FN kernels_avx2
#define OCTOPT_ISA_NAME "avx2"
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,popcnt")
#elif defined(OCTOPT_ISA_NEON)
#define OCTOPT_ISA_NS isa_neon
#define OCTOPT_KERNELS_FN kernels_neon
#define OCTOPT_ISA_NAME "neon"
#define OCTOPT_ISA_PORTABLE 1  // what has no NEON form (encode_neon.hpp) is the portable code, vectorized for NEON
#else
#define OCTOPT_ISA_NS isa_baseline
#define OCTOPT_KERNELS_FN kernels_baseline
#define OCTOPT_ISA_NAME "baseline"
#define OCTOPT_ISA_PORTABLE 1  // plain C++ for the vectorizer: encode_portable.hpp, adam_blocks_portable.hpp
#endif

#include "encode.hpp"

namespace octopt::cpu::OCTOPT_ISA_NS {
namespace {

template <DType D>
void load_block(const void* src, std::int64_t i0, int len, float* out) {
  for (int i = 0; i < len; ++i) out[i] = load_f32<D>(src, i0 + i);
}

template <DType D>
void store_block(void* dst, std::int64_t i0, int len, const float* v) {
  for (int i = 0; i < len; ++i) store_f32<D>(dst, i0 + i, v[i]);
}

void load_any(const void* src, DType d, std::int64_t i0, int len, float* out) {
  switch (d) {
    case DType::f32:
      std::memcpy(out, static_cast<const float*>(src) + i0, sizeof(float) * std::size_t(len));
      return;
    case DType::f16:
      return load_block<DType::f16>(src, i0, len, out);
    case DType::bf16:
      return load_block<DType::bf16>(src, i0, len, out);
  }
}

void store_any(void* dst, DType d, std::int64_t i0, int len, const float* v) {
  switch (d) {
    case DType::f32:
      std::memcpy(static_cast<float*>(dst) + i0, v, sizeof(float) * std::size_t(len));
      return;
    case DType::f16:
      return store_block<DType::f16>(dst, i0, len, v);
    case DType::bf16:
      return store_block<DType::bf16>(dst, i0, len, v);
  }
}

struct Scratch {
  alignas(64) float x[kMaxBlockSize];
  alignas(64) std::uint8_t codes[kMaxBlockSize];
};

Scratch& scratch() {
  thread_local std::unique_ptr<Scratch> s(new Scratch());
  return *s;
}

// Software prefetch of a block some distance ahead: the step streams up to six arrays at once
// (parameter, gradient, codes and absmax of each state), more than the hardware prefetchers
// follow reliably, and the code lookups stall on the code loads otherwise.
constexpr int kPrefetchBlocks = 4;

inline void prefetch_range(const void* base, std::int64_t byte0, std::int64_t bytes) {
#if defined(OCTOPT_X86_KERNELS)
  const char* p = static_cast<const char*>(base) + byte0;
  for (std::int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
#else
  (void)base, (void)byte0, (void)bytes;
#endif
}

// make_levels, remembered per thread for the last few codebooks (by content, so a codebook freed and another
// made at its address is never mistaken for it): building the tables (the closed form's included) costs
// microseconds, and a step of many small tensors or a quantize of many chunks would otherwise rebuild the
// same ones for every chunk. The least recently used entry is replaced, so the tables of the (at most three)
// maps a chunk asks for stay valid while it runs, whatever this thread used before.
constexpr int kLevelsCached = 8;
const Levels& levels_for(const Codebook& cb) {
  struct Entry {
    Codebook cb;
    Levels levels;
    std::uint64_t used = 0;  // last use (0: empty)
  };
  thread_local std::unique_ptr<Entry[]> cache(new Entry[kLevelsCached]);
  thread_local std::uint64_t clock = 0;
  ++clock;
  int oldest = 0;
  for (int i = 0; i < kLevelsCached; ++i) {
    Entry& e = cache[i];
    if (e.used && std::memcmp(&e.cb, &cb, sizeof(Codebook)) == 0) {
      e.used = clock;
      return e.levels;
    }
    if (e.used < cache[oldest].used) oldest = i;
  }
  Entry& e = cache[oldest];
  e.cb = cb;
  make_levels(cb, e.levels);
  e.used = clock;
  return e.levels;
}

// values[codes[i]] * a for i < len (one code per byte): VBMI byte tables for 256-entry maps where the
// active kernels may use them, else decode_block.
inline void decode_codes(const Codebook& cb, const Levels& L, const std::uint8_t* codes, int len, float a, float* out,
                         bool vbmi) {
#if defined(OCTOPT_ISA_AVX512)
  if (vbmi && cb.size == 256) return decode256_vbmi(L, codes, len, a, out);
#else
  (void)L, (void)vbmi;
#endif
  decode_block(cb, codes, len, a, out);
}

// Codes of one block (any bits) from float values and their scale; stochastic rounding is vectorized for the
// 16-entry maps on AVX2 and every map without a sign rule on AVX-512, else scalar.
void encode_codes(const Codebook& cb, const Levels& L, const float* v, int len, float scale, bool clip, bool stochastic,
                  std::uint64_t key, std::int64_t i0, std::uint8_t* out) {
  if (!stochastic && !clip) return encode_block(cb, L, v, len, scale, out);
  // the vector draws take one DrawKey per block: a block that straddles a segment of 2^32 elements (never,
  // with a power-of-two block size) takes the scalar loop below
  const bool one_key = len > 0 && one_draw_segment(std::uint64_t(i0), std::uint64_t(len));
  (void)one_key;
#if defined(OCTOPT_ISA_AVX512)
  if (stochastic && !clip && one_key && L.simd) return encode_block_stochastic(cb, L, v, len, scale, key, i0, out);
#elif defined(OCTOPT_ISA_PORTABLE)
  if (stochastic && !clip && one_key && cb.size == 16) {
    if (stochastic_sign_rule_is_identity(cb, L.simd))
      return encode_block16_stochastic_portable<false>(cb, v, len, scale, key, i0, out);
    return encode_block16_stochastic_portable<true>(cb, v, len, scale, key, i0, out);
  }
#elif defined(OCTOPT_ISA_AVX2)
  if (stochastic && !clip && one_key && L.simd && cb.size == 16)
    return encode_block_stochastic16(cb, L, v, len, scale, key, i0, out);
#endif
  for (int i = 0; i < len; ++i) out[i] = std::uint8_t(encode_value(cb, v[i], scale, clip, stochastic, key, i0 + i));
}

void read_codes(const std::uint8_t* src, int len, int bits, std::int64_t i0, std::uint8_t* codes) {
  if (bits == 8)
    std::memcpy(codes, src + i0, std::size_t(len));
  else
    unpack4(src + i0 / 2, len, codes);
}

std::int64_t quantize(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size, int bits,
                      Rounding rounding, std::uint64_t key, std::uint8_t* codes, float* absmax, std::int64_t b0,
                      std::int64_t b1) {
  Scratch& s = scratch();
  const Levels& L = levels_for(cb);
  std::int64_t bad = 0;
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * block_size;
    const int len = int(std::min<std::int64_t>(block_size, n - i0));
    if (b + kPrefetchBlocks < b1) {
      const std::int64_t ahead = i0 + std::int64_t(kPrefetchBlocks) * block_size;
      const std::int64_t size = std::int64_t(dtype_size(dtype));
      prefetch_range(x, ahead * size, std::min<std::int64_t>(block_size, n - ahead) * size);
    }
    // float32 input is read in place; 8-bit codes are written straight to the output
    const float* v = s.x;
    if (dtype == DType::f32)
      v = static_cast<const float*>(x) + i0;
    else
      load_any(x, dtype, i0, len, s.x);
    float amax = abs_max(v, len);
    absmax[b] = amax;
    if (!is_finite_abs(amax)) {
      ++bad;
      std::fill(s.x, s.x + len, 0.0f);
      v = s.x;
      amax = 1.0f;
    } else if (amax == 0.0f) {
      amax = 1.0f;  // all-zero block: every code is the code of 0, which dequantizes to exact zeros
    }
    std::uint8_t* out = bits == 8 ? codes + i0 : s.codes;
    encode_codes(cb, L, v, len, amax, false, rounding == Rounding::stochastic, key, i0, out);
    if (bits == 4) pack4(s.codes, len, codes + i0 / 2);
  }
  return bad;
}

void dequantize(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb, int block_size,
                int bits, DType out_dtype, void* out, std::int64_t b0, std::int64_t b1) {
  Scratch& s = scratch();
  const Levels& L = levels_for(cb);
  const bool vbmi = active().vbmi;
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * block_size;
    const int len = int(std::min<std::int64_t>(block_size, n - i0));
    const std::uint8_t* c = codes + i0;
    if (bits == 4) {
      unpack4(codes + i0 / 2, len, s.codes);
      c = s.codes;
    }
    if (out_dtype == DType::f32) {
      decode_codes(cb, L, c, len, absmax[b], static_cast<float*>(out) + i0, vbmi);
    } else {
      decode_codes(cb, L, c, len, absmax[b], s.x, vbmi);
      store_any(out, out_dtype, i0, len, s.x);
    }
  }
}

std::int64_t count_nonfinite(const void* g, DType dtype, std::int64_t n, int block_size, std::int64_t b0,
                             std::int64_t b1) {
  Scratch& s = scratch();
  std::int64_t bad = 0;
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * block_size;
    const int len = int(std::min<std::int64_t>(block_size, n - i0));
    load_any(g, dtype, i0, len, s.x);
    bad += is_finite_abs(abs_max(s.x, len)) ? 0 : 1;
  }
  return bad;
}

// ---- optimizer steps ---------------------------------------------------------------------------

struct OptimScratch {
  alignas(64) float p[kMaxBlockSize];
  alignas(64) float g[kMaxBlockSize];
  alignas(64) float s[kMaxStateSlots][kMaxBlockSize];
  alignas(64) float u[kMaxBlockSize];
  alignas(64) std::uint32_t keys[kMaxBlockSize];  // percentile scaling
  alignas(64) std::uint8_t codes[kMaxBlockSize];
};

OptimScratch& optim_scratch() {
  thread_local std::unique_ptr<OptimScratch> s(new OptimScratch());
  return *s;
}

std::uint64_t state_key(const StepConfig& cfg, const StepTensor& slot, int which) {
  return step_stream_key(cfg.seed, slot.rng_stream, std::uint64_t(cfg.step), which);
}

// The key of state slot k's stochastic rounding (its stream: slot_stream).
std::uint64_t slot_key(const StepConfig& cfg, const StepTensor& slot, int k) {
  return state_key(cfg, slot, slot_stream(k));
}

void load_state(const StateBuffer& st, const Codebook* cbs, const Levels& L, bool vbmi, std::int64_t b, std::int64_t i0,
                int len, float* out, std::uint8_t* codes) {
  if (st.bits == 32) {
    std::memcpy(out, static_cast<const float*>(st.data) + i0, sizeof(float) * std::size_t(len));
    return;
  }
  const auto* src = static_cast<const std::uint8_t*>(st.data);
  if (st.bits == 8) return decode_codes(cbs[st.codebook], L, src + i0, len, st.absmax[b], out, vbmi);
  read_codes(src, len, st.bits, i0, codes);
  decode_block(cbs[st.codebook], codes, len, st.absmax[b], out);
}

// The block scale: max |x|, or with a percentile q in (0, 100) the q-th percentile of |x|.
float block_scale(const float* v, int len, float percentile, std::uint32_t* keys) {
  if (percentile_clips(percentile) && len > 1) return percentile_scale(v, len, percentile, keys);
  return abs_max(v, len);
}

void store_state(const StateBuffer& st, const Codebook* cbs, const Levels& levels, std::int64_t b, std::int64_t i0,
                 int len, const float* v, const StepConfig& cfg, std::uint64_t key, OptimScratch& s) {
  if (st.bits == 32) {
    std::memcpy(static_cast<float*>(st.data) + i0, v, sizeof(float) * std::size_t(len));
    return;
  }
  const float scale = block_scale(v, len, cfg.percentile, s.keys);
  st.absmax[b] = scale;
  const bool clip = percentile_clips(cfg.percentile);
  auto* dst = static_cast<std::uint8_t*>(st.data);
  std::uint8_t* out = st.bits == 8 ? dst + i0 : s.codes;  // 8-bit codes are written in place
  encode_codes(cbs[st.codebook], levels, v, len, scale > 0.0f ? scale : 1.0f, clip,
               cfg.stochastic_state || st.stochastic, key, i0, out);
  if (st.bits == 4) pack4(s.codes, len, dst + i0 / 2);
}

// One restrict pointer per slot, so that the compiler vectorizes without alias checks; K's unused slots are
// neither read nor written.
static_assert(kMaxStateSlots == 4, "update_loop and direction_loop take one pointer per state slot");

template <OptimKind K>
void update_loop(const SlotScalars& hs, int len, float* __restrict p, const float* __restrict g, float* __restrict s0,
                 float* __restrict s1, float* __restrict s2, float* __restrict s3) {
  const SlotScalars h = hs;
  constexpr int n = rule_slot_count<K>;
  for (int i = 0; i < len; ++i) {
    SlotValues s = {s0[i], n > 1 ? s1[i] : 0.0f, n > 2 ? s2[i] : 0.0f, n > 3 ? s3[i] : 0.0f};
    p[i] = update_element<K>(h, p[i], g[i], s);
    s0[i] = s[0];
    if constexpr (n > 1) s1[i] = s[1];
    if constexpr (n > 2) s2[i] = s[2];
    if constexpr (n > 3) s3[i] = s[3];
  }
}

template <OptimKind K>
void direction_loop(const SlotScalars& hs, int len, const float* __restrict p, const float* __restrict g,
                    const float* __restrict s0, const float* __restrict s1, const float* __restrict s2,
                    const float* __restrict s3, float* __restrict u) {
  const SlotScalars h = hs;
  constexpr int n = rule_slot_count<K>;
  for (int i = 0; i < len; ++i) {
    SlotValues s = {s0[i], n > 1 ? s1[i] : 0.0f, n > 2 ? s2[i] : 0.0f, n > 3 ? s3[i] : 0.0f};
    update_element<K>(h, p[i], g[i], s, u + i);
  }
}

template <DType P, DType G, int kStates>
inline void prefetch_ahead(const StepTensor& slot, std::int64_t b, std::int64_t b_end, int bs) {
  if (b >= b_end) return;
  const std::int64_t i0 = b * bs;
  const std::int64_t len = std::min<std::int64_t>(bs, slot.n - i0);
  prefetch_range(slot.grad, i0 * std::int64_t(dtype_size(G)), len * std::int64_t(dtype_size(G)));
  prefetch_range(slot.param, i0 * std::int64_t(dtype_size(P)), len * std::int64_t(dtype_size(P)));
  for (int k = 0; k < kStates; ++k) {
    const StateBuffer& sb = slot.state[k];
    if (!sb.data) continue;
    if (sb.bits == 32)
      prefetch_range(sb.data, i0 * 4, len * 4);
    else
      prefetch_range(sb.data, sb.bits == 8 ? i0 : i0 / 2, sb.bits == 8 ? len : (len + 1) / 2);
  }
}

#include "adam_fused_driver.hpp"
#include "adam_blocks.hpp"
#include "adam_blocks_portable.hpp"
#include "adam_blocks_avx2.hpp"

template <OptimKind K, DType P, DType G>
std::int64_t run_blocks(const StepConfig& cfg, const StepTensor& slot, std::int64_t b0, std::int64_t b1,
                        OptimPhase phase, double* norms) {
  OptimScratch& s = optim_scratch();
  const int bs = slot.block_size;
  constexpr int kStates = optim_state_slots(K);
  const Levels* levels[kMaxStateSlots] = {};
  for (int k = 0; k < kStates; ++k)
    if (slot.state[k].data && slot.state[k].bits != 32) levels[k] = &levels_for(cfg.codebooks[slot.state[k].codebook]);
  const bool vbmi = active().vbmi;
  // the rule's own hand-vectorized loop (OptimRule::cpu_kernel), where it applies
  constexpr CpuKernel kCpu = OptimRule<K>::cpu_kernel;
  static_assert(
      kCpu == CpuKernel::generic || kCpu == CpuKernel::adam_l2_decay || kCpu == CpuKernel::adam_decoupled_decay,
      "a CpuKernel without a block loop here");
  if constexpr (kCpu != CpuKernel::generic && P == DType::f32 && G == DType::f32) {
    constexpr bool kDecoupled = kCpu == CpuKernel::adam_decoupled_decay;
    if (phase == OptimPhase::single && adam_fused_applies(cfg, slot)) {
#if defined(OCTOPT_ISA_AVX512) || defined(OCTOPT_ISA_AVX2)
      return adam_fused_blocks<kDecoupled>(cfg, slot, levels, vbmi, b0, b1);
#else
      return adam_fused_blocks_portable<kDecoupled>(cfg, slot, levels, b0, b1);
#endif
    }
  }
  std::int64_t skipped = 0;
  // float32 parameters, gradients and 32-bit states are updated where they lie (no staging copy);
  // everything else goes through the per-thread block buffers.
  constexpr bool kDirectP = P == DType::f32, kDirectG = G == DType::f32;
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * bs;
    const int len = int(std::min<std::int64_t>(bs, slot.n - i0));
    prefetch_ahead<P, G, kStates>(slot, b + kPrefetchBlocks, b1, bs);
    const float* g = kDirectG ? static_cast<const float*>(slot.grad) + i0 : s.g;
    if (!kDirectG) load_block<G>(slot.grad, i0, len, s.g);
    if (!is_finite_abs(abs_max(g, len))) {
      ++skipped;
      continue;
    }
    float* p = kDirectP ? static_cast<float*>(slot.param) + i0 : s.p;
    if (!kDirectP) load_block<P>(slot.param, i0, len, s.p);
    if (phase == OptimPhase::norms && OptimRule<K>::trust == TrustRatio::lars) {  // LARS: norms of p and g
      norms[0] += block_sum_squares(p, len);
      norms[1] += block_sum_squares(g, len);
      continue;
    }
    float* st[kMaxStateSlots];
    for (int k = 0; k < kMaxStateSlots; ++k) st[k] = s.s[k];
    for (int k = 0; k < kStates; ++k) {
      const StateBuffer& sb = slot.state[k];
      if (!sb.data)
        std::fill(s.s[k], s.s[k] + len, 0.0f);
      else if (sb.bits == 32)
        st[k] = static_cast<float*>(sb.data) + i0;
      else
        load_state(sb, cfg.codebooks, *levels[k], vbmi, b, i0, len, s.s[k], s.codes);
    }
    if (phase == OptimPhase::norms) {  // LAMB: the norm of the update direction; nothing is written
      direction_loop<K>(slot.scalars, len, p, g, st[0], st[1], st[2], st[3], s.u);
      norms[0] += block_sum_squares(p, len);
      norms[1] += block_sum_squares(s.u, len);
      continue;
    }
    update_loop<K>(slot.scalars, len, p, g, st[0], st[1], st[2], st[3]);
    if (P == DType::bf16 && cfg.stochastic_bf16) {
      const std::uint64_t key = state_key(cfg, slot, kParamStream);
      auto* out = static_cast<std::uint16_t*>(slot.param);
      for (int i = 0; i < len; ++i) out[i0 + i] = f32_to_bf16_stochastic(s.p[i], random16(key, std::uint64_t(i0 + i)));
    } else if (!kDirectP) {
      store_block<P>(slot.param, i0, len, s.p);
    }
    for (int k = 0; k < kStates; ++k) {
      const StateBuffer& sb = slot.state[k];
      if (sb.data && sb.bits != 32)
        store_state(sb, cfg.codebooks, *levels[k], b, i0, len, s.s[k], cfg, slot_key(cfg, slot, k), s);
    }
  }
  return skipped;
}

template <OptimKind K, DType P>
OptimBlockFn select_grad(DType g) {
  if (g == P) return &run_blocks<K, P, P>;
  return &run_blocks<K, P, DType::f32>;
}

template <OptimKind K>
OptimBlockFn select_param(DType p, DType g) {
  switch (p) {
    case DType::f32:
      return &run_blocks<K, DType::f32, DType::f32>;
    case DType::f16:
      return select_grad<K, DType::f16>(g);
    case DType::bf16:
      return select_grad<K, DType::bf16>(g);
  }
  return nullptr;
}

OptimBlockFn select_optim(OptimKind k, DType p, DType g) {
  return visit_optim(k, [&](auto kind) { return select_param<decltype(kind)::value>(p, g); });
}

}  // namespace
}  // namespace octopt::cpu::OCTOPT_ISA_NS

namespace octopt::cpu {
const Kernels& OCTOPT_KERNELS_FN() {
  static const Kernels k{OCTOPT_ISA_NAME,
                         &OCTOPT_ISA_NS::quantize,
                         &OCTOPT_ISA_NS::dequantize,
                         &OCTOPT_ISA_NS::select_optim,
                         &OCTOPT_ISA_NS::count_nonfinite,
                         false};
  return k;
}
#if defined(OCTOPT_ISA_AVX512)
// The same kernels, decoding 8-bit codes with AVX-512 VBMI byte tables.
const Kernels& kernels_avx512vbmi() {
  static const Kernels k{"avx512vbmi",
                         &OCTOPT_ISA_NS::quantize,
                         &OCTOPT_ISA_NS::dequantize,
                         &OCTOPT_ISA_NS::select_optim,
                         &OCTOPT_ISA_NS::count_nonfinite,
                         true};
  return k;
}
#endif
}  // namespace octopt::cpu
