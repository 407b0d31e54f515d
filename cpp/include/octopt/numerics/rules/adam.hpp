#pragma once
// Adam (Kingma and Ba 2015) as torch.optim.Adam: L2 weight decay added to the gradient (skipped at 0, as torch does).
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::adam> : RuleDefaults {
  static constexpr const char* name = "adam";
  static constexpr const char* class_name = "Adam";
  static constexpr const char* summary = "torch.optim.Adam semantics: L2 weight decay added to the gradient.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}, {"exp_avg_sq", false, false}};
  static constexpr std::array options{"lr", "betas", "eps", "weight_decay", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr CpuKernel cpu_kernel = CpuKernel::adam_l2_decay;
  static constexpr std::array<HParamValue, 0> defaults{};

  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    if (h.weight_decay != 0.0f) g = g + h.weight_decay * p;
    s[0] = rule_lerp(s[0], g, h.one_minus_beta1);
    s[1] = s[1] * h.beta2 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s[1]) / h.bc2_sqrt + h.eps;
    return p - h.step_size * (s[0] / denom);
  }
};

}  // namespace octopt
