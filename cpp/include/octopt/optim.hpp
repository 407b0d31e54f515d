#pragma once
// Fused optimizer steps over raw pointers. One call steps every tensor of an optimizer in one
// parallel region (CPU) or one kernel launch (CUDA). Per block, in float32: dequantize the state
// with the old absmax -> update -> new absmax -> requantize; the parameter update uses the fresh
// float32 moments. A block whose gradient holds NaN/Inf is left unchanged (parameter and state).
// The per-block pipeline (state slots, update rules, encoding, percentile scaling, chunking, trust
// ratios, step scalars) is the OCTOPT_HD code of numerics/, shared by both backends.
//
// State slots per optimizer (s0, s1, s2): numerics/state_slots.hpp.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "dtype.hpp"
#include "numerics/chunking.hpp"
#include "numerics/codebook.hpp"
#include "numerics/hyper_params.hpp"
#include "numerics/schedules.hpp"
#include "numerics/state_slots.hpp"
#include "numerics/step_scalars.hpp"
#include "numerics/trust_ratio.hpp"
#include "numerics/update_rules.hpp"

namespace octopt {

const char* optim_name(OptimKind kind);
OptimKind parse_optim(const std::string& name);  // throws std::invalid_argument for unknown names
int optim_num_states(OptimKind kind);            // state slots the optimizer may use (1..kMaxStateSlots)

// The step's scalars for a tensor that has now taken `step` steps (1-based), in double precision.
SlotScalars compute_scalars(OptimKind kind, const HyperParams& hp, std::int64_t step);

// One moment of one tensor: 32-bit floats, or 8-/4-bit codes with one absmax per block.
struct StateBuffer {
  void* data = nullptr;     // float* (bits 32) or uint8_t* codes (bits 8 / 4); null: slot unused
  float* absmax = nullptr;  // per block, for bits 8 / 4
  int bits = 32;
  int codebook = 0;         // index into StepConfig::codebooks
  bool stochastic = false;  // stochastic rounding of this state's codes (also on when StepConfig says so)
};

struct StepTensor {
  void* param = nullptr;
  DType param_dtype = DType::f32;
  const void* grad = nullptr;  // null: this tensor is not stepped (its grad is None)
  DType grad_dtype = DType::f32;
  std::int64_t n = 0;
  int block_size = 256;  // quantization block, also the unit of non-finite skipping
  StateBuffer state[kMaxStateSlots];
  SlotScalars scalars{};
  std::uint64_t rng_stream = 0;  // distinguishes tensors in stochastic rounding
  // NAdam: the running product mu_1 ... mu_t of the steps this tensor has taken (torch's
  // state['mu_product']; 1 before the first step). Owned by the caller, like the state buffers:
  // keep the StepTensor (or copy this field back and forth) across steps, save and restore it with
  // the step count. step() reads it and advances it in place for each stepped tensor (grad set),
  // before using it; unstepped tensors keep theirs. Must be in [0, 1]. Other optimizers ignore it.
  float mu_product = 1.0f;
};

struct StepConfig {
  OptimKind kind = OptimKind::adam;
  const Codebook* codebooks = nullptr;  // host array, indexed by StateBuffer::codebook
  int num_codebooks = 0;
  std::uint64_t seed = 0;
  std::int64_t step = 0;          // global step counter, keys stochastic rounding
  bool stochastic_state = false;  // stochastic rounding of state codes
  bool stochastic_bf16 = false;   // stochastic rounding of bf16 parameter writes
  float percentile = 0.0f;        // > 0: block scale = this percentile (0-100] of |x|, clipping beyond
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

// Checks tensors against the config (dtypes, block sizes, codebooks, bits); throws
// std::invalid_argument naming `fn`.
void validate_step(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const char* fn);

// CPU: steps all tensors whose grad is non-null. Their scalars.trust is written for LAMB/LARS;
// NAdam advances the stepped tensors' mu_product and fills in their scalars' nadam coefficients.
StepResult step(const StepConfig& cfg, StepTensor* tensors, std::size_t n_tensors, StepWorkspace& ws);

// Counts blocks with a non-finite gradient without changing anything (for strict mode).
std::int64_t count_nonfinite_blocks(const StepTensor* tensors, std::size_t n_tensors);

// ---- CUDA backend -------------------------------------------------------------------------------
// The same step on a GPU, enqueued on the caller's stream. A DevicePlan holds a device-resident
// table of the tensors (parameter and state pointers, dtypes, sizes, block sizes, codebooks), the
// per-tensor and global step counters, the skipped-block counters and the LAMB/LARS scratch: all
// device memory is allocated when the plan is built, never during a step. A step is one launch of
// a fused kernel over every block of every tensor (LAMB/LARS: two, a norms pass whose last tile per
// tensor computes the trust ratio, then the update). Each tile derives its tensor's scalars from
// the device step count with scalars_for_step; the last tile of the step's final launch advances
// the step counters and publishes the skipped-block count. The gradients' addresses and the
// hyper-parameters are uploaded from pinned memory owned by the plan, only when they changed, so a
// step is capturable in a CUDA graph (contract in docs/cuda.md). Without CUDA every entry throws
// "octopt was built without CUDA".
namespace cuda {

class DevicePlan {
 public:
  // tensors: device pointers on `device` (param and state buffers; grad pointers are ignored), and
  // NAdam's starting mu_product per tensor (then held on the device: read_mu_products). groups[i]
  // (< n_groups) is the hyper-parameter group of tensors[i]. cfg: kind and codebooks (copied to the
  // device); seed keys stochastic rounding. Throws std::invalid_argument naming `fn`.
  DevicePlan(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const int* groups, int n_groups,
             int device, const char* fn = "Optimizer");
  ~DevicePlan();
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;

