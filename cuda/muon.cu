// Muon's final update on the GPU (octopt/muon.hpp): the shared per-element code, one grid-stride loop.
#include <optional>
#include <stdexcept>
#include <string>

#include "check.cuh"
#include "device_scope.cuh"
#include "octopt/muon.hpp"

namespace octopt::cuda {
namespace {

constexpr int kThreads = 256;

template <DType P, DType O>
__global__ void __launch_bounds__(kThreads)
    muon_apply_kernel(void* p, const void* o, std::int64_t n, float decay, float alpha) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    muon_apply_element<P, O>(p, o, i, decay, alpha);
}

template <DType P>
void launch(void* p, const void* o, DType o_dtype, std::int64_t n, float decay, float alpha, cudaStream_t stream) {
  const std::int64_t blocks = std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65535);
  switch (o_dtype) {
    case DType::f32:
      muon_apply_kernel<P, DType::f32><<<unsigned(blocks), kThreads, 0, stream>>>(p, o, n, decay, alpha);
      break;
    case DType::f16:
      muon_apply_kernel<P, DType::f16><<<unsigned(blocks), kThreads, 0, stream>>>(p, o, n, decay, alpha);
      break;
    case DType::bf16:
      muon_apply_kernel<P, DType::bf16><<<unsigned(blocks), kThreads, 0, stream>>>(p, o, n, decay, alpha);
      break;
  }
  detail::check_launch("muon_apply (CUDA)");
}

}  // namespace

void muon_apply(void* p, DType p_dtype, const void* o, DType o_dtype, std::int64_t n, double decay, double alpha,
                cudaStream_t stream, int device, const char* fn) {
  if (n < 0) throw std::invalid_argument(std::string(fn) + ": element count must be >= 0");
  if (n == 0) return;
  std::optional<detail::DeviceScope> scope;  // a launch goes to the current device
  if (device >= 0) scope.emplace(device);
  const float d = float(decay), a = float(alpha);
  switch (p_dtype) {
    case DType::f32:
      return launch<DType::f32>(p, o, o_dtype, n, d, a, stream);
    case DType::f16:
      return launch<DType::f16>(p, o, o_dtype, n, d, a, stream);
    case DType::bf16:
      return launch<DType::bf16>(p, o, o_dtype, n, d, a, stream);
  }
}

}  // namespace octopt::cuda
