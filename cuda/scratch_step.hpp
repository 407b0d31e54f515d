#pragma once
// The device side of octopt.optax's CUDA XLA FFI handler (python/src/ffi_step_cuda.cpp): one fused
// step of every tensor of a call, enqueued on XLA's stream, with every table in scratch memory XLA
// hands the call. Plain C++ (no CUDA or XLA headers), so the handler's translation unit needs neither
// nvcc nor this library's internals.
//
// Per call, all on the stream and without host synchronization, allocation or pageable copy:
//  1. the tables (tensor descriptors, tile offsets, codebooks, gradient pointers) are built on the
//     host and written into scratch by a tiny kernel that receives them as its parameters, in
//     pieces under the classic 4 KB parameter limit; the counters are zeroed with cudaMemsetAsync;
//  2. a one-block kernel builds the HyperParams from hp_dynamic / hp_static and sets the step
//     counters from the device step operand; if a hyper-parameter is not finite, the step is < 1 or
//     a NAdam mu_product is outside [0, 1] it clears every gradient pointer, so the step changes
//     nothing (the results keep the operands' values; updates are zero);
//  3. the fused step kernel of the CUDA backend runs over these tables (LAMB/LARS: two launches),
//     reading and advancing NAdam's mu_product in the call's tensor_scalars;
//  4. in updates mode one launch computes p_new - p over every tensor.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "octopt/numerics/hparam_array.hpp"
#include "octopt/optim.hpp"

namespace octopt::cuda::xla {

struct Call {
  StepConfig cfg;                       // kind, host codebooks, seed, stochastic flags (step: unused)
  const StepTensor* tensors = nullptr;  // device pointers: the results, already holding the operands' values
  std::size_t n = 0;
  const void* const* params_in = nullptr;  // updates mode: tensor t's parameter before the step; null: params mode
  const float* hp_dynamic = nullptr;       // device, kNumHyperParams values
  const std::int32_t* step = nullptr;      // device scalar: the step being taken (1-based)
  // device, n * tensor_scalar_defs(kind).size() floats (step_setup.hpp): the per-tensor scalar state
  // (NAdam's mu_product), already holding the operand's values; advanced in place by the step
  float* tensor_scalars = nullptr;
  double hp_static[kNumHyperParams] = {};
  std::int64_t dynamic_mask = 0;  // bit k: hyper-parameter k comes from hp_dynamic
  std::int64_t flags = 0;         // HyperParamFlags
};

class Launch {
 public:
  // Validates the call and lays out its scratch; throws std::invalid_argument naming `fn`.
  Launch(const Call& call, const char* fn);
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  std::size_t scratch_bytes() const;
  std::size_t scratch_alignment() const { return 256; }
  // Enqueues the step on `stream` using `scratch` (scratch_bytes() on the stream's device, valid
  // until the stream has run the step). Throws std::runtime_error on a CUDA error.
  void enqueue(void* scratch, cudaStream_t stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octopt::cuda::xla
