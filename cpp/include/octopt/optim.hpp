#pragma once
// Fused optimizer steps over raw pointers. One call steps every tensor of an optimizer in one
// parallel region (CPU) or one kernel launch (CUDA). Per block, in float32: dequantize the state
// with the old absmax -> update -> new absmax -> requantize; the parameter update uses the fresh
// float32 moments. A block whose gradient holds NaN/Inf is left unchanged (parameter and state).
//
// State slots per optimizer (s0, s1, s2):
//   adam, adamw, lamb  m (signed), v (unsigned)
//   ademamix           m1 (signed), nu (unsigned), m2 slow EMA (signed)
//   sgd, lars, lion    momentum / EMA (signed)
//   rmsprop            square average (unsigned), momentum buffer (signed), gradient average (signed)
//   adagrad            sum of squares (unsigned)
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "dtype.hpp"
#include "numerics/codebook.hpp"
#include "numerics/step_scalars.hpp"
#include "numerics/update_rules.hpp"

namespace octopt {

const char* optim_name(OptimKind kind);
OptimKind parse_optim(const std::string& name);  // throws std::invalid_argument for unknown names
int optim_num_states(OptimKind kind);            // state slots the optimizer may use (1..3)

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
  double lr_decay = 0.0;  // Adagrad
  double eta = 1e-3;      // LARS trust coefficient
  double t_alpha = 0.0, t_beta3 = 0.0;  // AdEMAMix warm-up lengths in steps (0: none)
  bool bias_correction = true;          // LAMB
  bool maximize = false;
};

// The step's scalars for a tensor that has now taken `step` steps (1-based), in double precision.
SlotScalars compute_scalars(OptimKind kind, const HyperParams& hp, std::int64_t step);

// One moment of one tensor: 32-bit floats, or 8-/4-bit codes with one absmax per block.
struct StateBuffer {
  void* data = nullptr;      // float* (bits 32) or uint8_t* codes (bits 8 / 4); null: slot unused
  float* absmax = nullptr;   // per block, for bits 8 / 4
  int bits = 32;
  int codebook = 0;          // index into StepConfig::codebooks
  bool stochastic = false;   // stochastic rounding of this state's codes (also on when StepConfig says so)
};

struct ParamSlot {
  void* param = nullptr;
  DType param_dtype = DType::f32;
  const void* grad = nullptr;  // null: this tensor is not stepped (its grad is None)
  DType grad_dtype = DType::f32;
  std::int64_t n = 0;
  int block_size = 256;  // quantization block, also the unit of non-finite skipping
  StateBuffer state[3];
  SlotScalars scalars{};
  std::uint64_t rng_stream = 0;  // distinguishes tensors in stochastic rounding
};

struct StepConfig {
  OptimKind kind = OptimKind::adam;
  const Codebook* codebooks = nullptr;  // host array, indexed by StateBuffer::codebook
  int num_codebooks = 0;
  std::uint64_t seed = 0;
  std::int64_t step = 0;                // global step counter, keys stochastic rounding
  bool stochastic_state = false;        // stochastic rounding of state codes
  bool stochastic_bf16 = false;         // stochastic rounding of bf16 parameter writes
  float percentile = 0.0f;              // > 0: block scale = this percentile (0-100] of |x|, clipping beyond
};

struct StepResult {
  std::int64_t skipped_blocks = 0;  // blocks left unchanged because their gradient held NaN/Inf
};

// Scratch reused across steps (per-tensor norm partials of LAMB/LARS), so a step allocates
// nothing once the workspace has seen the optimizer's shape.
struct StepWorkspace {
  std::vector<double> partials;
  std::vector<std::int64_t> offsets;
};

// Checks slots against the config (dtypes, block sizes, codebooks, bits); throws
// std::invalid_argument naming `fn`.
void validate_step(const StepConfig& cfg, const ParamSlot* slots, std::size_t n_slots, const char* fn);

// CPU: steps all slots whose grad is non-null. Slots' scalars.trust is written for LAMB/LARS.
StepResult step(const StepConfig& cfg, ParamSlot* slots, std::size_t n_slots, StepWorkspace& ws);

// Counts blocks with a non-finite gradient without changing anything (for strict mode).
std::int64_t count_nonfinite_blocks(const ParamSlot* slots, std::size_t n_slots);

}  // namespace octopt
