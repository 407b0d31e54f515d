#pragma once
// The XLA FFI handler of octopt.optax: one optimizer step of any number of tensors, on the CPU, through the
// same core as octopt.Optimizer (one octopt::step over their ParamSlots). Declared here without XLA
// headers so that the binding can export it whether or not it was built.
#include <cstddef>

namespace octopt_ffi {

// Float hyper-parameters in the order of the handler's `hp_dynamic` operand and `hp_static`
// attribute (the optax argument names). Python reads this list, so the order lives only here.
inline constexpr const char* kHyperParamNames[] = {"learning_rate", "b1",      "b2",     "b3",  "eps",
                                                   "weight_decay",  "momentum", "dampening", "alpha",
                                                   "lr_decay",      "eta",      "t_alpha", "t_beta3"};
inline constexpr std::size_t kNumHyperParams = sizeof kHyperParamNames / sizeof *kHyperParamNames;

// Bits of the handler's `flags` attribute.
enum Flags : long long {
  kNesterov = 1 << 0,
  kCentered = 1 << 1,
  kBiasCorrection = 1 << 2,
  kMaximize = 1 << 3,
  kStochasticState = 1 << 4,
  kStochasticBf16 = 1 << 5,
};

// What the handler's first result holds (`mode` attribute).
enum Mode : long long { kUpdates = 0, kParams = 1 };

// The handler, an XLA_FFI_Handler* (null when octopt was built without the XLA FFI headers).
void* step_cpu_handler();

}  // namespace octopt_ffi
