// CPU fused optimizer step: all tensors in one parallel region, each thread owning whole blocks.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "octopt/blockwise.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/optim.hpp"
#include "octopt/threading.hpp"
#include "state_codec.hpp"

namespace octopt {
namespace {

// Work is cut into chunks of whole blocks of one tensor. The chunking depends only on the
// tensors, never on the thread count, so LAMB/LARS norm partials are summed in a fixed order.
constexpr std::int64_t kChunkElems = 16384;

enum class Phase { single, norms, apply };

struct Buffers {
  float p[kMaxBlockSize], g[kMaxBlockSize], s[3][kMaxBlockSize], scratch[kMaxBlockSize];
};

std::uint64_t state_key(const StepConfig& cfg, const ParamSlot& slot, int which) {
  return rng_key(cfg.seed ^ mix64(slot.rng_stream + 1), std::uint64_t(cfg.step) * 4u + std::uint64_t(which));
}

template <DType G>
bool load_grad(const void* g, std::int64_t i0, int len, float* out) {
  bool finite = true;
  for (int i = 0; i < len; ++i) {
    out[i] = load_f32<G>(g, i0 + i);
    finite &= is_finite_abs(std::fabs(out[i]));
  }
  return finite;
}

// Runs blocks [b0, b1) of one tensor. Returns the number of skipped (non-finite) blocks; in the
// norms phase accumulates into norms[0], norms[1] and changes nothing.
template <OptimKind K, DType P, DType G>
std::int64_t run_blocks(const StepConfig& cfg, const ParamSlot& slot, std::int64_t b0, std::int64_t b1, Phase phase,
                        double* norms, Buffers& buf) {
  const SlotScalars& h = slot.scalars;
  const int bs = slot.block_size;
  const int nstates = optim_num_states(K);
  std::int64_t skipped = 0;
  const std::uint64_t bf16_key = state_key(cfg, slot, 3);
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * bs;
    const int len = int(std::min<std::int64_t>(bs, slot.n - i0));
    if (!load_grad<G>(slot.grad, i0, len, buf.g)) {
      ++skipped;
      continue;
    }
    for (int i = 0; i < len; ++i) buf.p[i] = load_f32<P>(slot.param, i0 + i);
    if (phase == Phase::norms && K == OptimKind::lars) {
      double gg = 0.0, pp = 0.0;
      for (int i = 0; i < len; ++i) {
        gg += double(buf.g[i]) * double(buf.g[i]);
        pp += double(buf.p[i]) * double(buf.p[i]);
      }
      norms[0] += pp;
      norms[1] += gg;
      continue;
    }
    for (int k = 0; k < nstates; ++k) {
      if (slot.state[k].data) detail::load_state_block(slot.state[k], cfg.codebooks, b, i0, len, buf.s[k]);
      else std::fill(buf.s[k], buf.s[k] + len, 0.0f);
    }
    if (phase == Phase::norms) {  // LAMB: the norm of the update direction
      double uu = 0.0, pp = 0.0;
      for (int i = 0; i < len; ++i) {
        float s0 = buf.s[0][i], s1 = buf.s[1][i], s2 = buf.s[2][i], u = 0.0f;
        update_element<K>(h, buf.p[i], buf.g[i], s0, s1, s2, &u);
        uu += double(u) * double(u);
        pp += double(buf.p[i]) * double(buf.p[i]);
      }
      norms[0] += pp;
      norms[1] += uu;
      continue;
    }
    for (int i = 0; i < len; ++i) {
      buf.p[i] = update_element<K>(h, buf.p[i], buf.g[i], buf.s[0][i], buf.s[1][i], buf.s[2][i]);
    }
    if (P == DType::bf16 && cfg.stochastic_bf16) {
      auto* out = static_cast<std::uint16_t*>(slot.param);
      for (int i = 0; i < len; ++i) {
        const std::uint32_t r = std::uint32_t(mix64(bf16_key + std::uint64_t(i0 + i) * kGolden64) >> 48);
        out[i0 + i] = f32_to_bf16_stochastic(buf.p[i], r);
      }
    } else {
      for (int i = 0; i < len; ++i) store_f32<P>(slot.param, i0 + i, buf.p[i]);
    }
    for (int k = 0; k < nstates; ++k) {
      if (!slot.state[k].data) continue;
      detail::store_state_block(slot.state[k], cfg.codebooks, b, i0, len, buf.s[k], cfg.percentile,
                                cfg.stochastic_state, state_key(cfg, slot, k), buf.scratch);
    }
  }
  return skipped;
}

using BlockFn = std::int64_t (*)(const StepConfig&, const ParamSlot&, std::int64_t, std::int64_t, Phase, double*,
                                 Buffers&);

template <OptimKind K, DType P>
BlockFn select_grad(DType g) {
  if (g == P) return &run_blocks<K, P, P>;
  return &run_blocks<K, P, DType::f32>;
}

template <OptimKind K>
BlockFn select_param(DType p, DType g) {
  switch (p) {
    case DType::f32: return &run_blocks<K, DType::f32, DType::f32>;
    case DType::f16: return select_grad<K, DType::f16>(g);
    case DType::bf16: return select_grad<K, DType::bf16>(g);
  }
  return nullptr;
}

BlockFn select(OptimKind k, DType p, DType g) {
  switch (k) {
    case OptimKind::adam: return select_param<OptimKind::adam>(p, g);
    case OptimKind::adamw: return select_param<OptimKind::adamw>(p, g);
    case OptimKind::sgd: return select_param<OptimKind::sgd>(p, g);
    case OptimKind::rmsprop: return select_param<OptimKind::rmsprop>(p, g);
    case OptimKind::adagrad: return select_param<OptimKind::adagrad>(p, g);
    case OptimKind::lion: return select_param<OptimKind::lion>(p, g);
    case OptimKind::ademamix: return select_param<OptimKind::ademamix>(p, g);
    case OptimKind::lamb: return select_param<OptimKind::lamb>(p, g);
    case OptimKind::lars: return select_param<OptimKind::lars>(p, g);
  }
  return nullptr;
}

std::int64_t blocks_per_chunk(const ParamSlot& s) { return std::max<std::int64_t>(1, kChunkElems / s.block_size); }

// One pass over all chunks of all stepped tensors. norms (2 per chunk) only in the norms phase.
std::int64_t run_pass(const StepConfig& cfg, ParamSlot* slots, std::size_t n_slots, const StepWorkspace& ws,
                      Phase phase, double* norms) {
  const std::int64_t total = ws.offsets[n_slots];
  std::atomic<std::int64_t> skipped{0};
  parallel_for(total, 1, [&](std::int64_t c0, std::int64_t c1) {
    thread_local std::unique_ptr<Buffers> buf(new Buffers());  // per worker, reused across steps
    std::size_t s = std::size_t(std::upper_bound(ws.offsets.begin(), ws.offsets.end(), c0) - ws.offsets.begin()) - 1;
    std::int64_t local = 0;
    for (std::int64_t c = c0; c < c1; ++c) {
      while (c >= ws.offsets[s + 1]) ++s;
      const ParamSlot& slot = slots[s];
      const BlockFn fn = select(cfg.kind, slot.param_dtype, slot.grad_dtype);
      const std::int64_t per = blocks_per_chunk(slot);
      const std::int64_t b0 = (c - ws.offsets[s]) * per;
      const std::int64_t b1 = std::min(b0 + per, num_blocks(slot.n, slot.block_size));
      double* out = norms ? norms + 2 * c : nullptr;
      if (out) out[0] = out[1] = 0.0;
      local += fn(cfg, slot, b0, b1, phase, out, *buf);
    }
    if (local) skipped.fetch_add(local, std::memory_order_relaxed);
  });
  return skipped.load();
}

}  // namespace