  int device() const;
  std::size_t size() const;  // number of tensors
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// What the host hands over per step. Only these can change between steps of one plan.
struct StepArgs {
  const void* const* grads = nullptr;    // one device pointer per tensor; null: not stepped this time
  const DType* grad_dtypes = nullptr;    // the parameter's dtype or float32
  const HyperParams* hparams = nullptr;  // one per group
  bool stochastic_state = false;
  bool stochastic_bf16 = false;
  float percentile = 0.0f;
};

// Enqueues one step of every tensor on `stream` (no synchronization, no allocation). Under CUDA
// graph capture of `stream` the arguments must equal those of the last eager step or upload().
void step(DevicePlan& plan, const StepArgs& args, cudaStream_t stream);
// Uploads the arguments (on `stream`) without stepping: how a captured graph gets new
// hyper-parameters between replays. Not allowed while `stream` is being captured.
void upload(DevicePlan& plan, const StepArgs& args, cudaStream_t stream);

// Read-backs and writes of the device counters; each waits for the device to finish its work.
std::int64_t skipped_blocks(DevicePlan& plan, bool last_step_only);
void read_steps(DevicePlan& plan, std::int64_t* per_tensor, std::int64_t* global_step);
void write_steps(DevicePlan& plan, const std::int64_t* per_tensor, std::int64_t global_step);
std::vector<float> trust_ratios(DevicePlan& plan);
// NAdam: each tensor's running mu_product (StepTensor::mu_product) as the device holds it: the
// tensors' values when the plan was built, then advanced by each step for each stepped tensor (also in
// captured graphs). Save it with read_steps' counts; restore it with write_mu_products (values in
// [0, 1]; throws std::invalid_argument otherwise). per_tensor: size() floats.
void read_mu_products(DevicePlan& plan, float* per_tensor);
void write_mu_products(DevicePlan& plan, const float* per_tensor);

// Test aid for the launch structure of a step: begin capturing `stream` into a CUDA graph
// (thread-local mode); end that capture and return {kernel nodes, all nodes} of what it recorded.
// The graph is destroyed without being run, so nothing on the device changes.
void begin_capture(cudaStream_t stream);
std::pair<int, int> end_capture_count_nodes(cudaStream_t stream);
// Whether work enqueued on `stream` now would be captured into a CUDA graph (also when another
// stream's global-mode capture forbids this one's use). Without CUDA: false.
bool stream_capturing(cudaStream_t stream);

}  // namespace cuda

}  // namespace octopt
