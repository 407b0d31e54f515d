// XLA FFI handler, CUDA: one optimizer step of every tensor of a call in one fused kernel launch
// of the CUDA backend (LAMB/LARS: two), enqueued on XLA's stream. Same operands, results and
// attributes as the CPU handler (ffi_operands.hpp). During the call nothing synchronizes with the
// host, allocates device or pinned memory, or copies from pageable memory: unaliased operands are
// copied device to device on the stream, and every table of the call lives in XLA's scratch
// memory (cuda/scratch_step.hpp says how it gets there). The step count and the traced
// hyper-parameters stay on the device, so a step that cannot be taken (a non-finite traced
// hyper-parameter) cannot raise: it leaves every tensor unchanged (docs/jax.md).
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "ffi_operands.hpp"
#include "ffi_step.hpp"
#include "octopt/step_setup.hpp"
#include "xla/ffi/api/ffi.h"
#include "scratch_step.hpp"

namespace ffi = xla::ffi;

namespace {

using octopt_ffi::bad;
using octopt_ffi::kFn;

ffi::Error cuda_error(cudaError_t err, const char* what) {
  return ffi::Error::Internal(std::string(kFn) + ": " + what + ": " + cudaGetErrorString(err));
}

ffi::Error StepCudaImpl(cudaStream_t stream, ffi::ScratchAllocator scratch, ffi::Buffer<ffi::F32> hp_dynamic,
                        ffi::Buffer<ffi::S32> step_buf, ffi::AnyBuffer scalars_in, ffi::RemainingArgs in,
                        ffi::Result<ffi::AnyBuffer> scalars_out, ffi::RemainingRets out, std::int64_t kind,
                        std::int64_t mode, ffi::Span<const double> hp_static, std::int64_t dynamic_mask,
                        std::int64_t flags, std::int64_t seed, ffi::Span<const std::int64_t> block_sizes,
                        ffi::Span<const std::int64_t> slot_bits, ffi::Span<const std::int64_t> slot_stochastic,
                        ffi::Span<const std::int64_t> slot_codebooks, ffi::Span<const std::int64_t> rng_streams) {
  using octopt::kNumHyperParams;
  const octopt_ffi::Attrs a{kind,        mode,      hp_static,       dynamic_mask,   flags,      seed,
                            block_sizes, slot_bits, slot_stochastic, slot_codebooks, rng_streams};
  if (ffi::Error e = octopt_ffi::check_attrs(a, hp_dynamic.element_count()); !e.success()) return e;
  if (step_buf.element_count() != 1) return bad("internal: the step must be a scalar");
  try {
    // The static hyper-parameters are checked here as the CPU handler checks them all (the traced ones
    // are zero here; the device checks them); the scalars are derived on the device.
    double values[kNumHyperParams];
    for (std::size_t k = 0; k < kNumHyperParams; ++k) values[k] = (dynamic_mask >> k) & 1 ? 0.0 : hp_static[k];
    (void)octopt::hparams_from_values(values, flags, kFn);
    thread_local octopt_ffi::Tensors tensors;  // per thread: XLA may run custom calls concurrently
    if (ffi::Error e = octopt_ffi::take_tensors(scalars_in, *scalars_out, in, out, a, tensors); !e.success()) return e;
    octopt::cuda::xla::Call call;
    call.cfg = octopt::setup_step(octopt::OptimKind(kind), octopt_ffi::step_options(a), 0, nullptr, 0, kFn).cfg;
    call.tensors = tensors.steps.data();
    call.n = tensors.steps.size();
    call.params_in = mode == octopt_ffi::kUpdates ? tensors.params_in.data() : nullptr;
    call.hp_dynamic = hp_dynamic.typed_data();
    call.step = step_buf.typed_data();
    call.tensor_scalars = tensors.scalars;
    for (std::size_t k = 0; k < kNumHyperParams; ++k) call.hp_static[k] = hp_static[k];
    call.dynamic_mask = dynamic_mask;
    call.flags = flags;
    const octopt::cuda::xla::Launch launch(call, kFn);  // validates before anything is enqueued

    std::optional<void*> region = scratch.Allocate(launch.scratch_bytes(), launch.scratch_alignment());
    if (!region.has_value() || *region == nullptr)
      return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(kFn) + ": could not allocate " +
                                                                std::to_string(launch.scratch_bytes()) +
                                                                " bytes of XLA scratch memory");
    for (const octopt_ffi::Copy& c : tensors.copies)
      if (cudaError_t err = cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream);
          err != cudaSuccess)
        return cuda_error(err, "cudaMemcpyAsync of an operand into its result");
    launch.enqueue(*region, stream);
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(kFn) + ": unknown error in the CUDA optimizer step");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    OctoptStepCuda, StepCudaImpl,
    octopt_ffi::bind_step(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::ScratchAllocator>()));

void* octopt_ffi::step_cuda_handler() { return reinterpret_cast<void*>(&OctoptStepCuda); }