void validate_step(const StepConfig& cfg, const ParamSlot* slots, std::size_t n_slots, const char* fn) {
  const std::string f(fn);
  const int nstates = optim_num_states(cfg.kind);
  if (!(cfg.percentile >= 0.0f && cfg.percentile <= 100.0f))
    throw std::invalid_argument(f + ": percentile must be in [0, 100]");
  for (std::size_t i = 0; i < n_slots; ++i) {
    const ParamSlot& s = slots[i];
    const std::string where = f + ": tensor " + std::to_string(i) + ": ";
    if (s.n < 0) throw std::invalid_argument(where + "negative element count");
    validate_block_size(s.block_size, fn);
    if (s.grad && s.grad_dtype != s.param_dtype && s.grad_dtype != DType::f32)
      throw std::invalid_argument(where + "gradient dtype " + dtype_name(s.grad_dtype) + " must be the parameter's (" +
                                  dtype_name(s.param_dtype) + ") or float32");
    for (int k = 0; k < 3; ++k) {
      const StateBuffer& st = s.state[k];
      if (!st.data) continue;
      if (k >= nstates) throw std::invalid_argument(where + "state slot " + std::to_string(k) + " is not used by " + optim_name(cfg.kind));
      if (st.bits != 32 && st.bits != 8 && st.bits != 4)
        throw std::invalid_argument(where + "state bits must be 32, 8 or 4, got " + std::to_string(st.bits));
      if (st.bits == 32) continue;
      if (!st.absmax) throw std::invalid_argument(where + "quantized state without absmax");
      if (st.codebook < 0 || st.codebook >= cfg.num_codebooks)
        throw std::invalid_argument(where + "state codebook index out of range");
      if (cfg.codebooks[st.codebook].size != (1 << st.bits))
        throw std::invalid_argument(where + "state codebook has " + std::to_string(cfg.codebooks[st.codebook].size) +
                                    " entries but the state has " + std::to_string(st.bits) + " bits");
    }
  }
}

