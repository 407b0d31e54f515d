#pragma once
// Hyper-parameters as a flat array of doubles plus flag bits: the form in which the XLA FFI
// handlers of octopt.optax receive them (operand `hp_dynamic`, attributes `hp_static` and `flags`).
// The order lives only here; Python reads it through _octopt.xla_ffi_hyperparam_names(). Shared by
// the CPU handler (host) and the CUDA handler, which builds its HyperParams on the device.
#include <cstddef>

#include "../config.hpp"
#include "hyper_params.hpp"

namespace octopt {

inline constexpr const char* kHyperParamNames[] = {"learning_rate", "b1",      "b2",     "b3",  "eps",
                                                   "weight_decay",  "momentum", "dampening", "alpha",
                                                   "lr_decay",      "eta",      "t_alpha", "t_beta3"};
inline constexpr std::size_t kNumHyperParams = sizeof kHyperParamNames / sizeof *kHyperParamNames;

// Bits of the handlers' `flags` attribute.
enum HyperParamFlags : long long {
  kHpNesterov = 1 << 0,
  kHpCentered = 1 << 1,
  kHpBiasCorrection = 1 << 2,
  kHpMaximize = 1 << 3,
  kHpStochasticState = 1 << 4,
  kHpStochasticBf16 = 1 << 5,
};

// The HyperParams of `hp` (kNumHyperParams values in kHyperParamNames order) and the flag bits.
OCTOPT_HD HyperParams hparams_from_array(const double* hp, long long flags) {
  HyperParams h;
  h.lr = hp[0];
  h.beta1 = hp[1];
  h.beta2 = hp[2];
  h.beta3 = hp[3];
  h.eps = hp[4];
  h.weight_decay = hp[5];
  h.momentum = hp[6];
  h.dampening = hp[7];
  h.alpha = hp[8];
  h.lr_decay = hp[9];
  h.eta = hp[10];
  h.t_alpha = hp[11];
  h.t_beta3 = hp[12];
  h.nesterov = (flags & kHpNesterov) != 0;
  h.centered = (flags & kHpCentered) != 0;
  h.bias_correction = (flags & kHpBiasCorrection) != 0;
  h.maximize = (flags & kHpMaximize) != 0;
  return h;
}

}  // namespace octopt
