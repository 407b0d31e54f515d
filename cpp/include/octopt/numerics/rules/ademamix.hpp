#pragma once
// AdEMAMix (Pagliardini et al. 2024, Alg. 1): Adam plus a slow EMA mixed in with weight alpha; optional warm-ups of
// alpha and beta3.
#include <math.h>

#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::ademamix> : RuleDefaults {
  static constexpr const char* name = "ademamix";
  static constexpr const char* class_name = "AdEMAMix";
  static constexpr const char* summary =
      "AdEMAMix (Pagliardini et al. 2024): Adam plus a slow EMA mixed in with weight alpha; optional "
      "warm-ups t_alpha and t_beta3 (in steps).";
  static constexpr SlotSpec slots[] = {{"m1", true, true}, {"nu", false, false}, {"m2", true, false}};
  static constexpr std::array options{"lr", "betas", "alpha", "t_alpha", "t_beta3", "eps", "weight_decay", "maximize"};
  static constexpr int num_betas = 3;
  static constexpr std::array defaults{HParamValue{HParam::alpha, 5.0}, HParamValue{HParam::weight_decay, 1e-2}};

  // linear warm-up of alpha, and beta3 warmed up so that the slow EMA's half-life grows linearly from beta1's to
  // beta3's
  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    double alpha = hp.alpha, beta3 = hp.beta3;
    if (hp.t_alpha > 0) alpha = scalar_min(t * hp.alpha / hp.t_alpha, hp.alpha);
    if (hp.t_beta3 > 0) {
      const double lb1 = ::log(hp.beta1), lb3 = ::log(hp.beta3);
      const double f = scalar_min(t / hp.t_beta3, 1.0);
      beta3 = scalar_min(::exp(lb1 * lb3 / ((1.0 - f) * lb3 + f * lb1)), hp.beta3);
    }
    s.beta3 = float(beta3);
    s.one_minus_beta3 = float(1.0 - beta3);
    s.alpha = float(alpha);
    s.one_minus_alpha = float(1.0 - alpha);
  }
  // s[0] fast EMA m1, s[1] second moment nu, s[2] slow EMA m2
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    s[0] = h.beta1 * s[0] + h.one_minus_beta1 * g;
    s[2] = h.beta3 * s[2] + h.one_minus_beta3 * g;
    s[1] = h.beta2 * s[1] + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s[1]) / h.bc2_sqrt + h.eps;
    return p * h.decay - h.lr * ((s[0] / h.bc1 + h.alpha * s[2]) / denom);
  }
};

}  // namespace octopt
