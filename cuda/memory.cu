// CUDA build: the device memory a StepPlan's default allocator hands out, and the copies that fill
// and read it (at construction, save and load; never during a step).
#include <cuda_runtime.h>

#include "check.cuh"
#include "device_scope.cuh"
#include "octopt/runtime.hpp"

namespace octopt::cuda {
using detail::DeviceScope;

void* device_malloc(std::size_t bytes, int device) {
  DeviceScope scope(device);
  void* p = nullptr;
  detail::check(cudaMalloc(&p, bytes), "cudaMalloc (optimizer state)");
  return p;
}

void device_free(void* p, int device) noexcept {
  DeviceScope scope(device, /*nothrow=*/true);
  if (scope.ok()) (void)cudaFree(p);
}

// These copies run at construction, save and load, never in a step, and may meet a step in flight on
// any stream of the caller, blocking or not: a copy on the legacy default stream is not ordered with
// a non-blocking stream, and a copy from pageable memory may return before it has landed. So each
// waits for the device before (no step still reads or writes the buffer) and after (the copy has
// landed before any later launch, on whatever stream).
void copy_to_device(void* dst, const void* src, std::size_t bytes, int device) {
  DeviceScope scope(device);
  detail::check(cudaDeviceSynchronize(), "copy_to_device: cudaDeviceSynchronize");
  detail::check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to the device)");
  detail::check(cudaDeviceSynchronize(), "copy_to_device: cudaDeviceSynchronize");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, int device) {
  DeviceScope scope(device);
  detail::check(cudaDeviceSynchronize(), "copy_to_host: cudaDeviceSynchronize");
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
