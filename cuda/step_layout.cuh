#pragma once
// Where a fused step's tables live in one device region, and what goes into them: computed on the
// host from the tensors, then placed either in memory a DevicePlan allocates once (optim.cu) or in
// scratch memory XLA hands an FFI call (scratch_step.cu). The kernels read them through Tables.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "octopt/optim.hpp"
#include "optim_device.cuh"

namespace octopt::cuda::detail {

struct StepLayout {
  // Byte offsets in the region (256-aligned), in this order: tensors | tile offsets | codebooks |
  // mu products | args | steps | counters | trust | tile counters | block partials | chunk partials.
  std::size_t o_tensors = 0, o_tiles = 0, o_cb = 0, o_mu = 0, o_args = 0, o_steps = 0, o_counters = 0, o_trust = 0,
              o_tile_counters = 0, o_block_partials = 0, o_chunk_partials = 0;
  std::size_t total = 0;       // bytes of the region
  std::size_t args_bytes = 0;  // of the per-step argument blob (at o_args)
  std::size_t smem = 0;        // dynamic shared memory of step_kernel
  Tables tables{};             // pointers relative to a null base: see bind()
  std::vector<DevTensor> tensors;
  std::vector<std::int64_t> tile_offsets;  // n + 1 prefix sums
  std::vector<float> mu_products;          // n: the tensors' StepTensor::mu_product

  // The region's content up to (not including) the step counts, as the host builds it: tensors, tile
  // offsets, codebooks, mu products, and the argument blob left zero (its writer fills it).
  // Everything after o_args + args_bytes must be zero before the first step.
  std::vector<unsigned char> image(const StepConfig& cfg) const;
  // The tables of a region at `base`.
  Tables bind(void* base) const;
};

// Validates the tensors (validate_step, group indices) and lays out their tables; throws
// std::invalid_argument naming `fn`. groups[i] < n_groups is slot i's hyper-parameter group.
StepLayout layout_step(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const int* groups,
                       int n_groups, const char* fn);

// Lets step_kernel use `smem` bytes of dynamic shared memory on the current device (a no-op below
// the default 48 KB limit; above it, raises the limit to the device's maximum, never lowers it).
void reserve_step_smem(std::size_t smem);

}  // namespace octopt::cuda::detail
