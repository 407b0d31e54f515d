#pragma once
// A self-contained optimizer for C++ programs: a thin front end over the core's StepPlan (step_plan.hpp),
// which owns the state. It holds parameters by pointer (float32, float16 or bfloat16; on the CPU or a
// CUDA device), in one or more param groups, steps them all at once and saves/loads the same state files
// as Python's octopt.Optimizer (docs/format.md section 5), so a run can move between the two.
// Example: examples/cpp/least_squares.cpp; guide: docs/cpp.md.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "step_plan.hpp"

namespace octopt {

class Optimizer {
 public:
  // An optimizer with one param group (group 0) of these hyper-parameters and layout: bits 8, 4 or 32;
  // block_size a power of two in [32, 4096], or 0 for the default (256 for 8-bit and 32-bit state, 128
  // for 4-bit); tensors with fewer than min_8bit_size elements keep 32-bit state. seed keys stochastic
  // rounding, which 4-bit states use. Throws std::invalid_argument naming the bad argument.
  explicit Optimizer(OptimKind kind = OptimKind::adam, HyperParams hp = {}, int bits = 8, int block_size = 0,
                     std::int64_t min_8bit_size = kDefaultMin8bitSize, std::uint64_t seed = 0);
  // An optimizer without groups yet (add_group), with these plan options (seed, rounding, percentile,
  // strict) and, optionally, an allocator of its state memory.
  Optimizer(OptimKind kind, const PlanOptions& options,
            std::shared_ptr<StateAllocator> allocator = default_state_allocator());

  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // A further param group; returns its index.
  int add_group(const HyperParams& hp, const LayoutOptions& layout);
  std::size_t num_groups() const { return hparams_.size(); }

  // Adagrad's initial sum of squares of group 0 (>= 0); before the first add_param.
  void set_initial_accumulator_value(double value);

  // Registers a float32 CPU parameter of n elements in group 0, updated in place by step(); `data` must
  // stay valid and must not overlap another parameter. shape: for the state file ({} means {n}); its
  // product must be n. Returns the parameter's index.
  std::size_t add_param(float* data, std::int64_t n, std::vector<std::int64_t> shape = {});
  // Any dtype, any group, on the CPU (device -1) or a CUDA device (every parameter on one device).
  std::size_t add_param(int group, void* data, DType dtype, std::vector<std::int64_t> shape, int device = -1);

  // One step of every parameter: grads[i] holds the gradient of parameter i (float32, as many values as
  // the parameter), or is null to leave parameter i unchanged this time. Returns the number of blocks
  // left unchanged because their gradient held NaN/Inf.
  std::int64_t step(const std::vector<const float*>& grads);
  // Gradients of any dtype (the parameter's or float32). CUDA: enqueued on `stream`, returns -1.
  std::int64_t step(const std::vector<const void*>& grads, const std::vector<DType>& grad_dtypes,
                    cudaStream_t stream = nullptr);

  // Writes the state to `path` atomically, in the format of Python's Optimizer.save.
  void save(const std::string& path);
  // Reads a file written by save() here or by Python's Optimizer.save. The whole file and its match
  // with this optimizer are checked before anything changes; then the state, the step counts and the
  // hyper-parameters stored in the file replace the current ones. Throws std::invalid_argument
  // saying what differs, octopt::FormatError (a corrupt file) or octopt::FileError.
  void load(const std::string& path);

  std::size_t state_bytes() const;  // exact bytes of codes, absmax and 32-bit state
  OptimKind kind() const;
  // A group's hyper-parameters. The mutable form is how a program changes them between steps (e.g. a
  // learning-rate schedule); step() hands changed values to the core, which validates them.
  const HyperParams& hparams(int group = 0) const;
  HyperParams& hparams(int group = 0);
  std::size_t num_params() const;
  std::int64_t global_step();
  std::int64_t param_step(std::size_t i);  // steps parameter i has taken
  // Bits of each used state slot of parameter i (32, 8 or 4), in slot order.
  std::vector<int> state_bits(std::size_t i) const;
  StepPlan& plan() { return *plan_; }

 private:
  void sync_hparams();

  std::unique_ptr<StepPlan> plan_;
  std::vector<HyperParams> hparams_;  // what users edit; handed to the plan when changed
  std::vector<LayoutOptions> layouts_;
  int created_groups_ = 0;         // groups made in the plan (the constructor's group 0 at its first add_param)
  std::vector<const void*> ptrs_;  // per step
  std::vector<DType> dtypes_;
};

}  // namespace octopt
