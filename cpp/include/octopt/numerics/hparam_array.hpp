#pragma once
// Hyper-parameters as a flat array of doubles plus flag bits: the form in which the XLA FFI handlers
// of octopt.optax receive them (operand `hp_dynamic`, attributes `hp_static` and `flags`). The array
// holds the numbers of hparam_ids.hpp in HParam order; flag k of that order is bit k. Python reads the
// names through _octopt.xla_ffi_hyperparam_names() (the optimizer table's optax names). Shared by the
// CPU handler (host) and the CUDA handler, which builds its HyperParams on the device.
#include <cstddef>

#include "../config.hpp"
#include "hparam_ids.hpp"
#include "hyper_params.hpp"

namespace octopt {

inline constexpr std::size_t kNumHyperParams = std::size_t(kNumRealHParams);

// Bits of the handlers' `flags` attribute beyond the hyper-parameters' own (bits 0..15).
enum HyperParamFlags : long long {
  kHpStochasticState = 1 << 16,
  kHpStochasticBf16 = 1 << 17,
};

// The HyperParams of `hp` (kNumHyperParams values) and the flag bits.
OCTOPT_HD HyperParams hparams_from_array(const double* hp, long long flags) {
  HyperParams h;
  int real = 0, flag = 0;
  for (int k = 0; k < kNumHParams; ++k) {
    const HParam id = HParam(k);
    if (hparam_is_flag(id))
      set_hparam(h, id, double((flags >> flag++) & 1));
    else
      set_hparam(h, id, hp[real++]);
  }
  return h;
}

}  // namespace octopt
