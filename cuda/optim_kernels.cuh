#pragma once
// Launchers of the fused-step kernels (optim_kernels.cu), used by the plan (optim.cu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "optim_device.cuh"

namespace octopt::cuda::detail {

std::size_t step_kernel_static_smem();
void set_step_kernel_smem(std::size_t dynamic_bytes);
void launch_prepare(const Tables& tb, cudaStream_t stream);
void launch_step(const Tables& tb, int phase, std::int64_t tiles, std::size_t smem, cudaStream_t stream);
void launch_trust(const Tables& tb, cudaStream_t stream);

}  // namespace octopt::cuda::detail
