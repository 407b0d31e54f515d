#pragma once
// The state keys: which state slot (s0, s1, s2) holds what for each optimizer, whether it holds
// signed values, and which slots a tensor allocates under its hyper-parameters. The fused step
// (CPU and CUDA) and the optimizer front ends read these; nothing else spells them out.
//
//   kind                      s0                      s1                     s2
//   adam, adamw, lamb,        exp_avg (signed)        exp_avg_sq (unsigned)
//   radam, nadam
//   ademamix                  m1 (signed)             nu (unsigned)          m2 (signed)
//   sgd, lars                 momentum_buffer (signed)
//   lion                      exp_avg (signed)
//   rmsprop                   square_avg (unsigned)   momentum_buffer (s.)   grad_avg (signed)
//   adagrad                   sum (unsigned)
//
// The names are torch.optim's state keys. Signed slots use a signed map; unsigned ones (second
// moments) an unsigned map that never rounds a positive value to zero (docs/numerics.md).
#include "../config.hpp"

namespace octopt {

// State slots the optimizer may use (1..3); which of them a tensor allocates: state_slot_used.
OCTOPT_HD constexpr int optim_state_slots(OptimKind kind) {
  return (kind == OptimKind::ademamix || kind == OptimKind::rmsprop) ? 3
         : (kind == OptimKind::adam || kind == OptimKind::adamw || kind == OptimKind::lamb ||
            kind == OptimKind::radam || kind == OptimKind::nadam)
             ? 2
             : 1;
}

// Optimizers with the Adam pair (exp_avg, exp_avg_sq) as their state.
OCTOPT_HD constexpr bool optim_has_adam_slots(OptimKind kind) {
  return kind == OptimKind::adam || kind == OptimKind::adamw || kind == OptimKind::lamb || kind == OptimKind::radam ||
         kind == OptimKind::nadam;
}

// torch.optim's name of slot `slot` of this optimizer; "" past optim_state_slots(kind).
OCTOPT_HD constexpr const char* state_slot_name(OptimKind kind, int slot) {
  if (slot < 0 || slot >= optim_state_slots(kind)) return "";
  if (optim_has_adam_slots(kind)) return slot == 0 ? "exp_avg" : "exp_avg_sq";
  switch (kind) {
    case OptimKind::ademamix:
      return slot == 0 ? "m1" : (slot == 1 ? "nu" : "m2");
    case OptimKind::rmsprop:
      return slot == 0 ? "square_avg" : (slot == 1 ? "momentum_buffer" : "grad_avg");
    case OptimKind::adagrad:
      return "sum";
    case OptimKind::lion:
      return "exp_avg";
    default:
      return "momentum_buffer";  // sgd, lars
  }
}

// Whether slot `slot` holds signed values (false for second moments and sums of squares).
OCTOPT_HD constexpr bool state_slot_signed(OptimKind kind, int slot) {
  if (optim_has_adam_slots(kind) || kind == OptimKind::ademamix) return slot != 1;
  if (kind == OptimKind::rmsprop || kind == OptimKind::adagrad) return slot != 0;
  return true;
}

// Whether slot `slot` is a first moment (exp_avg, m1, momentum_buffer): the slots a separate
// first-moment bit width applies to.
OCTOPT_HD constexpr bool state_slot_first_moment(OptimKind kind, int slot) {
  if (slot < 0 || slot >= optim_state_slots(kind)) return false;
  if (kind == OptimKind::rmsprop) return slot == 1;
  if (kind == OptimKind::adagrad) return false;
  return slot == 0;
}

// Whether a tensor allocates slot `slot` under these hyper-parameters: SGD and LARS keep a momentum
// buffer only with momentum != 0; RMSprop its momentum buffer only with momentum > 0 and its gradient
// average only when centered. An unallocated slot reads as zeros and is never written.
OCTOPT_HD constexpr bool state_slot_used(OptimKind kind, int slot, double momentum, bool centered) {
  if (slot < 0 || slot >= optim_state_slots(kind)) return false;
  if (kind == OptimKind::sgd || kind == OptimKind::lars) return momentum != 0.0;
  if (kind == OptimKind::rmsprop) return slot == 0 || (slot == 1 ? momentum > 0.0 : centered);
  return true;
}

}  // namespace octopt
