#pragma once
// RAdam (Liu et al. 2020) as torch.optim.RAdam: the Adam step scaled by the rectification term r_t while the
// variance is tractable (rho_t > 5, decided on the host), else the un-adapted momentum step.
#include "../optim_rule.hpp"
#include "../schedules.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::radam> : RuleDefaults {
  static constexpr const char* name = "radam";
  static constexpr const char* class_name = "RAdam";
  static constexpr const char* summary =
      "torch.optim.RAdam semantics: Adam with the variance rectification of Liu et al. 2020 (an SGD-like "
      "step while the second moment is unreliable); L2 or decoupled weight decay.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}, {"exp_avg_sq", false, false}};
  static constexpr std::array options{"lr", "betas", "eps", "weight_decay", "decoupled_weight_decay", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr std::array<HParamValue, 0> defaults{};

  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    // one of the two decays is a no-op: g + 0 p, p * 1
    if (hp.decoupled_weight_decay)
      s.weight_decay = 0.0f;
    else
      s.decay = 1.0f;
    const Rectification r = radam_rectification(hp.beta2, t);
    s.rect = float(r.rect);
    if (r.rectified) s.flags |= kRectified;
  }
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    g = g + h.weight_decay * p;
    p = p * h.decay;
    s[0] = rule_lerp(s[0], g, h.one_minus_beta1);
    s[1] = s[1] * h.beta2 + h.one_minus_beta2 * g * g;
    const float m_lr = (s[0] / h.bc1) * h.lr;
    const float adaptive = (1.0f / (rule_sqrt(s[1]) + h.eps)) * h.bc2_sqrt;  // torch: bc2**0.5 / (sqrt(v) + eps)
    return p - ((h.flags & kRectified) ? (m_lr * adaptive) * h.rect : m_lr);
  }
};

}  // namespace octopt
