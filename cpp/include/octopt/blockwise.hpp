#pragma once
// Block-wise quantization: x is cut into blocks of block_size contiguous elements (the last one
// may be partial); each block stores absmax = max|x| and one code per element, the index of the
// map value nearest to x / absmax. 4-bit codes are packed two per byte, low nibble first.
#include <cstdint>

#include "config.hpp"
#include "dtype.hpp"
#include "numerics/codebook.hpp"

namespace octopt {

enum class Rounding : std::uint8_t { nearest = 0, stochastic = 1 };

constexpr int kMinBlockSize = 32;
constexpr int kMaxBlockSize = 4096;

inline std::int64_t num_blocks(std::int64_t n, int block_size) { return (n + block_size - 1) / block_size; }
inline std::int64_t num_code_bytes(std::int64_t n, int bits) { return bits == 4 ? (n + 1) / 2 : n; }

// Throws std::invalid_argument naming `fn` unless block_size is a power of two in [32, 4096].
void validate_block_size(std::int64_t block_size, const char* fn);
// Throws std::invalid_argument naming `fn` unless bits is 4 or 8 and matches the codebook.
void validate_bits(int bits, const Codebook& cb, const char* fn);
// All checks shared by the quantize / dequantize entry points of every backend.
void validate_blockwise(std::int64_t n, const Codebook& cb, int block_size, int bits, const char* fn);

// CPU. Returns the number of blocks whose input holds NaN or Inf; such a block gets a non-finite
// absmax and the code of 0.0 everywhere. codes holds num_code_bytes(n, bits) bytes, absmax num_blocks(n, block_size).
std::int64_t quantize_blockwise(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size,
                                int bits, Rounding rounding, std::uint64_t seed, std::uint8_t* codes, float* absmax);

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                          int block_size, int bits, DType out_dtype, void* out);

namespace cuda {

// The same operations on device pointers, enqueued on `stream`; nothing is allocated and nothing
// waits. A block with NaN/Inf input gets a non-finite absmax (the caller inspects absmax).
// `device`: the GPU holding the arrays (and the stream), made current for the launch and the
// caller's put back; -1: the current device. Without a CUDA build these throw
// std::runtime_error("octopt was built without CUDA").
void quantize_blockwise(const void* x, DType dtype, std::int64_t n, const Codebook& cb, int block_size, int bits,
                        Rounding rounding, std::uint64_t seed, std::uint8_t* codes, float* absmax, cudaStream_t stream,
                        int device = -1);

void dequantize_blockwise(const std::uint8_t* codes, const float* absmax, std::int64_t n, const Codebook& cb,
                          int block_size, int bits, DType out_dtype, void* out, cudaStream_t stream, int device = -1);

}  // namespace cuda
}  // namespace octopt
