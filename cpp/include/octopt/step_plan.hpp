#pragma once
// The stateful optimizer of the core: a StepPlan owns the layout of every parameter's state (from the
// optimizer table), the state buffers, the step counters, the per-group hyper-parameters and the
// scalars derived from them (once per group and step), the CUDA device plan and save/load. Every
// surface is a thin front end over it: octopt::Optimizer (C++), the nanobind module (which only
// converts arrays), octopt.Optimizer, octopt.torch and the state files.
//
// Parameters live on the CPU or on one CUDA device; a plan's parameters all live on one. A CPU step
// runs every tensor in one parallel region; a CUDA step is one fused launch (two for LAMB/LARS) on the
// caller's stream, with no synchronization and no allocation.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "optim.hpp"
#include "optim_table.hpp"

namespace octopt {

// Where state memory comes from. The default allocator uses aligned host memory and cudaMalloc; the
// Python bindings allocate arrays of the parameter's framework instead (torch's caching allocator,
// CuPy's pool), so state memory shows up where users measure it.
enum class StateElem : std::uint8_t { f32, u8 };

// Which buffer of a state slot: its values (float32 values, or codes at 8 and 4 bits) or its block absmax.
enum class StateBufferKind : std::uint8_t { values, absmax };

inline constexpr int kNoPageOffset = -1;

// One state buffer the plan asks for, as it adds a tensor (slot by slot: values, then absmax).
struct StateRequest {
  std::size_t count = 0;  // elements of `elem`
  StateElem elem = StateElem::f32;
  int device = -1;         // -1: host memory
  std::size_t tensor = 0;  // the tensor's index, as add_tensor returns it
  int slot = 0;            // the state slot (OptimDef::slots' index)
  StateBufferKind buffer = StateBufferKind::values;
  // Where within a 4 KiB page a large host buffer should start (a multiple of 64), away from the parameter's and
  // the tensor's earlier buffers' offsets, so that a step's loads do not wait on other streams' stores whose low
  // address bits match (docs/decisions.md); kNoPageOffset for small or device buffers. A hint: an allocator that
  // ignores it costs speed, never a result.
  int page_offset = kNoPageOffset;
};

class StateAllocator {
 public:
  virtual ~StateAllocator() = default;
  // `request.count` elements of `request.elem` on `request.device`, 64-byte aligned where count > 0.
  virtual void* allocate(const StateRequest& request) = 0;
  // Returns what allocate(request) gave, with the same request.
  virtual void deallocate(void* p, const StateRequest& request) noexcept = 0;
};
std::shared_ptr<StateAllocator> default_state_allocator();

// Options of the whole plan.
struct PlanOptions {
  std::uint64_t seed = 0;        // keys stochastic rounding
  int stochastic_rounding = -1;  // of state codes: -1 = 4-bit states only, 0 = never, 1 = every quantized state
  bool stochastic_bf16 = false;  // stochastic rounding of bf16 parameter writes
  float percentile = 0.0f;       // > 0: block scale = this percentile (0-100] of |x|
  bool strict = false;           // a non-finite gradient raises instead of skipping its block (CPU only)
  // Every quantized slot in the signed map, as bitsandbytes' one-state optimizers keep RMSprop's and
  // Adagrad's non-negative state (octopt.bnb sets it to step their state dicts as bitsandbytes does)
  bool signed_maps = false;
};

// One state buffer of one tensor, as the plan laid it out.
struct StateBuffers {
  SlotLayout slot;
  void* data = nullptr;     // float32 values (bits 32) or uint8 codes (bits 8/4, two 4-bit codes per byte)
  std::size_t count = 0;    // elements of `data`
  float* absmax = nullptr;  // one per block, bits 8/4
  std::size_t blocks = 0;
};

class StepPlan {
 public:
  // Throws std::invalid_argument naming `fn` for bad options.
  explicit StepPlan(OptimKind kind, const PlanOptions& options = {},
                    std::shared_ptr<StateAllocator> allocator = default_state_allocator(),
                    const char* fn = "Optimizer");
  ~StepPlan();
  StepPlan(const StepPlan&) = delete;
  StepPlan& operator=(const StepPlan&) = delete;

