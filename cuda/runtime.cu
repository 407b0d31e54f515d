// CUDA build: device discovery. No call here may throw or crash on a machine without a driver.
#include <cuda_runtime.h>

#include <string>

#include "octopt/runtime.hpp"

namespace octopt::cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  // With the statically linked runtime, a missing driver or GPU is an error code, not a crash.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool available() { return device_count() > 0; }

std::string unavailable_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // e.g. "CUDA driver version is insufficient for CUDA runtime version": this build's static runtime
    // needs a driver at least as new as the toolkit it was built with.
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err) + " (runtime " + runtime_version() + ")";
  }
  return n > 0 ? "" : "no CUDA device";
}

std::string runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace octopt::cuda
