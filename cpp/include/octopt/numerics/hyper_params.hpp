#pragma once
// Hyper-parameters of a parameter group and the per-step scalars derived from them. The
// derivation is written once for the host (CPU backend) and the device (CUDA backend, which
// computes it from its device-resident step counters so that a captured CUDA graph stays correct
// on replay).
#include <math.h>

#include <cstdint>

#include "../config.hpp"
#include "schedules.hpp"
#include "hyper_param_set.hpp"
#include "optim_rules.hpp"
#include "step_scalars.hpp"

namespace octopt {

// The step's scalars for a tensor that has now taken `step` steps (step >= 1), in double
// precision, rounded to float32 once. Callers check step >= 1.
// Host and device share this code; the only possible difference is the last bit of the
// double-precision pow/exp/log of the two math libraries (see docs/cuda.md).
OCTOPT_HD SlotScalars scalars_for_step(OptimKind kind, const HyperParams& hp, std::int64_t step) {
  const double t = double(step);
  const double bc1 = 1.0 - ::pow(hp.beta1, t);
  const double bc2 = 1.0 - ::pow(hp.beta2, t);
  SlotScalars s{};
  s.lr = float(hp.lr);
  s.beta1 = float(hp.beta1);
  s.beta2 = float(hp.beta2);
  s.beta3 = float(hp.beta3);
  s.one_minus_beta1 = float(1.0 - hp.beta1);
  s.one_minus_beta2 = float(1.0 - hp.beta2);
  s.one_minus_beta3 = float(1.0 - hp.beta3);
  s.eps = float(hp.eps);
  s.weight_decay = float(hp.weight_decay);
  s.momentum = float(hp.momentum);
  s.one_minus_dampening = float(1.0 - hp.dampening);
  s.alpha = float(hp.alpha);
  s.one_minus_alpha = float(1.0 - hp.alpha);
  s.step_size = float(hp.lr / bc1);
  s.bc1 = float(bc1);
  s.bc2_sqrt = float(::sqrt(bc2));
  s.decay = float(1.0 - hp.lr * hp.weight_decay);
  s.eta = float(hp.eta);
  s.trust = 1.0f;
  s.flags = (hp.nesterov ? kNesterov : 0u) | (hp.centered ? kCentered : 0u) | (step == 1 ? kFirstStep : 0u) |
            (hp.maximize ? kMaximize : 0u) | (hp.eps_in_sqrt ? kEpsInSqrt : 0u);
  s.bc2 = float(bc2);
  s.rect = 1.0f;
  // the optimizer's own scalars (warm-ups, rectification, schedules; rules/<name>.hpp)
  visit_optim(kind, [&](auto k) { OptimRule<decltype(k)::value>::scalars(s, hp, t); });
  return s;
}

}  // namespace octopt
