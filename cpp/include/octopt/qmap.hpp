#pragma once
// Quantization maps: 2^bits float32 values, ascending, in [-1, 1].
#include <cstdint>
#include <vector>

#include "numerics/codebook.hpp"

namespace octopt {

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits, total_bits), bit for bit, unpadded:
// 2^total_bits entries. (8-bit: the default map of m (signed) and v (unsigned); 4-bit: (true, 3, 4).)
std::vector<float> dynamic_map(bool is_signed, int max_exponent_bits = 7, int total_bits = 8);

// Evenly spaced values: signed maps hold [-1, 1] in 2^bits - 1 steps plus one extra zero at the
// centre (as bitsandbytes' create_linear_map); unsigned maps hold [0, 1] in 2^bits values.
std::vector<float> linear_map(bool is_signed, int bits = 8);

// (i + 1) / 2^bits for i = 0 .. 2^bits - 1: a map without zero for the second moment, so that
// 1/sqrt(v) never divides by a quantized zero (Li et al., NeurIPS 2023).
std::vector<float> linear_map_nozero(int bits = 4);

// 2^(step * (i - (2^bits - 1))) for i = 0 .. 2^bits - 1 (4 bits, step 0.8: 2^-12 .. 1): a zero-free
// map with constant relative spacing, the default for 4-bit second moments (docs/decisions.md).
std::vector<float> log2_map_nozero(int bits = 4, double step = 0.8);

// All 256 bit patterns of an 8-bit float with 4 exponent and 3 mantissa bits (bitsandbytes'
// create_fp8_map(True, 4, 3, 8) layout: no NaN or Inf codes), normalized by the largest value.
std::vector<float> fp8_map();

// A map whose entries are the 2^bits - 1 equal-probability quantiles of the finite values of x
// plus zero, normalized by the largest magnitude.
std::vector<float> quantile_map(const float* x, std::int64_t n, int bits = 8);

// Throws std::invalid_argument naming `fn` and `arg` when the map is not a valid 2^bits map.
void validate_qmap(const float* values, std::int64_t n, int bits, const char* fn, const char* arg);

// Validates and prepares a map for encoding.
Codebook make_codebook(const float* values, std::int64_t n, int bits, const char* fn = "make_codebook",
                       const char* arg = "qmap");
// From now on a positive value never quantizes to a zero entry but to the first positive one
// (for second-moment states; see Codebook::nonzero_floor). No effect on a map without zero.
void keep_nonzero(Codebook& cb);

inline Codebook make_codebook(const std::vector<float>& values, int bits) {
  return make_codebook(values.data(), std::int64_t(values.size()), bits);
}

}  // namespace octopt
