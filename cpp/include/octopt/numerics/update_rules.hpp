#pragma once
// The per-element update of every optimizer, shared by the CPU and CUDA backends. States arrive
// dequantized to float32 (s0, s1, s2; their meaning per optimizer: state_slots.hpp) and the
// parameter update uses the fresh float32 moments. Where torch.optim is the reference, the float32
// operations follow its single-tensor code in the same order.
#include <cmath>

#include "../config.hpp"
#include "convert.hpp"
#include "state_slots.hpp"
#include "step_scalars.hpp"

namespace octopt {

OCTOPT_HD float rule_sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// torch's lerp: a + w (b - a) for w < 0.5, else b - (b - a)(1 - w).
OCTOPT_HD float rule_lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

OCTOPT_HD float rule_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

// The rule itself (update_element below adds the canonical NaN).
template <OptimKind K>
OCTOPT_HD float update_rule(const SlotScalars& h, float p, float g, float& s0, float& s1, float& s2, float* u_out) {
  if (h.flags & kMaximize) g = -g;
  if constexpr (K == OptimKind::adam || K == OptimKind::adamw) {
    if (K == OptimKind::adam) {
      // coupled L2, as torch.optim.Adam (which skips it at weight decay 0)
      if (h.weight_decay != 0.0f) g = g + h.weight_decay * p;
    } else {
      p = p * h.decay;  // decoupled decay before the update, as torch.optim.AdamW
    }
    s0 = rule_lerp(s0, g, h.one_minus_beta1);
    s1 = s1 * h.beta2 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s1) / h.bc2_sqrt + h.eps;
    return p - h.step_size * (s0 / denom);
  } else if constexpr (K == OptimKind::sgd) {
    float d = g + h.weight_decay * p;
    if (h.momentum != 0.0f) {
      s0 = (h.flags & kFirstStep) ? d : s0 * h.momentum + h.one_minus_dampening * d;
      d = (h.flags & kNesterov) ? d + h.momentum * s0 : s0;
    }
    return p - h.lr * d;
  } else if constexpr (K == OptimKind::rmsprop) {
    // s0: square average, s1: momentum buffer, s2: gradient average (centered)
    g = g + h.weight_decay * p;
    s0 = s0 * h.alpha + h.one_minus_alpha * g * g;
    float var = s0;
    if (h.flags & kCentered) {
      s2 = rule_lerp(s2, g, h.one_minus_alpha);
      var = s0 - s2 * s2;
    }
    const float avg = (h.flags & kEpsInSqrt) ? rule_sqrt(var + h.eps) : rule_sqrt(var) + h.eps;
    if (h.momentum > 0.0f) {
      s1 = s1 * h.momentum + g / avg;
      return p - h.lr * s1;
    }
    return p - h.lr * (g / avg);
  } else if constexpr (K == OptimKind::adagrad) {
    g = g + h.weight_decay * p;
    s0 = s0 + g * g;
    return p - h.step_size * (g / (rule_sqrt(s0) + h.eps));
  } else if constexpr (K == OptimKind::lion) {
    // Chen et al. 2023, Alg. 2: the sign of an interpolation drives the update, then the EMA moves.
    const float c = h.beta1 * s0 + h.one_minus_beta1 * g;
    s0 = h.beta2 * s0 + h.one_minus_beta2 * g;
    return p * h.decay - h.lr * rule_sign(c);
  } else if constexpr (K == OptimKind::ademamix) {
    // Pagliardini et al. 2024, Alg. 1: s0 fast EMA m1, s1 second moment nu, s2 slow EMA m2.
    s0 = h.beta1 * s0 + h.one_minus_beta1 * g;
    s2 = h.beta3 * s2 + h.one_minus_beta3 * g;
    s1 = h.beta2 * s1 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s1) / h.bc2_sqrt + h.eps;
    return p * h.decay - h.lr * ((s0 / h.bc1 + h.alpha * s2) / denom);
  } else if constexpr (K == OptimKind::lamb) {
    // You et al. 2020, Alg. 2: Adam direction plus decoupled decay, scaled by the trust ratio.
    s0 = h.beta1 * s0 + h.one_minus_beta1 * g;
    s1 = h.beta2 * s1 + h.one_minus_beta2 * g * g;
    const float u = (s0 / h.bc1) / (rule_sqrt(s1) / h.bc2_sqrt + h.eps) + h.weight_decay * p;
    if (u_out) *u_out = u;
    return p - h.lr * h.trust * u;
  } else if constexpr (K == OptimKind::lars) {
    // You et al. 2017, Alg. 1: v = m v + lr * trust * (g + wd w); w = w - v.
    const float d = g + h.weight_decay * p;
    if (u_out) *u_out = d;
    if (h.momentum != 0.0f) {
      s0 = h.momentum * s0 + h.lr * h.trust * d;
      return p - s0;
    }
    return p - h.lr * h.trust * d;
  } else if constexpr (K == OptimKind::radam) {
    // Liu et al. 2020, as torch.optim.RAdam: the Adam step scaled by the rectification term r_t
    // while the variance is tractable (rho_t > 5, decided on the host), else the un-adapted
    // momentum step. Weight decay: coupled L2 (weight_decay) or decoupled (decay), per scalars_for_step.
    g = g + h.weight_decay * p;
    p = p * h.decay;
    s0 = rule_lerp(s0, g, h.one_minus_beta1);
    s1 = s1 * h.beta2 + h.one_minus_beta2 * g * g;
    const float m_lr = (s0 / h.bc1) * h.lr;
    const float adaptive = (1.0f / (rule_sqrt(s1) + h.eps)) * h.bc2_sqrt;  // torch: bc2**0.5 / (sqrt(v) + eps)
    return p - ((h.flags & kRectified) ? (m_lr * adaptive) * h.rect : m_lr);
  } else {  // nadam
    // Dozat 2016, as torch.optim.NAdam: the gradient and the momentum each take their own
    // coefficient of the momentum schedule (nadam_grad, nadam_mom: schedules.hpp).
    g = g + h.weight_decay * p;
    p = p * h.decay;
    s0 = rule_lerp(s0, g, h.one_minus_beta1);
    s1 = s1 * h.beta2 + h.one_minus_beta2 * g * g;
    const float denom = rule_sqrt(s1 / h.bc2) + h.eps;
    p = p + (h.nadam_grad * g) / denom;  // torch's addcdiv: p + (value * t1) / t2
    return p + (h.nadam_mom * s0) / denom;
  }
}

