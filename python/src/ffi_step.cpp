// XLA FFI handler, CPU: one optimizer step of every tensor of a call in one octopt::step (one
// parallel region), built against the headers jaxlib ships (jax.ffi.include_dir()); nothing links
// against jaxlib. Operands, results and attributes: ffi_operands.hpp.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "ffi_operands.hpp"
#include "ffi_step.hpp"
#include "octopt/optim.hpp"
#include "octopt/step_setup.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

using octopt_ffi::bad;
using octopt_ffi::kFn;

// Everything numeric is the core's: the hyper-parameters and the step's scalars (octopt::setup_step),
// NAdam's running mu_product (the call's tensor_scalars, advanced by octopt::step) and the updates
// (octopt::params_to_updates). This reads the operands and says where the results go.
ffi::Error StepImpl(ffi::Buffer<ffi::F32> hp_dynamic, ffi::Buffer<ffi::S32> step_buf, ffi::AnyBuffer scalars_in,
                    ffi::RemainingArgs in, ffi::Result<ffi::AnyBuffer> scalars_out, ffi::RemainingRets out,
                    std::int64_t kind, std::int64_t mode, ffi::Span<const double> hp_static, std::int64_t dynamic_mask,
                    std::int64_t flags, std::int64_t seed, ffi::Span<const std::int64_t> block_sizes,
                    ffi::Span<const std::int64_t> slot_bits, ffi::Span<const std::int64_t> slot_stochastic,
                    ffi::Span<const std::int64_t> slot_codebooks, ffi::Span<const std::int64_t> rng_streams) {
  using octopt_ffi::kNumHyperParams;
  const octopt_ffi::Attrs a{kind,        mode,      hp_static,       dynamic_mask,   flags,      seed,
                            block_sizes, slot_bits, slot_stochastic, slot_codebooks, rng_streams};
  if (ffi::Error e = octopt_ffi::check_attrs(a, hp_dynamic.element_count()); !e.success()) return e;
  if (step_buf.element_count() != 1) return bad("internal: the step must be a scalar");
  const std::int64_t step = step_buf.typed_data()[0];
  try {
    double values[kNumHyperParams];
    for (std::size_t k = 0; k < kNumHyperParams; ++k)
      values[k] = (dynamic_mask >> k) & 1 ? double(hp_dynamic.typed_data()[k]) : hp_static[k];
    const octopt::HyperParams h = octopt::hparams_from_values(values, flags, kFn);
    const octopt::OptimKind k = octopt::OptimKind(kind);
    const octopt::StepSetup setup = octopt::setup_step(k, octopt_ffi::step_options(a), step, &h, step, kFn);
    // XLA may run independent custom calls on several threads: per-thread scratch
    thread_local octopt_ffi::Tensors tensors;
    thread_local octopt::StepWorkspace ws;
    if (ffi::Error e = octopt_ffi::take_tensors(scalars_in, *scalars_out, in, out, a, tensors); !e.success()) return e;
    for (const octopt_ffi::Copy& c : tensors.copies) std::memcpy(c.dst, c.src, c.bytes);
    const std::size_t n_tensors = tensors.steps.size();
    for (octopt::StepTensor& s : tensors.steps) s.scalars = setup.scalars;
    octopt::load_tensor_scalars(k, tensors.scalars, tensors.steps.data(), n_tensors);
    octopt::validate_step(setup.cfg, tensors.steps.data(), n_tensors, kFn);
    octopt::step(setup.cfg, tensors.steps.data(), n_tensors, ws);
    octopt::store_tensor_scalars(k, tensors.steps.data(), n_tensors, tensors.scalars);
    if (mode == octopt_ffi::kUpdates)
      octopt::params_to_updates(tensors.steps.data(), tensors.params_in.data(), n_tensors);
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
