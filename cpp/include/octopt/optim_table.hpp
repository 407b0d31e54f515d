#pragma once
// The one definition of octopt's optimizers: for each, its name, its state slots (which map, signed
// or not, quantizable or not), the hyper-parameters it takes with their defaults, and the layout rules
// (bits, block sizes, min_8bit_size, the maps of quantized states). Every surface reads this table:
// the C++ StepPlan and Optimizer, the Python package through _octopt.optimizer_table(), the torch and
// optax adapters, the XLA FFI handlers (the order of their hyper-parameter arrays) and the state files.
// The entries come from the optimizers' definitions (numerics/rules/<name>.hpp, listed in numerics/optim_list.hpp):
// in the core, adding an optimizer is its definition file plus one line in each of those two lists (the Python
// surfaces' own names, such as an optax factory, are theirs to add).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "blockwise.hpp"  // kMinBlockSize, kMaxBlockSize: the block sizes quantization accepts
#include "numerics/codebook.hpp"
#include "numerics/hparam_ids.hpp"
#include "numerics/state_slots.hpp"
#include "numerics/hyper_params.hpp"

namespace octopt {

// ---- hyper-parameters ---------------------------------------------------------------------------

// How a hyper-parameter is given by users.
enum class HParamType : std::uint8_t {
  real,           // a finite number in [lo, hi] (or [lo, hi) when hi_open)
  optional_real,  // None (stored as 0: "off") or such a number
  flag,           // true / false
};

struct HParamDef {
  HParam id;
  const char* field;      // its name in HyperParams
  const char* key;        // the group key users write ("lr", "betas[0]" for beta1, ...)
  const char* optax_key;  // the name optax gives it ("learning_rate", "b1", ...)
  HParamType type;
  double lo, hi;  // valid range (hi may be +inf)
  bool hi_open;
  const char* doc;
};

// All hyper-parameters, in HParam order: the order of the XLA handlers' hyper-parameter arrays too.
const std::vector<HParamDef>& hparam_defs();
const HParamDef& hparam_def(HParam id);

// The names of the XLA handlers' hyper-parameter array (optax names of the numbers, in HParam order)
// and of their flag bits (bit k: the k-th flag).
std::vector<std::string> hparam_array_names();
std::vector<std::string> hparam_flag_names();

// ---- optimizers ---------------------------------------------------------------------------------

struct SlotDef {
  const char* name;   // state name in state dicts and files: exp_avg, exp_avg_sq, ...
  bool is_signed;     // signed map (first moments, momentum) or unsigned (second moments, sums)
  bool first_moment;  // follows GroupOptions::first_moment_bits
  bool starts_at_initial_accumulator = false;  // starts at initial_accumulator_value (Adagrad's sum), else at 0
};

struct OptionDefault {
  const char* key;  // a group key ("betas" for the tuple) or a layout key
  double value;     // for betas: beta1; beta2 and beta3 follow in betas[]
};

struct OptimDef {
  OptimKind kind;
  const char* name;            // "adam": the state files' and the FFI handlers' name
  const char* class_name;      // "Adam": the Python class and the torch adapter's class
  const char* summary;         // one line: what it is and whose semantics it has
  std::vector<SlotDef> slots;  // s0, s1, s2 of octopt::step
  // The group keys the optimizer takes, in the order of its torch-style constructor ("betas" stands
  // for the tuple). Every other hyper-parameter keeps its common default and has no effect.
  std::vector<const char*> options;
  int num_betas;         // 0, 2 or 3 entries in `betas`
  HyperParams defaults;  // the optimizer's defaults; the common ones where it takes no option
  double initial_accumulator_value = 0.0;
  bool direction_step = false;  // the step writes a direction the caller finishes (Muon: OptimRule::direction_step)
};

const std::vector<OptimDef>& optim_defs();
const OptimDef& optim_def(OptimKind kind);
const OptimDef& optim_def(const std::string& name);  // throws std::invalid_argument for unknown names
bool optim_takes(const OptimDef& def, const char* key);

// ---- layout -------------------------------------------------------------------------------------

// The family of maps 8-bit quantized state uses (the layout option 'state_map'): bitsandbytes' dynamic
// maps, or the values of an 8-bit float with 4 exponent and 3 mantissa bits (fp8_map(), as torchao's
// fp8 optimizers keep their state). 4-bit state always uses its own maps; fp8 with 4-bit state is refused.
enum class StateMap : std::uint8_t { dynamic, fp8 };
inline constexpr int kNumStateMapKinds = 2;
const char* state_map_key(StateMap map);  // "dynamic" / "fp8": the option's value in Python and files
// The StateMap named `key`; throws std::invalid_argument naming `fn` and 'state_map' for other names.
StateMap parse_state_map(const std::string& key, const char* fn);

// Options of a param group that decide how its state is laid out; fixed once the group exists.
struct LayoutOptions {
  int bits = 8;                            // 32, 8 or 4
  int block_size = 0;                      // 0: automatic (default_block_size(bits))
  std::int64_t min_8bit_size = 4096;       // smaller tensors keep 32-bit state
  int first_moment_bits = 0;               // 0: as bits; else 32, 8 or 4 for first-moment slots of quantized tensors
  double initial_accumulator_value = 0.0;  // Adagrad: where its sum of squares starts
  StateMap state_map = StateMap::dynamic;  // the maps of 8-bit slots
};

inline constexpr std::int64_t kDefaultMin8bitSize = 4096;
// 4-bit codes use smaller blocks: with 16 levels, a smaller block's absmax tracks its values closer.
inline constexpr int default_block_size(int bits) { return bits == 4 ? 128 : 256; }

// The quantization maps of quantized state, indexed as StepConfig::codebooks: (bits, signed, map) ->
// 0/1: dynamic 8-bit signed/unsigned, 2/3: 4-bit signed/unsigned, 4/5: fp8 signed/unsigned. An
// unsigned map's codebook never rounds a positive value to zero (keep_nonzero; docs/decisions.md).
inline constexpr int kNumStateMaps = 6;
inline constexpr int state_map_index(int bits, bool is_signed, StateMap map = StateMap::dynamic) {
  return (map == StateMap::fp8 ? 4 : bits == 8 ? 0 : 2) + (is_signed ? 0 : 1);
}
// The name state files record per slot ("float32" for bits 32; "fp8_e4m3" for both fp8 slots, whose
// values are the same).
const char* state_map_name(int bits, bool is_signed, StateMap map = StateMap::dynamic);
// Throws std::invalid_argument for bits other than 8 and 4, and for fp8 with 4 bits.
std::vector<float> state_map_values(int bits, bool is_signed, StateMap map = StateMap::dynamic);
// The codebooks of all kNumStateMaps maps, by state_map_index: what StepConfig::codebooks points to.
const std::vector<Codebook>& state_codebooks();

// One used state slot of one tensor.
struct SlotLayout {
  int index;  // s0, s1, s2
  const char* name;
  bool is_signed;
  int bits;
  int block_size;
  bool stochastic;                   // stochastic rounding of its codes
  StateMap map = StateMap::dynamic;  // of an 8-bit slot (else dynamic)
};

// The state slots used under these hyper-parameters (SGD/LARS without momentum use none, RMSprop's
// momentum and centering add slots).
std::vector<int> used_slots(OptimKind kind, const HyperParams& hp);

// (block size, slots) of a tensor of `numel` elements in a group with these options.
// stochastic_rounding: -1 = 4-bit states only (16 levels need unbiased rounding), 0 = none, 1 = all.
struct TensorLayout {
  int block_size;
  std::vector<SlotLayout> slots;
};
TensorLayout layout_tensor(OptimKind kind, const HyperParams& hp, const LayoutOptions& lo, std::int64_t numel,
                           int stochastic_rounding = -1);

// The value a slot starts from (Adagrad's sum: initial_accumulator_value; else 0), and for a quantized
// slot the code byte and absmax that hold it (4-bit bytes hold the code twice).
double slot_initial_value(OptimKind kind, int slot, const LayoutOptions& lo);
std::uint8_t slot_initial_code(int bits, bool is_signed, double init, StateMap map = StateMap::dynamic);

// ---- validation (std::invalid_argument naming `fn` and the key) ---------------------------------

void validate_hparams(OptimKind kind, const HyperParams& hp, const char* fn);
void validate_layout(const LayoutOptions& lo, const char* fn);

// A double as Python's repr() writes it (shortest round trip: 0.1, 1.0, 1e-05, nan, inf), so that
// messages read the same from every surface.
std::string format_real(double v);

}  // namespace octopt
