#pragma once
// RMSprop as torch.optim.RMSprop, with optional momentum and centering (and optax's eps inside the square root).
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::rmsprop> : RuleDefaults {
  static constexpr const char* name = "rmsprop";
  static constexpr const char* class_name = "RMSprop";
  static constexpr const char* summary = "torch.optim.RMSprop semantics, with optional momentum and centering.";
  static constexpr SlotSpec slots[] = {{"square_avg", false, false},
                                       {"momentum_buffer", true, true, SlotUse::momentum_positive},
                                       {"grad_avg", true, false, SlotUse::centered}};
  static constexpr std::array options{"lr",       "alpha",    "eps",      "weight_decay",
                                      "momentum", "centered", "maximize", "eps_in_sqrt"};
  static constexpr int num_betas = 0;
  static constexpr std::array defaults{HParamValue{HParam::lr, 1e-2}};
  // alpha is a smoothing constant here (AdEMAMix's alpha, a mixing weight, may exceed 1)
  static constexpr std::array bounds{HParamBound{HParam::alpha, 0.0, 1.0, true}};

  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    // s[0]: square average, s[1]: momentum buffer, s[2]: gradient average (centered)
    g = g + h.weight_decay * p;
    s[0] = s[0] * h.alpha + h.one_minus_alpha * g * g;
    float var = s[0];
    if (h.flags & kCentered) {
      s[2] = rule_lerp(s[2], g, h.one_minus_alpha);
      var = s[0] - s[2] * s[2];
    }
    const float avg = (h.flags & kEpsInSqrt) ? rule_sqrt(var + h.eps) : rule_sqrt(var) + h.eps;
    if (h.momentum > 0.0f) {
      s[1] = s[1] * h.momentum + g / avg;
      return p - h.lr * s[1];
    }
    return p - h.lr * (g / avg);
  }
};

}  // namespace octopt
