#pragma once
// Error checks for CUDA runtime calls and kernel launches.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace octopt::cuda::detail {

inline void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// After every launch: a bad configuration is reported here, not at some later call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace octopt::cuda::detail
