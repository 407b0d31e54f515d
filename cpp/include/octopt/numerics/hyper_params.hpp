#pragma once
// Hyper-parameters of a parameter group and the per-step scalars derived from them. The
// derivation is written once for the host (CPU backend) and the device (CUDA backend, which
// computes it from its device-resident step counters so that a captured CUDA graph stays correct
// on replay).
#include <math.h>

#include <cstdint>

#include "../config.hpp"
#include "schedules.hpp"
#include "step_scalars.hpp"
#include "update_rules.hpp"

namespace octopt {

// Hyper-parameters of a parameter group, as the user sets them.
struct HyperParams {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, beta3 = 0.9999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double alpha = 0.99;  // RMSprop smoothing; AdEMAMix mixing weight
  bool centered = false;
  double lr_decay = 0.0;                // Adagrad
  double eta = 1e-3;                    // LARS trust coefficient
  double t_alpha = 0.0, t_beta3 = 0.0;  // AdEMAMix warm-up lengths in steps (0: none)
  bool bias_correction = true;          // LAMB
  bool maximize = false;
  bool decoupled_weight_decay = false;  // RAdam, NAdam: AdamW-style decay instead of L2 (torch's flag)
  double momentum_decay = 4e-3;         // NAdam: psi of the momentum schedule mu_t
  bool eps_in_sqrt = false;             // RMSprop: sqrt(v + eps) instead of sqrt(v) + eps (optax's form)
};

OCTOPT_HD double scalar_min(double a, double b) { return b < a ? b : a; }  // std::min's choice on ties

// The step's scalars for a tensor that has now taken `step` steps (step >= 1), in double
// precision, rounded to float32 once. Callers check step >= 1.
// Host and device share this code; the only possible difference is the last bit of the
// double-precision pow/exp/log of the two math libraries (see docs/cuda.md).
OCTOPT_HD SlotScalars scalars_for_step(OptimKind kind, const HyperParams& hp, std::int64_t step) {
  const double t = double(step);
  double alpha = hp.alpha, beta3 = hp.beta3;
  if (kind == OptimKind::ademamix) {
    // Pagliardini et al. 2024: linear warm-up of alpha, and beta3 warmed up so that the EMA's
    // half-life grows linearly from beta1's to beta3's.
    if (hp.t_alpha > 0) alpha = scalar_min(t * hp.alpha / hp.t_alpha, hp.alpha);
    if (hp.t_beta3 > 0) {
      const double lb1 = ::log(hp.beta1), lb3 = ::log(hp.beta3);
      const double f = scalar_min(t / hp.t_beta3, 1.0);
      beta3 = scalar_min(::exp(lb1 * lb3 / ((1.0 - f) * lb3 + f * lb1)), hp.beta3);
    }
  }
  double bc1 = 1.0 - ::pow(hp.beta1, t);
  double bc2 = 1.0 - ::pow(hp.beta2, t);
  if (kind == OptimKind::lamb && !hp.bias_correction) bc1 = bc2 = 1.0;
  SlotScalars s{};
  s.lr = float(hp.lr);
  s.beta1 = float(hp.beta1);
  s.beta2 = float(hp.beta2);
  s.beta3 = float(beta3);
  s.one_minus_beta1 = float(1.0 - hp.beta1);
  s.one_minus_beta2 = float(1.0 - hp.beta2);
  s.one_minus_beta3 = float(1.0 - beta3);
  s.eps = float(hp.eps);
  s.weight_decay = float(hp.weight_decay);
  s.momentum = float(hp.momentum);
  s.one_minus_dampening = float(1.0 - hp.dampening);
  s.alpha = float(alpha);
  s.one_minus_alpha = float(1.0 - alpha);
  s.step_size = kind == OptimKind::adagrad ? float(hp.lr / (1.0 + (t - 1.0) * hp.lr_decay)) : float(hp.lr / bc1);
  s.bc1 = float(bc1);
  s.bc2_sqrt = float(::sqrt(bc2));
  s.decay = float(1.0 - hp.lr * hp.weight_decay);
  s.eta = float(hp.eta);
  s.trust = 1.0f;
  s.flags = (hp.nesterov ? kNesterov : 0u) | (hp.centered ? kCentered : 0u) | (step == 1 ? kFirstStep : 0u) |
            (hp.maximize ? kMaximize : 0u) | (hp.eps_in_sqrt ? kEpsInSqrt : 0u);
  s.bc2 = float(bc2);
  s.rect = 1.0f;
  if (kind == OptimKind::radam || kind == OptimKind::nadam) {
    // one of the two decays is a no-op: g + 0 p, p * 1
    if (hp.decoupled_weight_decay)
      s.weight_decay = 0.0f;
    else
      s.decay = 1.0f;
  }
  if (kind == OptimKind::radam) {
    const Rectification r = radam_rectification(hp.beta2, t);
    s.rect = float(r.rect);
    if (r.rectified) s.flags |= kRectified;
  } else if (kind == OptimKind::nadam) {
    s.nadam_lr = hp.lr;
    s.nadam_mu = nadam_mu(hp.beta1, hp.momentum_decay, t);
    s.nadam_mu_next = nadam_mu(hp.beta1, hp.momentum_decay, t + 1.0);
  }
  return s;
}

}  // namespace octopt
