#pragma once
// Lion (Chen et al. 2023, Alg. 2): the sign of an interpolation drives the update, then the EMA moves.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::lion> : RuleDefaults {
  static constexpr const char* name = "lion";
  static constexpr const char* class_name = "Lion";
  static constexpr const char* summary =
      "Lion (Chen et al. 2023): sign of an interpolated momentum, decoupled weight decay.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}};
  static constexpr std::array options{"lr", "betas", "weight_decay", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr std::array defaults{HParamValue{HParam::lr, 1e-4}, HParamValue{HParam::beta2, 0.99}};

  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    const float c = h.beta1 * s[0] + h.one_minus_beta1 * g;
    s[0] = h.beta2 * s[0] + h.one_minus_beta2 * g;
    return p * h.decay - h.lr * rule_sign(c);
  }
};

}  // namespace octopt
