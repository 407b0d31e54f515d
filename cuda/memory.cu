// CUDA build: the device memory a StepPlan's default allocator hands out, and the copies that fill
// and read it (at construction, save and load; never during a step).
#include <cuda_runtime.h>

#include "check.cuh"
#include "octopt/runtime.hpp"

namespace octopt::cuda {
namespace {

// Runs on `device` and puts the caller's current device back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    detail::check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) detail::check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

void* device_malloc(std::size_t bytes, int device) {
  DeviceScope scope(device);
  void* p = nullptr;
  detail::check(cudaMalloc(&p, bytes), "cudaMalloc (optimizer state)");
  return p;
}

void device_free(void* p, int device) noexcept {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  (void)cudaSetDevice(device);
  (void)cudaFree(p);
  (void)cudaSetDevice(previous);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, int device) {
  DeviceScope scope(device);
  detail::check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to the device)");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, int device) {
  DeviceScope scope(device);
  detail::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to the host)");
}

void* managed_malloc(std::size_t bytes, int device) {
  DeviceScope scope(device);
  void* p = nullptr;
  detail::check(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal), "cudaMallocManaged (paged optimizer state)");
  return p;
}

void managed_free(void* p, int device) noexcept { device_free(p, device); }

void prefetch_to_device(const void* p, std::size_t bytes, int device, std::uintptr_t stream) {
  int concurrent = 0;
  detail::check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device),
                "cudaDeviceGetAttribute (concurrent managed access)");
  if (!concurrent || bytes == 0) return;  // pages then migrate on demand
  auto s = reinterpret_cast<cudaStream_t>(stream);
#if CUDART_VERSION >= 13000
  cudaMemLocation where{};
  where.type = cudaMemLocationTypeDevice;
  where.id = device;
  detail::check(cudaMemPrefetchAsync(p, bytes, where, 0, s), "cudaMemPrefetchAsync (paged optimizer state)");
#else
  detail::check(cudaMemPrefetchAsync(p, bytes, device, s), "cudaMemPrefetchAsync (paged optimizer state)");
#endif
}

}  // namespace octopt::cuda