std::int64_t count_nonfinite_blocks(const ParamSlot* slots, std::size_t n_slots) {
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < n_slots; ++i) {
    const ParamSlot& s = slots[i];
    if (!s.grad) continue;
    std::atomic<std::int64_t> count{0};
    const std::int64_t nb = num_blocks(s.n, s.block_size);
    parallel_for(nb, std::max<std::int64_t>(1, kChunkElems / s.block_size), [&](std::int64_t b0, std::int64_t b1) {
      float g[kMaxBlockSize];
      std::int64_t local = 0;
      for (std::int64_t b = b0; b < b1; ++b) {
        const std::int64_t i0 = b * s.block_size;
        const int len = int(std::min<std::int64_t>(s.block_size, s.n - i0));
        bool ok = true;
        switch (s.grad_dtype) {
          case DType::f32: ok = load_grad<DType::f32>(s.grad, i0, len, g); break;
          case DType::f16: ok = load_grad<DType::f16>(s.grad, i0, len, g); break;
          case DType::bf16: ok = load_grad<DType::bf16>(s.grad, i0, len, g); break;
        }
        local += ok ? 0 : 1;
      }
      count.fetch_add(local);
    });
    bad += count.load();
  }
  return bad;
}

StepResult step(const StepConfig& cfg, ParamSlot* slots, std::size_t n_slots, StepWorkspace& ws) {
  validate_step(cfg, slots, n_slots, "step");
  ws.offsets.resize(n_slots + 1);
  ws.offsets[0] = 0;
  for (std::size_t i = 0; i < n_slots; ++i) {
    const std::int64_t chunks = slots[i].grad ? (num_blocks(slots[i].n, slots[i].block_size) + blocks_per_chunk(slots[i]) - 1) /
                                                    blocks_per_chunk(slots[i])
                                              : 0;
    ws.offsets[i + 1] = ws.offsets[i] + chunks;
  }
  StepResult result;
  if (cfg.kind == OptimKind::lamb || cfg.kind == OptimKind::lars) {
    ws.partials.resize(std::size_t(2 * ws.offsets[n_slots]));
    run_pass(cfg, slots, n_slots, ws, Phase::norms, ws.partials.data());
    for (std::size_t i = 0; i < n_slots; ++i) {
      double pp = 0.0, xx = 0.0;
      for (std::int64_t c = ws.offsets[i]; c < ws.offsets[i + 1]; ++c) {
        pp += ws.partials[std::size_t(2 * c)];
        xx += ws.partials[std::size_t(2 * c + 1)];
      }
      const double pn = std::sqrt(pp), xn = std::sqrt(xx);
      SlotScalars& h = slots[i].scalars;
      double trust = 1.0;
      if (cfg.kind == OptimKind::lamb) {
        if (pn > 0.0 && xn > 0.0) trust = pn / xn;
      } else if (pn > 0.0 && xn > 0.0) {
        trust = double(h.eta) * pn / (xn + double(h.weight_decay) * pn);
      }
      h.trust = float(trust);
    }
    result.skipped_blocks = run_pass(cfg, slots, n_slots, ws, Phase::apply, nullptr);
  } else {
    result.skipped_blocks = run_pass(cfg, slots, n_slots, ws, Phase::single, nullptr);
  }
  return result;
}

}  // namespace octopt