  OptimKind kind() const;
  const PlanOptions& options() const;

  // -- groups: hyper-parameters (changeable) and layout options (fixed once the group exists) --
  int add_group(const HyperParams& hp, const LayoutOptions& layout, const char* fn = "add_param_group");
  std::size_t num_groups() const;
  const HyperParams& hparams(int group) const;
  const LayoutOptions& layout_options(int group) const;
  // Validated here, once; a change that would need other state slots (SGD's momentum from or to 0,
  // RMSprop's momentum or centering) is refused.
  void set_hparams(int group, const HyperParams& hp, const char* fn = "step");

  // -- tensors --
  // Registers a parameter of `dtype` with `shape` ({} = a scalar), on `device` (-1: CPU), updated in
  // place by step(); allocates and fills its state. `data` must stay valid and must not overlap
  // another parameter (checked). Returns its index.
  std::size_t add_tensor(int group, void* data, DType dtype, const std::vector<std::int64_t>& shape, int device,
                         const char* fn = "add_param");
  std::size_t num_tensors() const;
  int device() const;  // -1: CPU (or no tensors yet)
  int tensor_group(std::size_t i) const;
  std::int64_t tensor_numel(std::size_t i) const;
  const std::vector<std::int64_t>& tensor_shape(std::size_t i) const;
  DType tensor_dtype(std::size_t i) const;
  void* tensor_data(std::size_t i) const;
  int tensor_block_size(std::size_t i) const;
  std::vector<StateBuffers> tensor_state(std::size_t i) const;
  std::size_t state_bytes() const;

  // -- stepping --
  // grads[i]: the gradient of tensor i (its dtype or float32, on the plan's device, not overlapping
  // the parameter), or null to leave tensor i and its step count unchanged. CPU: returns the blocks
  // skipped because their gradient held NaN/Inf (strict: throws, nothing changed). CUDA: enqueues the
  // step on `stream` and returns -1; skipped_blocks() reads the count.
  std::int64_t step(const void* const* grads, const DType* grad_dtypes, cudaStream_t stream = nullptr,
                    const char* fn = "step");
  // CUDA: uploads the gradients' addresses and the hyper-parameters without stepping (CUDA graphs).
  void upload(const void* const* grads, const DType* grad_dtypes, cudaStream_t stream = nullptr,
              const char* fn = "upload");

  // -- counters (CUDA: read from the device, which waits for enqueued steps) --
  std::int64_t global_step();
  void set_global_step(std::int64_t step);
  std::vector<std::int64_t> tensor_steps();
  void set_tensor_steps(const std::vector<std::int64_t>& steps, const char* fn = "set_tensor_steps");
  // NAdam: each tensor's running product of its momentum coefficients (torch's state['mu_product'];
  // 1 before its first step). Saved and loaded with the step counts.
  std::vector<float> tensor_mu_products();
  void set_tensor_mu_products(const std::vector<float>& values, const char* fn = "set_tensor_mu_products");
  std::int64_t skipped_blocks(bool last_step_only);
  std::vector<float> trust_ratios();  // LAMB/LARS: the ratio each tensor used in its last step

  // -- files (docs/format.md section 5) --
  // Writes every tensor's state, the step counts and the groups' hyper-parameters atomically.
  void save(const std::string& path);
  // Validates the whole file against this plan (kind, groups, tensors, slots, bits, block sizes, maps,
  // sizes, shapes) before changing anything; then replaces state, step counts and hyper-parameters.
  // Throws std::invalid_argument saying what differs, FormatError (corrupt) or FileError.
  void load(const std::string& path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace octopt
