#pragma once
// The stateless part of a step: what a step of caller-owned state needs besides its buffers, derived
// from plain values. StepPlan (its groups, tensors and counters) and the XLA FFI handlers of
// octopt.optax (their attributes and operands, CPU and CUDA) all go through these functions, so the
// layout sizes, the per-tensor scalar state, the checks, the StepConfig and the per-step scalars are
// defined once; the callers only say where the buffers are. Nothing here keeps state between calls:
// a value that lives from one step to the next (the step count, NAdam's mu_product) is the caller's,
// handed in and handed back.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "optim.hpp"

namespace octopt {

// ---- layout -------------------------------------------------------------------------------------

// The buffers of one state slot of a tensor of `n` elements in blocks of `block_size`: `values`
// elements (float32 at 32 bits; code bytes at 8 bits; two 4-bit codes per byte) of `value_bytes`
// bytes, and `absmax` float32 scales (one per block; none at 32 bits). Throws std::invalid_argument
// for bits other than 32, 8 and 4.
struct SlotExtent {
  std::size_t values = 0;
  std::size_t value_bytes = 0;
  std::size_t absmax = 0;
};
SlotExtent slot_extent(int bits, std::int64_t n, int block_size);

// ---- per-tensor scalar state ----------------------------------------------------------------------

// A number a tensor carries from one step to the next beside its state slots, kept by the caller (a
// StepPlan's tensors, torch's state dict, octopt.optax's state): NAdam's running product of its
// momentum coefficients, torch's state['mu_product']. octopt::step reads it from StepTensor and
// advances it there (CPU); the CUDA kernels advance it in their tables.
// The per-tensor scalars of `kind`, in the order a flat array of them holds each tensor's (see
// load_tensor_scalars). Empty for optimizers without any.
std::vector<TensorScalarDef> tensor_scalar_defs(OptimKind kind);

// A flat array of per-tensor scalar state, tensor after tensor, each tensor's in tensor_scalar_defs'
// order (n_tensors * tensor_scalar_defs(kind).size() floats): the form the XLA handlers' operand
// and result `tensor_scalars` take. load copies the values into the tensors, store copies them back
// (after a step advanced them).
void load_tensor_scalars(OptimKind kind, const float* values, StepTensor* tensors, std::size_t n_tensors);
void store_tensor_scalars(OptimKind kind, const StepTensor* tensors, std::size_t n_tensors, float* values);

// The range of kind's per-tensor scalar as text ("[0, 1]"; "" without one), and why x cannot be that scalar
// ("mu_product must be in [0, 1]"), or "" when it can or kind has none (allocating only for the message).
std::string tensor_scalar_range(OptimKind kind);
std::string tensor_scalar_problem(OptimKind kind, double x);

// ---- the step's configuration and scalars ---------------------------------------------------------

// Options of a step that are not hyper-parameters (a StepPlan's PlanOptions; the XLA handlers'
// `seed` and `flags`).
struct StepOptions {
  std::uint64_t seed = 0;         // keys stochastic rounding
  bool stochastic_state = false;  // stochastic rounding of every quantized state's codes
  bool stochastic_bf16 = false;   // stochastic rounding of bf16 parameter writes
  float percentile = 0.0f;        // > 0: block scale = this percentile (0-100] of |x|
};

struct StepSetup {
  StepConfig cfg;         // kind, the core's codebooks (state_codebooks()), seed, global step, options
  SlotScalars scalars{};  // of a tensor taking its step `tensor_step` under `hp` (when hp was given)
};

// Checks the options, builds the StepConfig of global step `global_step` and, when `hp` is given,
// the scalars of a tensor taking its step `tensor_step` (>= 1; bias corrections and schedules in
// double precision: scalars_for_step). Without `hp` the scalars are left to the CUDA kernels, which
// derive them on the device from the same OCTOPT_HD code. Throws std::invalid_argument naming `fn`.
StepSetup setup_step(OptimKind kind, const StepOptions& options, std::int64_t global_step,
                     const HyperParams* hp = nullptr, std::int64_t tensor_step = 0, const char* fn = "step");

// The HyperParams of the flat form of hparam_array.hpp (kNumHyperParams values and flag bits), each
// value finite: else std::invalid_argument naming `fn` and the hyper-parameter by its optax name.
HyperParams hparams_from_values(const double* values, long long flags, const char* fn);

// ---- updates ------------------------------------------------------------------------------------

// After a step of tensors whose parameters were copied first: param := param - params_in[t] for
// every tensor t (optax's updates, p_new - p), in float32 and rounded once to the parameter's dtype
// (numerics/convert.hpp's update_from_params, as the CUDA handler's kernel). Exact whenever p_new and
// p are within a factor of two of each other (Sterbenz; docs/jax.md).
void params_to_updates(const StepTensor* tensors, const void* const* params_in, std::size_t n_tensors);

}  // namespace octopt
