// XLA FFI handler, CPU: one optimizer step of every tensor of a call in one octopt::step (one
// parallel region), built against the headers jaxlib ships (jax.ffi.include_dir()); nothing links
// against jaxlib. Operands, results and attributes: ffi_operands.hpp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "ffi_operands.hpp"
#include "ffi_step.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/optim.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using octopt_ffi::bad;
using octopt_ffi::kFn;

// updates = p_new - p, evaluated in float32 and rounded once to the parameter's dtype: exact
// whenever p_new and p are within a factor of two of each other (Sterbenz), see docs/jax.md.
// The CUDA handler's subtract kernel does the same arithmetic.
template <octopt::DType D>
void subtract(void* out, const void* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    octopt::store_f32<D>(out, i, octopt::load_f32<D>(out, i) - octopt::load_f32<D>(p, i));
}

ffi::Error StepImpl(ffi::Buffer<ffi::F32> hp_dynamic, ffi::Buffer<ffi::S32> step_buf, ffi::RemainingArgs in,
                    ffi::RemainingRets out, std::int64_t kind, std::int64_t mode, ffi::Span<const double> hp_static,
                    std::int64_t dynamic_mask, std::int64_t flags, std::int64_t seed,
                    ffi::Span<const std::int64_t> block_sizes, ffi::Span<const std::int64_t> slot_bits,
                    ffi::Span<const std::int64_t> slot_stochastic, ffi::Span<const std::int64_t> slot_codebooks,
                    ffi::Span<const std::int64_t> rng_streams) {
  using octopt_ffi::kNumHyperParams;
  const octopt_ffi::Attrs a{kind,        mode,      hp_static,       dynamic_mask,   flags,      seed,
                            block_sizes, slot_bits, slot_stochastic, slot_codebooks, rng_streams};
  if (ffi::Error e = octopt_ffi::check_attrs(a, hp_dynamic.element_count()); !e.success()) return e;
  if (step_buf.element_count() != 1) return bad("internal: the step must be a scalar");
  const std::int64_t step = step_buf.typed_data()[0];
  if (step < 1) return bad("the step count must be >= 1, got " + std::to_string(step));

  double hp[kNumHyperParams];
  for (std::size_t k = 0; k < kNumHyperParams; ++k) {
    hp[k] = (dynamic_mask >> k) & 1 ? double(hp_dynamic.typed_data()[k]) : hp_static[k];
    if (!std::isfinite(hp[k]))
      return bad(std::string("hyper-parameter '") + octopt::hparam_array_names()[k] + "' must be finite, got " +
                 std::to_string(hp[k]));
  }
  const octopt::HyperParams h = octopt::hparams_from_array(hp, flags);

  try {
    const octopt::StepConfig cfg = octopt_ffi::step_config(a, step);
    const octopt::SlotScalars scalars = octopt::compute_scalars(cfg.kind, h, step);
    // XLA may run independent custom calls on several threads: per-thread scratch
    thread_local octopt_ffi::Tensors tensors;
    thread_local octopt::StepWorkspace ws;
    if (ffi::Error e = octopt_ffi::take_tensors(in, out, a, tensors); !e.success()) return e;
    for (const octopt_ffi::Copy& c : tensors.copies) std::memcpy(c.dst, c.src, c.bytes);
    float mu_product = 1.0f;
    if (cfg.kind == octopt::OptimKind::nadam) {
      // The state holds no running product: it is a function of the step count, continued from the
      // previous call's value when the count moved on by one (the usual case), else replayed.
      thread_local double last_beta1 = -1.0, last_decay = -1.0;
      thread_local std::int64_t last_steps = 0;
      thread_local float last_product = 1.0f;
      const bool same = last_beta1 == h.beta1 && last_decay == h.momentum_decay && last_steps <= step - 1;
      mu_product = same ? octopt::nadam_mu_product_after(h.beta1, h.momentum_decay, step - 1, last_product, last_steps)
                        : octopt::nadam_mu_product_after(h.beta1, h.momentum_decay, step - 1);
      last_beta1 = h.beta1, last_decay = h.momentum_decay, last_steps = step - 1, last_product = mu_product;
    }
    for (octopt::StepTensor& s : tensors.steps) s.scalars = scalars, s.mu_product = mu_product;
    const std::size_t n_tensors = tensors.steps.size();
    octopt::validate_step(cfg, tensors.steps.data(), n_tensors, kFn);
    octopt::step(cfg, tensors.steps.data(), n_tensors, ws);
    if (mode == octopt_ffi::kUpdates) {
      for (std::size_t t = 0; t < n_tensors; ++t) {
        const octopt::StepTensor& s = tensors.steps[t];
        const void* p = tensors.params_in[t];
        switch (s.param_dtype) {
          case octopt::DType::f32:
            subtract<octopt::DType::f32>(s.param, p, s.n);
            break;
          case octopt::DType::f16:
            subtract<octopt::DType::f16>(s.param, p, s.n);
            break;
          case octopt::DType::bf16:
            subtract<octopt::DType::bf16>(s.param, p, s.n);
            break;
        }
      }
    }
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(kFn) + ": unknown error in the optimizer step");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(OctoptStepCpu, StepImpl, octopt_ffi::bind_step(ffi::Ffi::Bind()));

void* octopt_ffi::step_cpu_handler() { return reinterpret_cast<void*>(&OctoptStepCpu); }
