#pragma once
// LARS (You et al. 2017, Alg. 1): v = m v + lr * trust * (g + wd w); w = w - v.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::lars> : RuleDefaults {
  static constexpr const char* name = "lars";
  static constexpr const char* class_name = "LARS";
  static constexpr const char* summary =
      "LARS (You et al. 2017): momentum SGD with the per-tensor rate eta * ||w|| / (||g|| + wd ||w||).";
  static constexpr SlotSpec slots[] = {{"momentum_buffer", true, true, SlotUse::momentum_nonzero}};
  static constexpr std::array options{"lr", "momentum", "weight_decay", "eta", "maximize"};
  static constexpr int num_betas = 0;
  static constexpr std::array defaults{HParamValue{HParam::momentum, 0.9}};
  static constexpr TrustRatio trust = TrustRatio::lars;

  // u receives the direction g + wd w (the norms pass reads it)
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float* u_out) {
    const float d = g + h.weight_decay * p;
    if (u_out) *u_out = d;
    if (h.momentum != 0.0f) {
      s[0] = h.momentum * s[0] + h.lr * h.trust * d;
      return p - s[0];
    }
    return p - h.lr * h.trust * d;
  }
};

}  // namespace octopt
