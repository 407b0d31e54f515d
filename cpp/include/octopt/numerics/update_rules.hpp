#pragma once
// The per-element update of every optimizer, shared by the CPU and CUDA backends; each optimizer's rule is in its
// definition (rules/<name>.hpp). States arrive dequantized to float32 (s[0], s[1], ...; their meaning per optimizer:
// its slots) and the parameter update uses the fresh float32 moments. Where torch.optim is the reference, the
// float32 operations follow its single-tensor code in the same order.
#include <cmath>

#include "../config.hpp"
#include "convert.hpp"
#include "optim_rules.hpp"
#include "step_scalars.hpp"

namespace octopt {

// The rule of K (rules/<name>.hpp) after the common maximize flip; update_element adds the canonical NaN.
template <OptimKind K>
OCTOPT_HD float update_rule(const SlotScalars& h, float p, float g, SlotValues& s, float* u_out) {
  if (h.flags & kMaximize) g = -g;
  return OptimRule<K>::update(h, p, g, s, u_out);
}

// Returns the new parameter value. For LAMB the returned value is only meaningful in the final
// phase (trust filled in); `u_out` receives the LAMB update direction (or the LARS direction).
// A NaN the rule makes (an infinite parameter times a weight decay, a negative centered variance)
// leaves as the canonical NaN (convert.hpp) in the parameter and every state, so the CPU and the GPU
// store the same bits and the block scales, maxima of bit patterns, agree.
template <OptimKind K>
OCTOPT_HD float update_element(const SlotScalars& h, float p, float g, SlotValues& s, float* u_out = nullptr) {
  const float np = update_rule<K>(h, p, g, s, u_out);
  for (int k = 0; k < rule_slot_count<K>; ++k) s[k] = canonical_nan(s[k]);
  if (u_out) *u_out = canonical_nan(*u_out);
  return canonical_nan(np);
}

// update_element of an optimizer chosen at run time (the CUDA kernel's form: the branch is uniform
// over the grid, and one kernel holds every optimizer).
OCTOPT_HD float update_element_any(OptimKind kind, const SlotScalars& h, float p, float g, SlotValues& s,
                                   float* u_out = nullptr) {
  return visit_optim(kind, [&](auto k) { return update_element<decltype(k)::value>(h, p, g, s, u_out); });
}

}  // namespace octopt
