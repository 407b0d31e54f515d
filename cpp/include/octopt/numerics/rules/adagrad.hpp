#pragma once
// Adagrad as torch.optim.Adagrad: a sum of squared gradients from initial_accumulator_value, lr_decay.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::adagrad> : RuleDefaults {
  static constexpr const char* name = "adagrad";
  static constexpr const char* class_name = "Adagrad";
  static constexpr const char* summary = "torch.optim.Adagrad semantics (lr_decay, initial_accumulator_value).";
  static constexpr SlotSpec slots[] = {{"sum", false, false, SlotUse::always, SlotInit::initial_accumulator}};
  static constexpr std::array options{"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "maximize"};
  static constexpr int num_betas = 0;
  static constexpr std::array defaults{HParamValue{HParam::lr, 1e-2}, HParamValue{HParam::eps, 1e-10}};

  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    s.step_size = float(hp.lr / (1.0 + (t - 1.0) * hp.lr_decay));
  }
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    g = g + h.weight_decay * p;
    s[0] = s[0] + g * g;
    return p - h.step_size * (g / (rule_sqrt(s[0]) + h.eps));
  }
};

}  // namespace octopt
