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
#include "cpu/kernels.hpp"

namespace octopt {
namespace {

// Work is cut into chunks of whole blocks of one tensor. The chunking depends only on the
// tensors, never on the thread count, so LAMB/LARS norm partials are summed in a fixed order.
constexpr std::int64_t kChunkElems = 16384;

std::int64_t blocks_per_chunk(const StepTensor& s) { return std::max<std::int64_t>(1, kChunkElems / s.block_size); }

// One pass over all chunks of all stepped tensors. norms (2 per chunk) only in the norms phase.
std::int64_t run_pass(const StepConfig& cfg, StepTensor* slots, std::size_t n_slots, const StepWorkspace& ws,
                      cpu::OptimPhase phase, double* norms) {
  const std::int64_t total = ws.offsets[n_slots];
  const cpu::Kernels& kernels = cpu::active();
  std::atomic<std::int64_t> skipped{0};
  parallel_for(total, 1, [&](std::int64_t c0, std::int64_t c1) {
    std::size_t s = std::size_t(std::upper_bound(ws.offsets.begin(), ws.offsets.end(), c0) - ws.offsets.begin()) - 1;
    std::int64_t local = 0;
    for (std::int64_t c = c0; c < c1; ++c) {
      while (c >= ws.offsets[s + 1]) ++s;
      const StepTensor& slot = slots[s];
      const cpu::OptimBlockFn fn = kernels.select_optim(cfg.kind, slot.param_dtype, slot.grad_dtype);
      const std::int64_t per = blocks_per_chunk(slot);
      const std::int64_t b0 = (c - ws.offsets[s]) * per;
      const std::int64_t b1 = std::min(b0 + per, num_blocks(slot.n, slot.block_size));
      double* out = norms ? norms + 2 * c : nullptr;
      if (out) out[0] = out[1] = 0.0;
      local += fn(cfg, slot, b0, b1, phase, out);
    }
    if (local) skipped.fetch_add(local, std::memory_order_relaxed);
  });
  return skipped.load();
}

}  // namespace

void validate_step(const StepConfig& cfg, const StepTensor* slots, std::size_t n_slots, const char* fn) {
  const std::string f(fn);
  const int nstates = optim_num_states(cfg.kind);
  if (!(cfg.percentile >= 0.0f && cfg.percentile <= 100.0f))
    throw std::invalid_argument(f + ": percentile must be in [0, 100]");
  for (std::size_t i = 0; i < n_slots; ++i) {
    const StepTensor& s = slots[i];
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

std::int64_t count_nonfinite_blocks(const StepTensor* slots, std::size_t n_slots) {
  const cpu::Kernels& kernels = cpu::active();
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < n_slots; ++i) {
    const StepTensor& s = slots[i];
    if (!s.grad) continue;
    std::atomic<std::int64_t> count{0};
    parallel_for(num_blocks(s.n, s.block_size), blocks_per_chunk(s), [&](std::int64_t b0, std::int64_t b1) {
      count.fetch_add(kernels.count_nonfinite(s.grad, s.grad_dtype, s.n, s.block_size, b0, b1));
    });
    bad += count.load();
  }
  return bad;
}

StepResult step(const StepConfig& cfg, StepTensor* slots, std::size_t n_slots, StepWorkspace& ws) {
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
    run_pass(cfg, slots, n_slots, ws, cpu::OptimPhase::norms, ws.partials.data());
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
    result.skipped_blocks = run_pass(cfg, slots, n_slots, ws, cpu::OptimPhase::apply, nullptr);
  } else {
    result.skipped_blocks = run_pass(cfg, slots, n_slots, ws, cpu::OptimPhase::single, nullptr);
  }
  return result;
}

}  // namespace octopt
