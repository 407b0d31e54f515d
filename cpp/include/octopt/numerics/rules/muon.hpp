#pragma once
// Muon's element-wise part (Jordan et al. 2024; torch.optim.Muon, optax.contrib.muon): the momentum step. The step's
// "parameter" is the direction buffer D that the caller's framework orthogonalizes by Newton-Schulz (a matrix
// operation octopt leaves to torch/JAX/NumPy matmul); the final update p (1 - lr wd) - adjusted_lr O is the core's
// muon_apply (octopt/muon.hpp). So lr and weight_decay are group options that the Python surfaces read, not this rule.
#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::muon> : RuleDefaults {
  static constexpr const char* name = "muon";
  static constexpr const char* class_name = "Muon";
  static constexpr const char* summary =
      "Muon (torch.optim.Muon; bias_correction=True: optax.contrib.muon): the momentum step writes the direction "
      "that the caller orthogonalizes; the final update is muon_apply.";
  static constexpr SlotSpec slots[] = {{"momentum_buffer", true, true}};
  static constexpr std::array options{"lr", "weight_decay", "momentum", "nesterov", "eps", "bias_correction"};
  static constexpr int num_betas = 0;
  static constexpr bool direction_step = true;
  static constexpr std::array defaults{HParamValue{HParam::lr, 1e-3},       HParamValue{HParam::weight_decay, 0.1},
                                       HParamValue{HParam::momentum, 0.95}, HParamValue{HParam::nesterov, 1.0},
                                       HParamValue{HParam::eps, 1e-7},      HParamValue{HParam::bias_correction, 0.0}};

  // torch rounds its lerp weights 1 - momentum and momentum to float32 once; optax divides by 1 - beta^t and,
  // for its Nesterov term, by 1 - beta^(t+1) (bc1 and bc2 here; double, rounded once).
  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    s.beta1 = float(hp.momentum);
    s.one_minus_beta1 = float(1.0 - hp.momentum);
    if (hp.bias_correction) {
      s.flags |= kBiasCorrected;
      s.bc1 = float(1.0 - ::pow(hp.momentum, t));
      s.bc2 = float(1.0 - ::pow(hp.momentum, t + 1.0));
    }
  }
  // torch's vectorized CPU lerp: fma(w, b - a, a) for w < 0.5, else fma(w - 1, b - a, b). Newton-Schulz runs in
  // bfloat16, which would turn a last-bit difference of D into a bfloat16 one, so D follows torch's roundings.
  static OCTOPT_HD float lerp_fused(float a, float b, float w) {
    return w < 0.5f ? rule_fma(w, b - a, a) : rule_fma(w - 1.0f, b - a, b);
  }
  // returns the direction D; the parameter argument (D's previous value) is not read
  static OCTOPT_HD float update(const SlotScalars& h, float, float g, SlotValues& s, float*) {
    if (h.flags & kBiasCorrected) {  // optax: mu = (1 - b) g + b mu, then bias-corrected (Nesterov: two terms)
      s[0] = h.one_minus_beta1 * g + h.beta1 * s[0];
      return (h.flags & kNesterov) ? h.beta1 * (s[0] / h.bc2) + h.one_minus_beta1 * (g / h.bc1) : s[0] / h.bc1;
    }
    s[0] = lerp_fused(s[0], g, h.one_minus_beta1);  // torch: buf.lerp_(grad, 1 - momentum)
    return (h.flags & kNesterov) ? lerp_fused(g, s[0], h.beta1) : s[0];
  }
};

}  // namespace octopt
