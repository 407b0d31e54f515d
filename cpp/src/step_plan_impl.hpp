#pragma once
// The inside of octopt::StepPlan, shared by its stepping part (step_plan.cpp) and its file part
// (step_plan_io.cpp).
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "octopt/qmap.hpp"
#include "octopt/step_plan.hpp"
#include "octopt/step_setup.hpp"

namespace octopt {

struct StepPlan::Impl {
  // One allocation of the plan's allocator; returned to it when the plan goes.
  struct Buffer {
    void* ptr = nullptr;
    StateRequest request;  // what it was allocated for: count, element type, device, ...
  };
  struct Group {
    HyperParams hp;
    LayoutOptions layout;
    std::vector<int> slots;        // used_slots under hp: fixed once the group exists
    std::int64_t cached_step = 0;  // the step `scalars` were computed for (0: none yet)
    SlotScalars scalars{};
  };
  struct Tensor {
    void* data = nullptr;
    DType dtype = DType::f32;
    std::int64_t numel = 0;
    std::vector<std::int64_t> shape;
    int group = 0;
    TensorLayout layout;
    Buffer values[kMaxStateSlots], absmax[kMaxStateSlots];  // per state slot
    std::int64_t step = 0;  // steps taken (CPU; CUDA: the device counters are authoritative)
  };

  OptimKind kind;
  PlanOptions options;
  std::shared_ptr<StateAllocator> allocator;
  std::vector<Group> groups;
  std::vector<Tensor> tensors;
  std::vector<StepTensor> step_tensors;  // one per tensor: the step's view, grads filled per step
  StepWorkspace workspace;
  int device = -1;
  std::int64_t global_step = 0;
  std::int64_t skipped_total = 0, skipped_last = 0;
  std::unique_ptr<cuda::DevicePlan> device_plan;  // built at the first CUDA step after a change
  bool device_plan_stale = true;
  std::vector<std::int64_t> pending_steps;  // CUDA: step counts set before the device plan exists
  std::atomic<bool> busy{false};

  ~Impl();
  // Allocates `r`, placing a large host buffer away from `param` and from `taken` (the page offsets of the tensor's
  // buffers placed so far, to which this one's is added).
  Buffer allocate(StateRequest r, const void* param, std::vector<int>& taken);
  void release(Buffer& b) noexcept;
  StepOptions step_options() const;
  StepConfig config() const;  // of the next step (setup_step)
  // CUDA: (re)builds the device plan, carrying the step counters over.
  // Throws std::invalid_argument naming `fn` when `stream` is being captured (nothing may be built then).
  void build_device_plan(cudaStream_t stream, const char* fn);
  cuda::StepArgs device_args(const void* const* grads, const DType* grad_dtypes, std::vector<HyperParams>& hps) const;
  void fill_state(Tensor& t);
};

// Two threads stepping one plan would race on its state: the second is refused.
class PlanBusy {
 public:
  PlanBusy(std::atomic<bool>& flag, const char* fn);
  ~PlanBusy() { flag_.store(false); }

 private:
  std::atomic<bool>& flag_;
};

}  // namespace octopt
