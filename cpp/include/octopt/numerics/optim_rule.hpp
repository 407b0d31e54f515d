#pragma once
// What one optimizer's definition (rules/<name>.hpp, a specialization of OptimRule) holds, and the defaults of its
// optional parts (RuleDefaults). A definition states:
//   name, class_name, summary       its names (state files, the FFI handlers, Python) and one line on its semantics
//   slots                           its state buffers s[0], s[1], ...: torch.optim's state key, signed or not, whether
//                                   a separate first-moment bit width applies, when a tensor allocates it, where it
//                                   starts
//   options, num_betas, defaults    the group keys it takes (torch-style constructor order; "betas" is the tuple), how
//                                   many betas, and its defaults where they differ from HyperParams'
//   scalars(s, hp, t)               its changes to the common per-step scalars (hyper_params.hpp: scalars_for_step)
//   update(h, p, g, s, u)           its per-element rule: the new parameter, the states updated in place
// Optional (RuleDefaults): bounds (tighter ranges of shared hyper-parameters), trust (a per-tensor trust ratio),
// tensor_scalars (per-tensor scalar state beside the slots, with its initial value and range; advance and bind move
// it along each step and derive the step's scalars from it), direction_step (the step's
// "parameter" is a direction the caller finishes with a matrix operation, as Muon's Newton-Schulz: front ends wrap
// the core optimizer in a class of their own instead of exposing it), cpu_kernel (a hand-vectorized CPU block
// loop that computes this update operation for operation, taken where its preconditions hold; cpu/kernels_impl.cpp).
// A rule that leaves out a required part fails to compile where the dispatch reads it (optim_rules.hpp).
#include <array>

#include "../config.hpp"
#include "hparam_ids.hpp"
#include "hyper_param_set.hpp"
#include "rule_math.hpp"
#include "step_scalars.hpp"

namespace octopt {

// One element's state values, dequantized to float32, by slot (s[k]: the rule's slots[k]); a rule reads and
// writes only its own slots.
using SlotValues = float[kMaxStateSlots];

// When a tensor allocates a slot (an unallocated slot reads as zeros and is never written).
enum class SlotUse : std::uint8_t {
  always,
  momentum_nonzero,   // momentum != 0 (SGD, LARS)
  momentum_positive,  // momentum > 0 (RMSprop's buffer)
  centered,           // the centered variant only (RMSprop's gradient average)
};

// Where a slot starts: zeros, or the group's initial_accumulator_value (Adagrad's sum).
enum class SlotInit : std::uint8_t { zero, initial_accumulator };

struct SlotSpec {
  const char* name;   // torch.optim's state key: exp_avg, exp_avg_sq, ...
  bool is_signed;     // signed map (first moments, momentum) or unsigned (second moments, sums of squares)
  bool first_moment;  // follows the layout's first_moment_bits
  SlotUse use = SlotUse::always;
  SlotInit init = SlotInit::zero;
};

// A hyper-parameter's value: an optimizer's default, or (with hi) a tighter range.
struct HParamValue {
  HParam id;
  double value;
};
struct HParamBound {
  HParam id;
  double lo, hi;
  bool hi_open;
};

// A number a tensor carries from one step to the next beside its state slots (NAdam's mu_product; step_setup.hpp).
struct TensorScalarDef {
  const char* name;  // its name in state dicts and in octopt.optax's state
  float initial;     // its value before the tensor's first step
  float lo, hi;      // the values a step, a state file or an XLA call may hand in
};

// A hand-vectorized CPU block loop a rule may name (cpu/adam_fused_driver.hpp and the ISA files beside it). Its results
// are the generic loop's bit for bit (tests/optim/test_canonical_nan_fused.py, the ISA hash goldens); a rule that
// names none runs on the generic loop, which every rule has.
enum class CpuKernel : std::uint8_t {
  generic,
  adam_l2_decay,         // Adam's update with L2 weight decay added to the gradient (rules/adam.hpp)
  adam_decoupled_decay,  // Adam's update with the parameter scaled by 1 - lr wd first (rules/adamw.hpp)
};

// Optimizers whose update is scaled per tensor by a trust ratio (a norms pass first: trust_ratio.hpp).
enum class TrustRatio : std::uint8_t { none, lamb, lars };

// Defined once per optimizer in rules/<name>.hpp; a kind without a definition is an incomplete type.
template <OptimKind K>
struct OptimRule;

// The optional parts of a definition; a rule derives from it and overrides what it needs.
struct RuleDefaults {
  static constexpr std::array<HParamBound, 0> bounds{};
  static constexpr TrustRatio trust = TrustRatio::none;
  static constexpr std::array<TensorScalarDef, 0> tensor_scalars{};
  static constexpr bool direction_step = false;
  static constexpr CpuKernel cpu_kernel = CpuKernel::generic;
  static OCTOPT_HD void scalars(SlotScalars&, const HyperParams&, double) {}
  // With a tensor scalar: its value after this step from its value before and the step's scalars, and the step's
  // scalars that depend on its new value (advance_tensor_scalar in optim_rules.hpp calls both).
  static OCTOPT_HD float advance(const SlotScalars&, float x) { return x; }
  static OCTOPT_HD void bind(SlotScalars&, float) {}
};

}  // namespace octopt
