#pragma once
// The hyper-parameters of a parameter group, as users set them (one struct for every optimizer; each reads
// the ones it takes). Host and device alike.
namespace octopt {

// Hyper-parameters of a parameter group, as the user sets them.
struct HyperParams {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, beta3 = 0.9999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  double alpha = 0.99;  // RMSprop smoothing; AdEMAMix mixing weight
  bool centered = false;
  double lr_decay = 0.0;                // Adagrad
  double eta = 1e-3;                    // LARS trust coefficient
  double t_alpha = 0.0, t_beta3 = 0.0;  // AdEMAMix warm-up lengths in steps (0: none)
  bool bias_correction = true;          // LAMB
  bool maximize = false;
  bool decoupled_weight_decay = false;  // RAdam, NAdam: AdamW-style decay instead of L2 (torch's flag)
  double momentum_decay = 4e-3;         // NAdam: psi of the momentum schedule mu_t
  bool eps_in_sqrt = false;             // RMSprop: sqrt(v + eps) instead of sqrt(v) + eps (optax's form)
  bool no_prox = false;                 // Adan: p (1 - lr wd) - lr u instead of (p - lr u) / (1 + lr wd)
};

}  // namespace octopt
