#pragma once
// Per-step schedules of RAdam and NAdam, in double precision as torch.optim computes them on the
// host: RAdam's variance rectification (Liu et al. 2020) and NAdam's momentum schedule mu_t with
// its running product (Dozat 2016; torch's momentum_decay form). scalars_for_step calls these once
// per step; the running product is per-tensor state that the step advances (nadam_advance).
#include <math.h>

#include <cstdint>

#include "../config.hpp"
#include "step_scalars.hpp"

namespace octopt {

// RAdam at step t: whether the variance is tractable (rho_t > 5) and the rectification term r_t.
struct Rectification {
  bool rectified;
  double rect;  // r_t when rectified, else 1
};

OCTOPT_HD Rectification radam_rectification(double beta2, double t) {
  const double beta2_t = ::pow(beta2, t);
  const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
  const double rho_t = rho_inf - 2.0 * t * beta2_t / (1.0 - beta2_t);
  if (!(rho_t > 5.0)) return {false, 1.0};
  // torch takes ** 0.5; sqrt is its correctly rounded value on every math library
  return {true, ::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))};
}

// NAdam's momentum coefficient mu_t = beta1 (1 - 0.5 * 0.96^(t psi)), psi = momentum_decay.
OCTOPT_HD double nadam_mu(double beta1, double momentum_decay, double t) {
  return beta1 * (1.0 - 0.5 * ::pow(0.96, t * momentum_decay));
}

// The running product mu_1 ... mu_t after step t, from the product after step t - 1. In float32,
// as torch keeps state['mu_product'] (a float32 tensor multiplied in place by the Python float mu):
// the product of two floats rounded once.
OCTOPT_HD float nadam_advance(float mu_product, double mu) { return mu_product * float(mu); }

// Fills in the NAdam coefficients of s from the tensor's product mu_product_t (already advanced to
// this step), in double as torch's addcdiv values, rounded to float32 once.
OCTOPT_HD void nadam_bind(SlotScalars& s, float mu_product) {
  const double mp = mu_product;
  s.nadam_grad = float(-s.nadam_lr * (1.0 - s.nadam_mu) / (1.0 - mp));
  s.nadam_mom = float(-s.nadam_lr * s.nadam_mu_next / (1.0 - mp * s.nadam_mu_next));
}

}  // namespace octopt
