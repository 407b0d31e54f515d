#pragma once
// Every optimizer's definition (rules/<name>.hpp, one per entry of optim_list.hpp) and the dispatch over them:
// visit_optim(kind, f) calls f with std::integral_constant<OptimKind, kind>, through a switch generated from the
// list. Everything that depends on the optimizer (slots, scalars, the update, the table, the CPU, CUDA and XLA
// dispatch) reads OptimRule<K> through it; nothing else names the kinds.
#include <cstdlib>
#include <utility>
#include <type_traits>

#include "../config.hpp"
#include "optim_rule.hpp"
// one line per optimizer of optim_list.hpp
#include "rules/adagrad.hpp"
#include "rules/adam.hpp"
#include "rules/adamw.hpp"
#include "rules/ademamix.hpp"
#include "rules/adan.hpp"
#include "rules/lamb.hpp"
#include "rules/lars.hpp"
#include "rules/lion.hpp"
#include "rules/muon.hpp"
#include "rules/nadam.hpp"
#include "rules/radam.hpp"
#include "rules/rmsprop.hpp"
#include "rules/sgd.hpp"

namespace octopt {

template <OptimKind K>
using KindConstant = std::integral_constant<OptimKind, K>;

// f(KindConstant<kind>{}); a kind outside the list (a corrupt byte: every boundary validates kinds) stops the
// program rather than running another optimizer's rule.
template <class F>
OCTOPT_HD constexpr decltype(auto) visit_optim(OptimKind kind, F&& f) {
  switch (kind) {
#define OCTOPT_VISIT_CASE(name) \
  case OptimKind::name:         \
    return f(KindConstant<OptimKind::name>{});
    OCTOPT_OPTIMIZERS(OCTOPT_VISIT_CASE)
#undef OCTOPT_VISIT_CASE
  }
#if defined(__CUDA_ARCH__)
  __trap();
#else
  std::abort();
#endif
  return f(KindConstant<OptimKind::adam>{});
}

// The number of state slots of K (1..kMaxStateSlots).
template <OptimKind K>
inline constexpr int rule_slot_count = int(sizeof(OptimRule<K>::slots) / sizeof(SlotSpec));

// Whether K carries a per-tensor scalar (its rule's tensor_scalars; at most one).
template <OptimKind K>
inline constexpr bool rule_has_tensor_scalar = OptimRule<K>::tensor_scalars.size() > 0;
OCTOPT_HD bool optim_has_tensor_scalar(OptimKind kind) {
  return visit_optim(kind, [](auto k) { return rule_has_tensor_scalar<decltype(k)::value>; });
}

// A tensor's scalar moved to this step, s's scalars bound to its new value (which is returned); the rule's
// advance and bind, a no-op for rules without one.
OCTOPT_HD float advance_tensor_scalar(OptimKind kind, SlotScalars& s, float x) {
  return visit_optim(kind, [&](auto k) {
    using R = OptimRule<decltype(k)::value>;
    const float next = R::advance(s, x);
    R::bind(s, next);
    return next;
  });
}

// Every definition is complete and within the limits: checked once per listed optimizer.
template <OptimKind K>
constexpr bool rule_is_valid() {
  using R = OptimRule<K>;
  static_assert(rule_slot_count<K> >= 1 && rule_slot_count<K> <= kMaxStateSlots,
                "an optimizer has 1..kMaxStateSlots state slots");
  static_assert(R::num_betas == 0 || R::num_betas == 2 || R::num_betas == 3, "num_betas is 0, 2 or 3");
  // StepTensor, the CUDA tables and the state files hold one per-tensor scalar (mu_product's place) so far
  static_assert(R::tensor_scalars.size() <= 1, "at most one per-tensor scalar until StepTensor holds more");
  static_assert(
      std::is_same_v<decltype(R::update(SlotScalars{}, 0.0f, 0.0f, std::declval<SlotValues&>(), nullptr)), float>,
      "update returns the new parameter");
  return R::name != nullptr && R::class_name != nullptr && R::summary != nullptr && R::options.size() > 0;
}
#define OCTOPT_CHECK_RULE(name) static_assert(rule_is_valid<OptimKind::name>(), "incomplete rules/" #name ".hpp");
OCTOPT_OPTIMIZERS(OCTOPT_CHECK_RULE)
#undef OCTOPT_CHECK_RULE

}  // namespace octopt
