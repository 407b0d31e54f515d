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
};

struct SlotScalars {
  float lr;
  float beta1, beta2, beta3;  // beta3: AdEMAMix slow EMA rate, after its warm-up schedule
  // 1 - beta etc. are rounded from double, as torch rounds `value=1 - beta2` (not 1.0f - beta2f)
  float one_minus_beta1, one_minus_beta2, one_minus_beta3;
  float eps;
  float weight_decay;
  float momentum, one_minus_dampening;
  float alpha;      // RMSprop smoothing constant; AdEMAMix mixing weight, after its warm-up schedule
  float one_minus_alpha;
  float step_size;  // Adam family: lr / (1 - beta1^t); Adagrad: lr / (1 + (t - 1) lr_decay)
  float bc1;        // 1 - beta1^t (1 without bias correction)
  float bc2_sqrt;   // sqrt(1 - beta2^t) (1 without bias correction)
  float decay;      // decoupled weight decay factor 1 - lr * weight_decay
  float eta;        // LARS trust coefficient
  float trust;      // LAMB/LARS: per-tensor trust ratio, filled in by the step itself
  std::uint32_t flags;
};

}  // namespace octopt
