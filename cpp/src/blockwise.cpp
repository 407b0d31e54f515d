// CPU block-wise quantize / dequantize: each thread owns whole blocks.
#include "octopt/blockwise.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "octopt/numerics/convert.hpp"
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

template <DType D>
std::int64_t quantize_impl(const void* x, std::int64_t n, const Codebook& cb, int block_size, int bits,
                           Rounding rounding, std::uint64_t seed, std::uint8_t* codes, float* absmax) {
  const std::int64_t nb = num_blocks(n, block_size);
  const std::uint64_t key = rng_key(seed, 0);
  std::atomic<std::int64_t> bad{0};
  parallel_for(nb, block_grain(block_size), [&](std::int64_t b0, std::int64_t b1) {
    float buf[kMaxBlockSize];
    std::int64_t local_bad = 0;
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t i0 = b * block_size;
      const int len = int(std::min<std::int64_t>(block_size, n - i0));
      float amax = 0.0f;
      for (int i = 0; i < len; ++i) {
        buf[i] = load_f32<D>(x, i0 + i);
        amax = nan_max(amax, std::fabs(buf[i]));
      }
      absmax[b] = amax;
      const bool finite = is_finite_abs(amax);
      local_bad += finite ? 0 : 1;
      if (!finite) {
        for (int i = 0; i < len; ++i) buf[i] = 0.0f;
        amax = 1.0f;
      } else if (amax == 0.0f) {
        amax = 1.0f;  // all-zero block: every r is 0, and 0 * absmax dequantizes to exact zeros
      }
      auto code_of = [&](int i) -> std::uint8_t {
        const float r = buf[i] / amax;
        if (rounding == Rounding::stochastic) return std::uint8_t(stochastic_code(cb, r, uniform01(key, std::uint64_t(i0 + i))));
        return std::uint8_t(nearest_code(cb, r));
      };
      if (bits == 8) {
        for (int i = 0; i < len; ++i) codes[i0 + i] = code_of(i);
      } else {
        std::uint8_t* out = codes + i0 / 2;
        for (int i = 0; i < len; i += 2) {
          const std::uint8_t lo = code_of(i);
          const std::uint8_t hi = (i + 1 < len) ? code_of(i + 1) : std::uint8_t(0);
          out[i / 2] = std::uint8_t(lo | (hi << 4));
        }
      }
    }
    if (local_bad) bad.fetch_add(local_bad, std::memory_order_relaxed);
  });
  return bad.load();
}

template <DType D>
void dequantize_impl(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                     int block_size, int bits, void* out) {
  const std::int64_t nb = num_blocks(n, block_size);
  parallel_for(nb, block_grain(block_size), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t i0 = b * block_size;
      const std::int64_t i1 = std::min<std::int64_t>(i0 + block_size, n);
      const float a = absmax[b];
      if (bits == 8) {
        for (std::int64_t i = i0; i < i1; ++i) store_f32<D>(out, i, cb.values[codes[i]] * a);
      } else {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::uint8_t byte = codes[i >> 1];
          const int c = (i & 1) ? (byte >> 4) : (byte & 0x0f);
          store_f32<D>(out, i, cb.values[c] * a);
        }
      }
    }
  });
}

}  // namespace

std::int64_t quantize_blockwise(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size,
                                int bits, Rounding rounding, std::uint64_t seed, std::uint8_t* codes,
                                float* absmax) {
  validate_blockwise(n, cb, block_size, bits, "quantize_blockwise");
  switch (dtype) {
    case DType::f32: return quantize_impl<DType::f32>(x, n, cb, block_size, bits, rounding, seed, codes, absmax);
    case DType::f16: return quantize_impl<DType::f16>(x, n, cb, block_size, bits, rounding, seed, codes, absmax);
    case DType::bf16: return quantize_impl<DType::bf16>(x, n, cb, block_size, bits, rounding, seed, codes, absmax);
  }
  throw std::invalid_argument("quantize_blockwise: unsupported dtype");
}

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                          int block_size, int bits, DType out_dtype, void* out) {
  validate_blockwise(n, cb, block_size, bits, "dequantize_blockwise");
  switch (out_dtype) {
    case DType::f32: return dequantize_impl<DType::f32>(codes, absmax, n, cb, block_size, bits, out);
    case DType::f16: return dequantize_impl<DType::f16>(codes, absmax, n, cb, block_size, bits, out);
    case DType::bf16: return dequantize_impl<DType::bf16>(codes, absmax, n, cb, block_size, bits, out);
  }
  throw std::invalid_argument("dequantize_blockwise: unsupported dtype");
}

}  // namespace octopt
