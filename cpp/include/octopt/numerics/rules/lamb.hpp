#pragma once
// LAMB (You et al. 2020, Alg. 2): the Adam direction plus decoupled decay, scaled per tensor by the trust ratio.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::lamb> : RuleDefaults {
  static constexpr const char* name = "lamb";
  static constexpr const char* class_name = "LAMB";
  static constexpr const char* summary =
      "LAMB (You et al. 2020): Adam direction plus decoupled decay, scaled per tensor by ||w|| / ||update||.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}, {"exp_avg_sq", false, false}};
  static constexpr std::array options{"lr", "betas", "eps", "weight_decay", "bias_correction", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr std::array defaults{HParamValue{HParam::eps, 1e-6}};
  static constexpr TrustRatio trust = TrustRatio::lamb;

  // without bias correction: bc1 = bc2 = 1
  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double) {
    if (hp.bias_correction) return;
    s.step_size = float(hp.lr);
    s.bc1 = 1.0f;
    s.bc2 = 1.0f;
    s.bc2_sqrt = 1.0f;
  }
  // the returned value is meaningful in the final phase only (trust filled in); u receives the direction
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float* u_out) {
    s[0] = h.beta1 * s[0] + h.one_minus_beta1 * g;
    s[1] = h.beta2 * s[1] + h.one_minus_beta2 * g * g;
    const float u = (s[0] / h.bc1) / (rule_sqrt(s[1]) / h.bc2_sqrt + h.eps) + h.weight_decay * p;
    if (u_out) *u_out = u;
    return p - h.lr * h.trust * u;
  }
};

}  // namespace octopt
