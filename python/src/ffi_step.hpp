#pragma once
// The XLA FFI handlers of octopt.optax: one optimizer step of any number of tensors, on the CPU
// (one octopt::step over their ParamSlots, as octopt.Optimizer) and, when built with CUDA, on a GPU
// (one fused kernel launch, as the CUDA backend). Declared here without XLA headers so that the
// binding can export them whether or not they were built.
#include "octopt/numerics/hparam_array.hpp"
#include "octopt/optim_table.hpp"

namespace octopt_ffi {

// Float hyper-parameters in the order of the handlers' `hp_dynamic` operand and `hp_static`
// attribute (the optax argument names), and the bits of their `flags` attribute.
using octopt::kNumHyperParams;

// What the handlers' first result holds (`mode` attribute).
enum Mode : long long { kUpdates = 0, kParams = 1 };

// The handlers, as XLA_FFI_Handler* (null when octopt was built without the XLA FFI headers, or,
// for the CUDA one, without CUDA).
void* step_cpu_handler();
void* step_cuda_handler();

}  // namespace octopt_ffi
