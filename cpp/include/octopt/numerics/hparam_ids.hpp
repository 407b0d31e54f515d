#pragma once
// The hyper-parameters of a group by identity, for host and device alike: which exist, which are
// true/false flags, and how to read and write them in a HyperParams. Their names, ranges and defaults
// are host data in the optimizer table (optim_table.hpp); the XLA handlers' arrays follow this order.
#include "../config.hpp"
#include "hyper_param_set.hpp"

namespace octopt {

enum class HParam : unsigned char {
  lr,
  beta1,
  beta2,
  beta3,
  eps,
  weight_decay,
  momentum,
  dampening,
  nesterov,
  alpha,
  centered,
  lr_decay,
  eta,
  t_alpha,
  t_beta3,
  bias_correction,
  maximize,
  decoupled_weight_decay,
  momentum_decay,
  eps_in_sqrt,
  no_prox,
};
inline constexpr int kNumHParams = int(HParam::no_prox) + 1;

OCTOPT_HD constexpr bool hparam_is_flag(HParam id) {
  return id == HParam::nesterov || id == HParam::centered || id == HParam::bias_correction || id == HParam::maximize ||
         id == HParam::decoupled_weight_decay || id == HParam::eps_in_sqrt || id == HParam::no_prox;
}

// Numbers (not flags), in HParam order: the length of the XLA handlers' hyper-parameter arrays.
OCTOPT_HD constexpr int count_real_hparams() {
  int n = 0;
  for (int k = 0; k < kNumHParams; ++k) n += hparam_is_flag(HParam(k)) ? 0 : 1;
  return n;
}
inline constexpr int kNumRealHParams = count_real_hparams();

OCTOPT_HD double get_hparam(const HyperParams& hp, HParam id) {
  switch (id) {
    case HParam::lr:
      return hp.lr;
    case HParam::beta1:
      return hp.beta1;
    case HParam::beta2:
      return hp.beta2;
    case HParam::beta3:
      return hp.beta3;
    case HParam::eps:
      return hp.eps;
    case HParam::weight_decay:
      return hp.weight_decay;
    case HParam::momentum:
      return hp.momentum;
    case HParam::dampening:
      return hp.dampening;
    case HParam::nesterov:
      return hp.nesterov ? 1.0 : 0.0;
    case HParam::alpha:
      return hp.alpha;
    case HParam::centered:
      return hp.centered ? 1.0 : 0.0;
    case HParam::lr_decay:
      return hp.lr_decay;
    case HParam::eta:
      return hp.eta;
    case HParam::t_alpha:
      return hp.t_alpha;
    case HParam::t_beta3:
      return hp.t_beta3;
    case HParam::bias_correction:
      return hp.bias_correction ? 1.0 : 0.0;
    case HParam::maximize:
      return hp.maximize ? 1.0 : 0.0;
    case HParam::decoupled_weight_decay:
      return hp.decoupled_weight_decay ? 1.0 : 0.0;
    case HParam::momentum_decay:
      return hp.momentum_decay;
    case HParam::eps_in_sqrt:
      return hp.eps_in_sqrt ? 1.0 : 0.0;
    case HParam::no_prox:
      return hp.no_prox ? 1.0 : 0.0;
  }
  return 0.0;
}

OCTOPT_HD void set_hparam(HyperParams& hp, HParam id, double v) {
  switch (id) {
    case HParam::lr:
      hp.lr = v;
      break;
    case HParam::beta1:
      hp.beta1 = v;
      break;
    case HParam::beta2:
      hp.beta2 = v;
      break;
    case HParam::beta3:
      hp.beta3 = v;
      break;
    case HParam::eps:
      hp.eps = v;
      break;
    case HParam::weight_decay:
      hp.weight_decay = v;
      break;
    case HParam::momentum:
      hp.momentum = v;
      break;
    case HParam::dampening:
      hp.dampening = v;
      break;
    case HParam::nesterov:
      hp.nesterov = v != 0.0;
      break;
    case HParam::alpha:
      hp.alpha = v;
      break;
    case HParam::centered:
      hp.centered = v != 0.0;
      break;
    case HParam::lr_decay:
      hp.lr_decay = v;
      break;
    case HParam::eta:
      hp.eta = v;
      break;
    case HParam::t_alpha:
      hp.t_alpha = v;
      break;
    case HParam::t_beta3:
      hp.t_beta3 = v;
      break;
    case HParam::bias_correction:
      hp.bias_correction = v != 0.0;
      break;
    case HParam::maximize:
      hp.maximize = v != 0.0;
      break;
    case HParam::decoupled_weight_decay:
      hp.decoupled_weight_decay = v != 0.0;
      break;
    case HParam::eps_in_sqrt:
      hp.eps_in_sqrt = v != 0.0;
      break;
    case HParam::no_prox:
      hp.no_prox = v != 0.0;
      break;
    case HParam::momentum_decay:
      hp.momentum_decay = v;
      break;
  }
}

}  // namespace octopt
