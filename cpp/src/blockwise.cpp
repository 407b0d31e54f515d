// CPU block-wise quantize / dequantize: each thread owns whole blocks.
#include "octopt/blockwise.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cpu/kernels.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/threading.hpp"

namespace octopt {

void validate_block_size(std::int64_t block_size, const char* fn) {
  const bool pow2 = block_size > 0 && (block_size & (block_size - 1)) == 0;
  if (!pow2 || block_size < kMinBlockSize || block_size > kMaxBlockSize)
    throw std::invalid_argument(std::string(fn) + ": argument 'block_size' must be a power of two in [" +
                                std::to_string(kMinBlockSize) + ", " + std::to_string(kMaxBlockSize) + "], got " +
                                std::to_string(block_size));
}

void validate_bits(int bits, const Codebook& cb, const char* fn) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument(std::string(fn) + ": argument 'bits' must be 4 or 8, got " + std::to_string(bits));
  if (cb.size != (1 << bits))
    throw std::invalid_argument(std::string(fn) + ": argument 'qmap' has " + std::to_string(cb.size) +
                                " entries but bits=" + std::to_string(bits) + " needs " + std::to_string(1 << bits));
}

void validate_blockwise(std::int64_t n, const Codebook& cb, int block_size, int bits, const char* fn) {
  if (n < 0) throw std::invalid_argument(std::string(fn) + ": element count must be >= 0");
  validate_block_size(block_size, fn);
  validate_bits(bits, cb, fn);
}

namespace {
// Blocks per parallel task, so that small blocks are not scheduled one by one.
std::int64_t block_grain(int block_size) { return std::max<std::int64_t>(1, 16384 / block_size); }
}  // namespace

std::int64_t quantize_blockwise(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size,
                                int bits, Rounding rounding, std::uint64_t seed, std::uint8_t* codes, float* absmax) {
  validate_blockwise(n, cb, block_size, bits, "quantize_blockwise");
  const cpu::Kernels& k = cpu::active();
  const std::uint64_t key = rng_key(seed, 0);
  std::atomic<std::int64_t> bad{0};
  parallel_for(num_blocks(n, block_size), block_grain(block_size), [&](std::int64_t b0, std::int64_t b1) {
    const std::int64_t local = k.quantize(x, dtype, n, cb, block_size, bits, rounding, key, codes, absmax, b0, b1);
    if (local) bad.fetch_add(local, std::memory_order_relaxed);
  });
  return bad.load();
}

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                          int block_size, int bits, DType out_dtype, void* out) {
  validate_blockwise(n, cb, block_size, bits, "dequantize_blockwise");
  const cpu::Kernels& k = cpu::active();
  parallel_for(num_blocks(n, block_size), block_grain(block_size), [&](std::int64_t b0, std::int64_t b1) {
    k.dequantize(codes, absmax, n, cb, block_size, bits, out_dtype, out, b0, b1);
  });
}

}  // namespace octopt
