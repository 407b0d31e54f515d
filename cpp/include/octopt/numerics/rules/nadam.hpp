#pragma once
// NAdam (Dozat 2016) as torch.optim.NAdam: the gradient and the momentum each take their own coefficient of the
// momentum schedule (nadam_grad, nadam_mom: schedules.hpp, bound per tensor from its running mu_product).
#include "../optim_rule.hpp"
#include "../schedules.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::nadam> : RuleDefaults {
  static constexpr const char* name = "nadam";
  static constexpr const char* class_name = "NAdam";
  static constexpr const char* summary =
      "torch.optim.NAdam semantics: Adam with Nesterov momentum and the momentum schedule of Dozat 2016 "
      "(momentum_decay); L2 or decoupled weight decay.";
  static constexpr SlotSpec slots[] = {{"exp_avg", true, true}, {"exp_avg_sq", false, false}};
  static constexpr std::array options{
      "lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay", "maximize"};
  static constexpr int num_betas = 2;
  static constexpr std::array defaults{HParamValue{HParam::lr, 2e-3}};
  // torch.optim.NAdam's state['mu_product'], the running product of the momentum coefficients: 1 before the first
  // step, advanced by each step (nadam_advance, schedules.hpp)
  static constexpr std::array tensor_scalars{TensorScalarDef{"mu_product", 1.0f, 0.0f, 1.0f}};

  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    if (hp.decoupled_weight_decay)
      s.weight_decay = 0.0f;
    else
      s.decay = 1.0f;
    s.nadam_lr = hp.lr;
    s.nadam_mu = nadam_mu(hp.beta1, hp.momentum_decay, t);
    s.nadam_mu_next = nadam_mu(hp.beta1, hp.momentum_decay, t + 1.0);
  }
  // mu_product moves to this step (times mu_t), then the coefficients of g and m come from it
  static OCTOPT_HD float advance(const SlotScalars& s, float mu_product) {
    return nadam_advance(mu_product, s.nadam_mu);
  }
  static OCTOPT_HD void bind(SlotScalars& s, float mu_product) { nadam_bind(s, mu_product); }
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    g = g + h.weight_decay * p;
    p = p * h.decay;
    s[0] = rule_lerp(s[0], g, h.one_minus_beta1);
    s[1] = s[1] * h.beta2 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s[1] / h.bc2) + h.eps;
    p = p + (h.nadam_grad * g) / denom;  // torch's addcdiv: p + (value * t1) / t2
    return p + (h.nadam_mom * s[0]) / denom;
  }
};

}  // namespace octopt
