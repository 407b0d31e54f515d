// Host-side, double-precision preparation of a step: bias corrections and schedules.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "octopt/optim.hpp"

namespace octopt {
namespace {
constexpr const char* kNames[] = {"adam", "adamw", "sgd", "rmsprop", "adagrad", "lion", "ademamix", "lamb", "lars"};
}

const char* optim_name(OptimKind kind) { return kNames[int(kind)]; }

OptimKind parse_optim(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (int k = 0; k < int(sizeof kNames / sizeof *kNames); ++k)
    if (lower == kNames[k]) return OptimKind(k);
  throw std::invalid_argument("unknown optimizer '" + name + "'");
}

int optim_num_states(OptimKind kind) {
  switch (kind) {
    case OptimKind::adam:
    case OptimKind::adamw:
    case OptimKind::lamb: return 2;
    case OptimKind::ademamix:
    case OptimKind::rmsprop: return 3;
    default: return 1;
  }
}

SlotScalars compute_scalars(OptimKind kind, const HyperParams& hp, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("compute_scalars: step must be >= 1");
  const double t = double(step);
  double alpha = hp.alpha, beta3 = hp.beta3;
  if (kind == OptimKind::ademamix) {
    // Pagliardini et al. 2024: linear warm-up of alpha, and beta3 warmed up so that the EMA's
    // half-life grows linearly from beta1's to beta3's.
    if (hp.t_alpha > 0) alpha = std::min(t * hp.alpha / hp.t_alpha, hp.alpha);
    if (hp.t_beta3 > 0) {
      const double lb1 = std::log(hp.beta1), lb3 = std::log(hp.beta3);
      const double f = std::min(t / hp.t_beta3, 1.0);
      beta3 = std::min(std::exp(lb1 * lb3 / ((1.0 - f) * lb3 + f * lb1)), hp.beta3);
    }
  }
  double bc1 = 1.0 - std::pow(hp.beta1, t);
  double bc2 = 1.0 - std::pow(hp.beta2, t);
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
  s.bc2_sqrt = float(std::sqrt(bc2));
  s.decay = float(1.0 - hp.lr * hp.weight_decay);
  s.eta = float(hp.eta);
  s.trust = 1.0f;
  s.flags = (hp.nesterov ? kNesterov : 0u) | (hp.centered ? kCentered : 0u) | (step == 1 ? kFirstStep : 0u) |
            (hp.maximize ? kMaximize : 0u);
  return s;
}

}  // namespace octopt
