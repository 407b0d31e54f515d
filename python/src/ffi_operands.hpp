#pragma once
// What the CPU and CUDA step handlers share: the check of the attributes and the reading of the
// operands and results into StepTensors; the layout sizes, the per-tensor scalar state and the
// step's configuration come from the core (octopt/step_setup.hpp), so the handlers hold no numerics.
// Operands (both handlers): hp_dynamic (f32[kNumHyperParams]), step (s32[], the step being taken,
// 1-based), tensor_scalars (f32[n_tensors * k], each tensor's per-tensor scalar state, k =
// octopt::tensor_scalar_defs(kind).size(): NAdam's mu_product, else none), then per tensor: param,
// grad, and per used state slot its data (f32 values or u8 codes) and, when quantized, its absmax.
// Results: tensor_scalars advanced by the step, then per tensor the param-dtype tensor (updates
// p_new - p, or p_new) and its new state in operand order. Results may alias their operands
// (input_output_aliases); when they do not, the handler copies the operand into the result first
// (CPU: memcpy; CUDA: on the stream), so it never writes an operand.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "octopt/optim.hpp"
#include "octopt/step_setup.hpp"
#include "xla/ffi/api/ffi.h"

namespace octopt_ffi {

namespace ffi = xla::ffi;

inline constexpr const char* kFn = "octopt.optax";

struct Attrs {
  std::int64_t kind, mode;
  ffi::Span<const double> hp_static;
  std::int64_t dynamic_mask, flags, seed;
  ffi::Span<const std::int64_t> block_sizes, slot_bits, slot_stochastic, slot_codebooks, rng_streams;
};

// An operand to copy into its (unaliased) result before the step.
struct Copy {
  const void* src;
  void* dst;
  std::size_t bytes;
};

// The tensors of a call: steps point at the results; params_in[t] is tensor t's parameter operand.
struct Tensors {
  std::vector<octopt::StepTensor> steps;  // one per tensor: what octopt::step reads
  std::vector<const void*> params_in;
  std::vector<Copy> copies;
  float* scalars = nullptr;  // the tensor_scalars result (octopt::load_tensor_scalars' layout)
};

ffi::Error bad(const std::string& what);

// Checks the attributes that do not depend on the buffers (kind, mode, array lengths).
ffi::Error check_attrs(const Attrs& a, std::size_t n_hp_dynamic);

// Reads every tensor's buffers (checking dtypes and sizes) and the tensor_scalars operand and result
// into `out` (cleared first).
ffi::Error take_tensors(const ffi::AnyBuffer& scalars_in, ffi::AnyBuffer scalars_out, const ffi::RemainingArgs& in,
                        const ffi::RemainingRets& res, const Attrs& a, Tensors& out);

// Appends the operands, results and attributes both handlers take to `b` (after their contexts).
template <class Binding>
auto bind_step(Binding b) {
  return std::move(b)
      .template Arg<ffi::Buffer<ffi::F32>>()  // hp_dynamic
      .template Arg<ffi::Buffer<ffi::S32>>()  // step
      .template Arg<ffi::AnyBuffer>()         // tensor_scalars
      .RemainingArgs()                        // per tensor: param, grad, state
      .template Ret<ffi::AnyBuffer>()         // tensor_scalars after the step
      .RemainingRets()                        // per tensor: updates or new param, state
      .template Attr<std::int64_t>("kind")
      .template Attr<std::int64_t>("mode")
      .template Attr<ffi::Span<const double>>("hp_static")
      .template Attr<std::int64_t>("dynamic_mask")
      .template Attr<std::int64_t>("flags")
      .template Attr<std::int64_t>("seed")
      .template Attr<ffi::Span<const std::int64_t>>("block_sizes")
      .template Attr<ffi::Span<const std::int64_t>>("slot_bits")
      .template Attr<ffi::Span<const std::int64_t>>("slot_stochastic")
      .template Attr<ffi::Span<const std::int64_t>>("slot_codebooks")
      .template Attr<ffi::Span<const std::int64_t>>("rng_streams");
}

// The step options of a call (seed, stochastic rounding flags), for octopt::setup_step.
octopt::StepOptions step_options(const Attrs& a);

}  // namespace octopt_ffi
