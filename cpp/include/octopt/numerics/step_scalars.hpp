#pragma once
// Per-tensor, per-step scalars of a fused optimizer step. The host computes them once per step
// in double precision (bias corrections, schedules) and rounds them to float32 for the kernels.
#include <cstdint>

namespace octopt {

enum StepFlags : std::uint32_t {
  kNesterov = 1u << 0,
  kCentered = 1u << 1,
  kFirstStep = 1u << 2,  // the momentum buffer is initialized with the first gradient (torch SGD)
  kMaximize = 1u << 3,
  kRectified = 1u << 4,      // RAdam: rho_t > 5, the adaptive step times the rectification term
  kEpsInSqrt = 1u << 5,      // RMSprop: eps inside the square root
  kBiasCorrected = 1u << 6,  // Muon: optax's bias-corrected momentum (bc1 = 1 - beta^t, bc2 = 1 - beta^(t+1))
  kNoProx = 1u << 7,         // Adan: weight decay p (1 - lr wd) instead of the proximal division
};

struct SlotScalars {
  float lr;
  float beta1, beta2, beta3;  // beta3: AdEMAMix slow EMA rate, after its warm-up schedule
  // 1 - beta etc. are rounded from double, as torch rounds `value=1 - beta2` (not 1.0f - beta2f)
  float one_minus_beta1, one_minus_beta2, one_minus_beta3;
  float eps;
  float weight_decay;  // RAdam, NAdam: the coupled (L2) coefficient only, 0 under decoupled decay
  float momentum, one_minus_dampening;
  float alpha;  // RMSprop smoothing constant; AdEMAMix mixing weight, after its warm-up schedule
  float one_minus_alpha;
  float step_size;  // Adam family: lr / (1 - beta1^t); Adagrad: lr / (1 + (t - 1) lr_decay)
  float bc1;        // 1 - beta1^t (1 without bias correction)
  float bc2_sqrt;   // sqrt(1 - beta2^t) (1 without bias correction)
  float decay;      // decoupled weight decay factor 1 - lr * weight_decay (RAdam, NAdam: 1 unless decoupled)
  float eta;        // LARS trust coefficient
  float trust;      // LAMB/LARS: per-tensor trust ratio, filled in by the step itself
  float bc2;        // 1 - beta2^t (NAdam divides v by it)
  float rect;       // RAdam: the variance rectification term r_t, applied when kRectified is set
  // NAdam: the coefficients of g and m in the update, -lr (1 - mu_t) / (1 - mu_product_t) and
  // -lr mu_{t+1} / (1 - mu_product_t mu_{t+1}). They depend on the tensor's running mu_product:
  // the step fills them in (nadam_bind, schedules.hpp), scalars_for_step leaves them 0.
  float nadam_grad, nadam_mom;
  std::uint32_t flags;
  // NAdam: lr and the momentum schedule mu_t, mu_{t+1} of this step in double, as torch computes
  // them, kept for nadam_bind.
  double nadam_lr, nadam_mu, nadam_mu_next;
};

}  // namespace octopt