// Returns the new parameter value. For LAMB the returned value is only meaningful in the final
// phase (trust filled in); `u_out` receives the LAMB update direction (or the LARS direction).
// A NaN the rule makes (an infinite parameter times a weight decay, a negative centered variance)
// leaves as the canonical NaN (convert.hpp) in the parameter and every state, so the CPU and the GPU
// store the same bits and the block scales, maxima of bit patterns, agree.
template <OptimKind K>
OCTOPT_HD float update_element(const SlotScalars& h, float p, float g, float& s0, float& s1, float& s2,
                               float* u_out = nullptr) {
  const float np = update_rule<K>(h, p, g, s0, s1, s2, u_out);
  s0 = canonical_nan(s0);
  s1 = canonical_nan(s1);
  s2 = canonical_nan(s2);
  if (u_out) *u_out = canonical_nan(*u_out);
  return canonical_nan(np);
}

// update_element of an optimizer chosen at run time (the CUDA kernel's form: the branch is uniform
// over the grid, and one kernel holds every optimizer).
OCTOPT_HD float update_element_any(OptimKind kind, const SlotScalars& h, float p, float g, float& s0, float& s1,
                                   float& s2, float* u_out = nullptr) {
  switch (kind) {
    case OptimKind::adam:
      return update_element<OptimKind::adam>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::adamw:
      return update_element<OptimKind::adamw>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::sgd:
      return update_element<OptimKind::sgd>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::rmsprop:
      return update_element<OptimKind::rmsprop>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::adagrad:
      return update_element<OptimKind::adagrad>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::lion:
      return update_element<OptimKind::lion>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::ademamix:
      return update_element<OptimKind::ademamix>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::lamb:
      return update_element<OptimKind::lamb>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::lars:
      return update_element<OptimKind::lars>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::radam:
      return update_element<OptimKind::radam>(h, p, g, s0, s1, s2, u_out);
    case OptimKind::nadam:
      return update_element<OptimKind::nadam>(h, p, g, s0, s1, s2, u_out);
  }
  return p;
}

}  // namespace octopt
