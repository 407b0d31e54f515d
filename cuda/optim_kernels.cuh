#pragma once
// Launchers of the fused-step kernels (optim_kernels.cu), used by the plan (optim.cu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "optim_device.cuh"

namespace octopt::cuda::detail {

std::size_t step_kernel_static_smem();
void set_step_kernel_smem(std::size_t dynamic_bytes);
// One launch over every tile of the plan (phase: kPhaseSingle, or kPhaseNorms then kPhaseApply).
void launch_step(const Tables& tb, int phase, std::size_t smem, cudaStream_t stream);

}  // namespace octopt::cuda::detail
