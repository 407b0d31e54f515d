#pragma once
// SGD as torch.optim.SGD: momentum, dampening, Nesterov; the buffer starts at the first gradient.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::sgd> : RuleDefaults {
  static constexpr const char* name = "sgd";
  static constexpr const char* class_name = "SGD";
  static constexpr const char* summary =
      "torch.optim.SGD semantics: momentum, dampening, Nesterov; the buffer starts at the first gradient.";
  static constexpr SlotSpec slots[] = {{"momentum_buffer", true, true, SlotUse::momentum_nonzero}};
  static constexpr std::array options{"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"};
  static constexpr int num_betas = 0;
  static constexpr std::array<HParamValue, 0> defaults{};

  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    float d = g + h.weight_decay * p;
    if (h.momentum != 0.0f) {
      s[0] = (h.flags & kFirstStep) ? d : s[0] * h.momentum + h.one_minus_dampening * d;
      d = (h.flags & kNesterov) ? d + h.momentum * s[0] : s[0];
    }
    return p - h.lr * d;
  }
};

}  // namespace octopt
