#pragma once
// Adan (Xie et al. 2022, Alg. 1, "Adan: Adaptive Nesterov Momentum Algorithm"): EMAs of the gradient, of the
// gradient's change and of the square of the Nesterov-corrected gradient, with the bias corrections and the
// proximal weight decay of the authors' reference code. Betas in that code's convention: beta = 1 - the paper's.
#include <math.h>

#include "../optim_rule.hpp"

namespace octopt {

template <>
struct OptimRule<OptimKind::adan> : RuleDefaults {
  static constexpr const char* name = "adan";
  static constexpr const char* class_name = "Adan";
  static constexpr const char* summary =
      "Adan (Xie et al. 2022): EMAs of the gradient, its change and the square of g + beta2 (g - g_prev), "
      "bias-corrected; proximal weight decay p <- (p - lr u) / (1 + lr weight_decay), or with no_prox "
      "p <- p (1 - lr weight_decay) - lr u.";
  // the reference code's state keys; the previous gradient is state like the others (quantized with them)
  static constexpr SlotSpec slots[] = {
      {"exp_avg", true, true}, {"exp_avg_sq", false, false}, {"exp_avg_diff", true, true}, {"pre_grad", true, false}};
  static constexpr std::array options{"lr", "betas", "eps", "weight_decay", "no_prox", "maximize"};
  static constexpr int num_betas = 3;
  static constexpr std::array defaults{HParamValue{HParam::beta1, 0.98}, HParamValue{HParam::beta2, 0.92},
                                       HParamValue{HParam::beta3, 0.99}};

  // bc2_sqrt: the third moment's correction sqrt(1 - beta3^t); decay: the proximal divisor 1 + lr weight_decay, or
  // with no_prox the factor 1 - lr weight_decay (the common one)
  static OCTOPT_HD void scalars(SlotScalars& s, const HyperParams& hp, double t) {
    s.bc2_sqrt = float(::sqrt(1.0 - ::pow(hp.beta3, t)));
    if (hp.no_prox)
      s.flags |= kNoProx;
    else
      s.decay = float(1.0 + hp.lr * hp.weight_decay);
  }
  // s[0] m (gradient EMA), s[1] n (EMA of the corrected gradient's square), s[2] the gradient-change EMA, s[3] the
  // previous gradient (at a tensor's first step the gradient itself, so the change is 0)
  static OCTOPT_HD float update(const SlotScalars& h, float p, float g, SlotValues& s, float*) {
    const float diff = g - ((h.flags & kFirstStep) ? g : s[3]);
    const float c = g + h.beta2 * diff;
    s[0] = s[0] * h.beta1 + h.one_minus_beta1 * g;
    s[2] = s[2] * h.beta2 + h.one_minus_beta2 * diff;
    s[1] = s[1] * h.beta3 + h.one_minus_beta3 * c * c;
    s[3] = g;
    const float denom = rule_sqrt(s[1]) / h.bc2_sqrt + h.eps;
    const float u = (s[0] / h.bc1 + h.beta2 * s[2] / h.bc2) / denom;
    if (h.flags & kNoProx) return p * h.decay - h.lr * u;  // the reference code's mul_, then add_(alpha=-lr)
    return (p - h.lr * u) / h.decay;
  }
};

}  // namespace octopt
