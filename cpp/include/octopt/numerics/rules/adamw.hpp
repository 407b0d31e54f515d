#pragma once
// AdamW (Loshchilov and Hutter 2019) as torch.optim.AdamW: decoupled weight decay applied before the update.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::adamw> : RuleDefaults {
  static constexpr const char* name = "adamw";
  static constexpr const char* class_name = "AdamW";
  static constexpr const char* summary =
      "torch.optim.AdamW semantics: decoupled weight decay applied before the update.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}, {"exp_avg_sq", false, false}};
  static constexpr std::array options{"lr", "betas", "eps", "weight_decay", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr CpuKernel cpu_kernel = CpuKernel::adam_decoupled_decay;
  static constexpr std::array defaults{HParamValue{HParam::weight_decay, 1e-2}};

  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    p = p * h.decay;
    s[0] = rule_lerp(s[0], g, h.one_minus_beta1);
    s[1] = s[1] * h.beta2 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s[1]) / h.bc2_sqrt + h.eps;
    return p - h.step_size * (s[0] / denom);
  }
};

}  // namespace octopt
