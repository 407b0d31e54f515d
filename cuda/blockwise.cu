// CUDA block-wise quantize / dequantize: one thread block per quantization block. The
// per-element arithmetic is the shared code of numerics/, so results match the CPU bit for bit.
#include <cub/block/block_reduce.cuh>
#include <optional>

#include "check.cuh"
#include "device_scope.cuh"
#include "octopt/blockwise.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/numerics/percentile.hpp"
#include "octopt/numerics/rng.hpp"

namespace octopt::cuda {
namespace {

constexpr int kThreads = 128;

// absmax is the largest magnitude bit pattern (DESIGN.md): exact and order-free, so two NaNs with
// different payloads give the CPU's absmax whatever the reduction tree (a float max would keep
// whichever NaN it met first).
struct MaxKey {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

__device__ void load_codebook(Codebook& dst, const Codebook& src) {
  const int* s = reinterpret_cast<const int*>(&src);
  int* d = reinterpret_cast<int*>(&dst);
  for (int i = threadIdx.x; i < int(sizeof(Codebook) / sizeof(int)); i += blockDim.x) d[i] = s[i];
}

template <DType D>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const void* x, std::int64_t n, const Codebook cb_arg, int block_size, int bits, bool stochastic,
                    std::uint64_t key, std::uint8_t* codes, float* absmax) {
  using Reduce = cub::BlockReduce<unsigned, kThreads>;
  __shared__ typename Reduce::TempStorage reduce_tmp;
  __shared__ Codebook cb;
  __shared__ float block_amax;
  load_codebook(cb, cb_arg);

  const std::int64_t b = blockIdx.x;
  const std::int64_t i0 = b * block_size;
  const int len = int(min(std::int64_t(block_size), n - i0));
  unsigned amax_key = 0u;
  for (int i = threadIdx.x; i < len; i += kThreads) {
    const unsigned k = magnitude_key(load_f32<D>(x, i0 + i));
    amax_key = k > amax_key ? k : amax_key;
  }
  amax_key = Reduce(reduce_tmp).Reduce(amax_key, MaxKey());
  if (threadIdx.x == 0) {
    const float m = bits_f32(amax_key);
    absmax[b] = m;
    block_amax = m;
  }
  __syncthreads();
  const float amax = block_amax;
  const bool finite = is_finite_abs(amax);
  const float scale = (!finite || amax == 0.0f) ? 1.0f : amax;
  auto code_of = [&](int i) -> unsigned {
    const float v = finite ? load_f32<D>(x, i0 + i) : 0.0f;
    const float r = __fdiv_rn(v, scale);
    if (stochastic) return unsigned(stochastic_code(cb, r, uniform01(key, std::uint64_t(i0 + i))));
    return unsigned(nearest_code(cb, r));
  };
  if (bits == 8) {
    for (int i = threadIdx.x; i < len; i += kThreads) codes[i0 + i] = std::uint8_t(code_of(i));
  } else {
    std::uint8_t* out = codes + i0 / 2;
    for (int p = threadIdx.x; 2 * p < len; p += kThreads) {
      const unsigned lo = code_of(2 * p);
      const unsigned hi = (2 * p + 1 < len) ? code_of(2 * p + 1) : 0u;
      out[p] = std::uint8_t(lo | (hi << 4));
    }
  }
}

template <DType D>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook cb_arg,
                      int block_size, int bits, void* out) {
  __shared__ Codebook cb;
  load_codebook(cb, cb_arg);
  __syncthreads();
  const std::int64_t b = blockIdx.x;
  const std::int64_t i0 = b * block_size;
  const int len = int(min(std::int64_t(block_size), n - i0));
  const float a = absmax[b];
  for (int i = threadIdx.x; i < len; i += kThreads) {
    const std::int64_t k = i0 + i;
    int c;
    if (bits == 8) {
      c = codes[k];
    } else {
      const std::uint8_t byte = codes[k >> 1];
      c = (k & 1) ? (byte >> 4) : (byte & 0x0f);
    }
    store_f32<D>(out, k, __fmul_rn(cb.values[c], a));  // a NaN scale stores the canonical NaN
  }
}

template <DType D>
void launch_quantize(const void* x, std::int64_t n, const Codebook& cb, int block_size, int bits, Rounding rounding,
                     std::uint64_t seed, std::uint8_t* codes, float* absmax, cudaStream_t stream) {
  const std::int64_t nb = num_blocks(n, block_size);
  if (nb == 0) return;
  quantize_kernel<D><<<unsigned(nb), kThreads, 0, stream>>>(
      x, n, cb, block_size, bits, rounding == Rounding::stochastic, rng_key(seed, 0), codes, absmax);
  detail::check_launch("quantize_blockwise (CUDA)");
}

template <DType D>
void launch_dequantize(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                       int block_size, int bits, void* out, cudaStream_t stream) {
  const std::int64_t nb = num_blocks(n, block_size);
  if (nb == 0) return;
  dequantize_kernel<D><<<unsigned(nb), kThreads, 0, stream>>>(codes, absmax, n, cb, block_size, bits, out);
  detail::check_launch("dequantize_blockwise (CUDA)");
}

}  // namespace

void quantize_blockwise(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size, int bits,
                        Rounding rounding, std::uint64_t seed, std::uint8_t* codes, float* absmax, cudaStream_t stream,
                        int device) {
  validate_blockwise(n, cb, block_size, bits, "quantize_blockwise");
  // A launch goes to the current device: an array on cuda:1 while cuda:0 is current would fault.
  std::optional<detail::DeviceScope> scope;
  if (device >= 0) scope.emplace(device);
  switch (dtype) {
    case DType::f32:
      return launch_quantize<DType::f32>(x, n, cb, block_size, bits, rounding, seed, codes, absmax, stream);
    case DType::f16:
      return launch_quantize<DType::f16>(x, n, cb, block_size, bits, rounding, seed, codes, absmax, stream);
    case DType::bf16:
      return launch_quantize<DType::bf16>(x, n, cb, block_size, bits, rounding, seed, codes, absmax, stream);
  }
}

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                          int block_size, int bits, DType out_dtype, void* out, cudaStream_t stream, int device) {
  validate_blockwise(n, cb, block_size, bits, "dequantize_blockwise");
  std::optional<detail::DeviceScope> scope;  // as quantize_blockwise
  if (device >= 0) scope.emplace(device);
  switch (out_dtype) {
    case DType::f32:
      return launch_dequantize<DType::f32>(codes, absmax, n, cb, block_size, bits, out, stream);
    case DType::f16:
      return launch_dequantize<DType::f16>(codes, absmax, n, cb, block_size, bits, out, stream);
    case DType::bf16:
      return launch_dequantize<DType::bf16>(codes, absmax, n, cb, block_size, bits, out, stream);
  }
}

}  // namespace octopt::cuda
