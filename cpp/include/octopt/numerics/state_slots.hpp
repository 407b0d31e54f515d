#pragma once
// The state slots of each optimizer (s[0], s[1], ...: which holds what, signed or not, when a tensor allocates it), as
// its definition declares them (rules/<name>.hpp). The fused step (CPU and CUDA), the table and the front ends read
// these functions; the slots are spelled out in the definitions only. The names are torch.optim's state keys;
// signed slots use a signed map, unsigned ones (second moments) an unsigned map that never rounds a positive value
// to zero (docs/numerics.md).
#include "../config.hpp"
#include "optim_rules.hpp"

namespace octopt {

// State slots the optimizer may use (1..kMaxStateSlots); which of them a tensor allocates: state_slot_used.
OCTOPT_HD constexpr int optim_state_slots(OptimKind kind) {
  return visit_optim(kind, [](auto k) { return rule_slot_count<decltype(k)::value>; });
}

// Slot `slot` of the optimizer's definition; null past its slots.
OCTOPT_HD constexpr const SlotSpec* state_slot_spec(OptimKind kind, int slot) {
  return visit_optim(kind, [slot](auto k) -> const SlotSpec* {
    constexpr OptimKind K = decltype(k)::value;
    return slot >= 0 && slot < rule_slot_count<K> ? &OptimRule<K>::slots[slot] : nullptr;
  });
}

// torch.optim's name of slot `slot` of this optimizer; "" past optim_state_slots(kind).
OCTOPT_HD constexpr const char* state_slot_name(OptimKind kind, int slot) {
  const SlotSpec* s = state_slot_spec(kind, slot);
  return s ? s->name : "";
}

// Whether slot `slot` holds signed values (false for second moments and sums of squares).
OCTOPT_HD constexpr bool state_slot_signed(OptimKind kind, int slot) {
  const SlotSpec* s = state_slot_spec(kind, slot);
  return s ? s->is_signed : true;
}

// Whether slot `slot` is a first moment (exp_avg, m1, momentum_buffer): the slots a separate first-moment bit width
// applies to.
OCTOPT_HD constexpr bool state_slot_first_moment(OptimKind kind, int slot) {
  const SlotSpec* s = state_slot_spec(kind, slot);
  return s && s->first_moment;
}

// Whether a tensor allocates slot `slot` under these hyper-parameters (SlotUse).
OCTOPT_HD constexpr bool state_slot_used(OptimKind kind, int slot, double momentum, bool centered) {
  const SlotSpec* s = state_slot_spec(kind, slot);
  if (!s) return false;
  switch (s->use) {
    case SlotUse::always:
      return true;
    case SlotUse::momentum_nonzero:
      return momentum != 0.0;
    case SlotUse::momentum_positive:
      return momentum > 0.0;
    case SlotUse::centered:
      return centered;
  }
  return false;
}

// Optimizers whose update needs a per-tensor trust ratio (a norms pass before the update: trust_ratio.hpp).
OCTOPT_HD constexpr TrustRatio optim_trust_ratio(OptimKind kind) {
  return visit_optim(kind, [](auto k) { return OptimRule<decltype(k)::value>::trust; });
}

}  // namespace octopt
