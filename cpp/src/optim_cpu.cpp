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
#include "octopt/step_setup.hpp"
#include "octopt/threading.hpp"
#include "cpu/kernels.hpp"

namespace octopt {
namespace {

// One pass over all chunks of all stepped tensors (ws.offsets: chunk prefix sums). Work is cut into
// chunks of whole blocks of one tensor (numerics/chunking.hpp), which depend only on the tensors,
// never on the thread count, so LAMB/LARS norm partials (2 per chunk, norms phase only) are summed
// in a fixed order.
std::int64_t run_pass(const StepConfig& cfg, StepTensor* tensors, std::size_t n_tensors, const StepWorkspace& ws,
                      cpu::OptimPhase phase, double* norms) {
  const std::int64_t total = ws.offsets[n_tensors];
  const cpu::Kernels& kernels = cpu::active();
  std::atomic<std::int64_t> skipped{0};
  parallel_for(total, 1, [&](std::int64_t c0, std::int64_t c1) {
    std::size_t s = std::size_t(std::upper_bound(ws.offsets.begin(), ws.offsets.end(), c0) - ws.offsets.begin()) - 1;
    std::int64_t local = 0;
    for (std::int64_t c = c0; c < c1; ++c) {
      while (c >= ws.offsets[s + 1]) ++s;
      const StepTensor& slot = tensors[s];
      const cpu::OptimBlockFn fn = kernels.select_optim(cfg.kind, slot.param_dtype, slot.grad_dtype);
      const BlockRange r = chunk_block_range(c - ws.offsets[s], slot.n, slot.block_size);
      double* out = norms ? norms + 2 * c : nullptr;
      if (out) out[0] = out[1] = 0.0;
      local += fn(cfg, slot, r.begin, r.end, phase, out);
    }
    if (local) skipped.fetch_add(local, std::memory_order_relaxed);
  });
  return skipped.load();
}

}  // namespace

void validate_step(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const char* fn) {
  const char* f = fn;
  const int nstates = optim_num_states(cfg.kind);
  if (!(cfg.percentile >= 0.0f && cfg.percentile <= 100.0f))
    throw std::invalid_argument(std::string(f) + ": percentile must be in [0, 100]");
  for (std::size_t i = 0; i < n_tensors; ++i) {
    const StepTensor& s = tensors[i];
    // the prefix of a message, built only when one is thrown (this runs for every tensor of every step)
    const auto where = [&] { return std::string(f) + ": tensor " + std::to_string(i) + ": "; };
    if (s.n < 0) throw std::invalid_argument(where() + "negative element count");
    validate_block_size(s.block_size, fn);
    if (optim_has_tensor_scalar(cfg.kind)) {
      const std::string why = tensor_scalar_problem(cfg.kind, s.mu_product);
      if (!why.empty()) throw std::invalid_argument(where() + why + ", got " + std::to_string(s.mu_product));
    }
    if (s.grad && s.grad_dtype != s.param_dtype && s.grad_dtype != DType::f32)
      throw std::invalid_argument(where() + "gradient dtype " + dtype_name(s.grad_dtype) +
                                  " must be the parameter's (" + dtype_name(s.param_dtype) + ") or float32");
    for (int k = 0; k < kMaxStateSlots; ++k) {
      const StateBuffer& st = s.state[k];
      if (!st.data) continue;
      if (k >= nstates)
        throw std::invalid_argument(where() + "state slot " + std::to_string(k) + " is not used by " +
                                    optim_name(cfg.kind));
      if (st.bits != 32 && st.bits != 8 && st.bits != 4)
        throw std::invalid_argument(where() + "state bits must be 32, 8 or 4, got " + std::to_string(st.bits));
      if (st.bits == 32) continue;
      if (!st.absmax) throw std::invalid_argument(where() + "quantized state without absmax");
      if (st.codebook < 0 || st.codebook >= cfg.num_codebooks)
        throw std::invalid_argument(where() + "state codebook index out of range");
      if (cfg.codebooks[st.codebook].size != (1 << st.bits))
        throw std::invalid_argument(where() + "state codebook has " + std::to_string(cfg.codebooks[st.codebook].size) +
                                    " entries but the state has " + std::to_string(st.bits) + " bits");
    }
  }
}

std::int64_t count_nonfinite_blocks(const StepTensor* tensors, std::size_t n_tensors) {
  const cpu::Kernels& kernels = cpu::active();
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < n_tensors; ++i) {
    const StepTensor& s = tensors[i];
    if (!s.grad) continue;
    std::atomic<std::int64_t> count{0};
    parallel_for(block_count(s.n, s.block_size), chunk_blocks(s.block_size), [&](std::int64_t b0, std::int64_t b1) {
      count.fetch_add(kernels.count_nonfinite(s.grad, s.grad_dtype, s.n, s.block_size, b0, b1));
    });
    bad += count.load();
  }
  return bad;
}

StepResult step(const StepConfig& cfg, StepTensor* tensors, std::size_t n_tensors, StepWorkspace& ws) {
  validate_step(cfg, tensors, n_tensors, "step");
  ws.offsets.resize(n_tensors + 1);
  ws.offsets[0] = 0;
  for (std::size_t i = 0; i < n_tensors; ++i)
    ws.offsets[i + 1] = ws.offsets[i] + (tensors[i].grad ? chunk_count(tensors[i].n, tensors[i].block_size) : 0);
  if (optim_has_tensor_scalar(cfg.kind)) {
    // the tensor's scalar (NAdam's running product of mu) moves to this step before the step's scalars use it
    for (std::size_t i = 0; i < n_tensors; ++i) {
      if (!tensors[i].grad) continue;
      tensors[i].mu_product = advance_tensor_scalar(cfg.kind, tensors[i].scalars, tensors[i].mu_product);
    }
  }
  StepResult result;
  if (optim_uses_trust_ratio(cfg.kind)) {
    ws.partials.resize(std::size_t(2 * ws.offsets[n_tensors]));
    run_pass(cfg, tensors, n_tensors, ws, cpu::OptimPhase::norms, ws.partials.data());
    for (std::size_t i = 0; i < n_tensors; ++i) {
      double pp = 0.0, xx = 0.0;
      add_pair_sums(ws.partials.data(), ws.offsets[i], ws.offsets[i + 1], pp, xx);
      SlotScalars& h = tensors[i].scalars;
      h.trust = trust_ratio(cfg.kind, pp, xx, h.eta, h.weight_decay);
    }
    result.skipped_blocks = run_pass(cfg, tensors, n_tensors, ws, cpu::OptimPhase::apply, nullptr);
  } else {
    result.skipped_blocks = run_pass(cfg, tensors, n_tensors, ws, cpu::OptimPhase::single, nullptr);
  }
  return result;
}

}  // namespace octopt
