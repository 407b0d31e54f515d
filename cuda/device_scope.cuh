#pragma once
// Runs host code on one GPU and gives the calling thread back what it had. A thread that had no CUDA
// context (a checkpoint thread calling state_dict(), a data loader) must not get one on GPU 0 when the
// scope ends: cudaSetDevice creates the device's primary context at once (CUDA 12+), hundreds of MB
// per process. So the scope restores the previous device only when a context was current before.
#include <cuda.h>
#include <cuda_runtime.h>

#include "check.cuh"

namespace octopt::cuda::detail {

// Whether the calling thread has a current CUDA context. The driver's cuCtxGetCurrent, reached through
// the runtime's entry-point query so that nothing links libcuda (the static runtime loads it itself).
// Unknown (no such entry point): true, which keeps the previous behaviour of restoring the device.
inline bool thread_has_context() {
  using GetCurrent = CUresult (*)(CUcontext*);
  static const GetCurrent get_current = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<GetCurrent>(fn);
  }();
  if (!get_current) return true;
  CUcontext ctx = nullptr;
  return get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr;
}

// Makes `device` current for the scope. `nothrow`: for destructors and noexcept functions, where a
// failure can only be ignored (ok() says whether the device was set).
class DeviceScope {
 public:
  explicit DeviceScope(int device, bool nothrow = false) : device_(device) {
    had_context_ = thread_has_context();
    cudaError_t err = cudaGetDevice(&previous_);
    if (err == cudaSuccess && (previous_ != device || !had_context_)) err = cudaSetDevice(device);
    ok_ = err == cudaSuccess;
    if (!ok_ && !nothrow) check(err, "cudaSetDevice");
  }
  ~DeviceScope() {
    if (ok_ && had_context_ && previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  bool ok() const { return ok_; }

 private:
  int device_;
  int previous_ = 0;
  bool had_context_ = true;
  bool ok_ = false;
};

}  // namespace octopt::cuda::detail
