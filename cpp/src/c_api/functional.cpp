// The C ABI's library information, optimizer table, quantization maps and block-wise quantization
// (c.h). Arguments are checked with the words of the Python functions of the same name
// (python/octopt/functional.py, maps.py), mostly by the core's own checks.
#include <cstring>
#include <string>
#include <vector>

#include "guard.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/c.h"
#include "octopt/optim_table.hpp"
#include "octopt/qmap.hpp"
#include "octopt/runtime.hpp"
#include "octopt/version.hpp"

using octopt::capi::guard;
using octopt::capi::require;
using octopt::capi::TypeError;

namespace {

void check_bits(int bits, const char* fn) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument(std::string(fn) + ": argument 'bits' must be 4 or 8, got " + std::to_string(bits));
}

void copy_map(const std::vector<float>& q, float* out, std::size_t out_len, const char* fn) {
  require(out, fn, "out");
  if (out_len < q.size())
    throw std::invalid_argument(std::string(fn) + ": argument 'out' must hold " + std::to_string(q.size()) +
                                " values, got " + std::to_string(out_len));
  std::memcpy(out, q.data(), q.size() * sizeof(float));
}

octopt::DType float_dtype(int code, const char* fn, const char* arg) {
  if (code != OCTOPT_FLOAT32 && code != OCTOPT_FLOAT16 && code != OCTOPT_BFLOAT16)
    throw TypeError(std::string(fn) + ": argument '" + arg +
                    "' must have dtype float32 or float16 or bfloat16, got dtype code " + std::to_string(code));
  return octopt::DType(code);
}

// The map of a (de)quantization: the caller's (validated as Python validates it) or the signed dynamic one.
octopt::Codebook codebook(const float* qmap, std::int64_t qmap_len, int bits, const char* fn) {
  if (!qmap) {
    const std::vector<float> q = octopt::dynamic_map(true, bits == 8 ? 7 : 3, bits);
    return octopt::make_codebook(q.data(), std::int64_t(q.size()), bits, fn, "qmap");
  }
  octopt::validate_qmap(qmap, qmap_len, bits, fn, "qmap");
  return octopt::make_codebook(qmap, qmap_len, bits, fn, "qmap");
}

void check_device(int device, const char* fn) {
  if (device < OCTOPT_CPU)
    throw std::invalid_argument(std::string(fn) + ": argument 'device' must be -1 (CPU) or a CUDA device, got " +
                                std::to_string(device));
}

}  // namespace

extern "C" {

int octopt_abi_version(void) { return OCTOPT_C_ABI_VERSION; }
const char* octopt_version(void) { return OCTOPT_VERSION; }
int octopt_cuda_built(void) { return octopt::cuda::built() ? 1 : 0; }

int octopt_optimizer_count(void) { return int(octopt::optim_defs().size()); }
const char* octopt_optimizer_name(int index) {
  return index >= 0 && index < octopt_optimizer_count() ? octopt::optim_defs()[std::size_t(index)].name : nullptr;
}
const char* octopt_optimizer_class_name(int index) {
  return index >= 0 && index < octopt_optimizer_count() ? octopt::optim_defs()[std::size_t(index)].class_name : nullptr;
}
int octopt_hparam_count(void) { return int(octopt::hparam_defs().size()); }
const char* octopt_hparam_key(int index) {
  return index >= 0 && index < octopt_hparam_count() ? octopt::hparam_defs()[std::size_t(index)].key : nullptr;
}

int octopt_default(const char* name, const char* key, double* value) {
  return guard([&] {
    constexpr const char* fn = "octopt_default";
    require(name, fn, "name");
    require(key, fn, "key");
    require(value, fn, "value");
    const octopt::OptimDef& def = octopt::optim_def(std::string(name));
    const octopt::LayoutOptions lo;
    for (const octopt::HParamDef& d : octopt::hparam_defs())
      if (std::strcmp(d.key, key) == 0) {
        *value = octopt::get_hparam(def.defaults, d.id);
        return;
      }
    const std::string k(key);
    if (k == "initial_accumulator_value")
      *value = def.initial_accumulator_value;
    else if (k == "bits")
      *value = lo.bits;
    else if (k == "block_size")
      *value = lo.block_size;
    else if (k == "min_8bit_size")
      *value = double(lo.min_8bit_size);
    else if (k == "first_moment_bits")
      *value = lo.first_moment_bits;
    else
      throw TypeError(std::string(def.class_name) + ": unexpected option '" + k + "'");
  });
}

int octopt_dynamic_map(int is_signed, int bits, float* out, size_t out_len) {
  return guard([&] {
    check_bits(bits, "dynamic_map");
    copy_map(octopt::dynamic_map(is_signed != 0, bits == 8 ? 7 : 3, bits), out, out_len, "dynamic_map");
  });
}

int octopt_linear_map(int is_signed, int bits, float* out, size_t out_len) {
  return guard([&] {
    check_bits(bits, "linear_map");
    copy_map(octopt::linear_map(is_signed != 0, bits), out, out_len, "linear_map");
  });
}

int octopt_log2_map(int bits, double step, float* out, size_t out_len) {
  return guard([&] {
    check_bits(bits, "log2_map");
    if (!(step > 0.0 && step <= 8.0))
      throw std::invalid_argument("log2_map: argument 'step' must be in (0, 8], got " + octopt::format_real(step));
    copy_map(octopt::log2_map_nozero(bits, step), out, out_len, "log2_map");
  });
}

int octopt_fp8_map(float* out, size_t out_len) {
  return guard([&] { copy_map(octopt::fp8_map(), out, out_len, "fp8_map"); });
}

int octopt_quantile_map(const float* x, int64_t n, int bits, float* out, size_t out_len) {
  return guard([&] {
    check_bits(bits, "quantile_map");
    if (n > 0) require(x, "quantile_map", "x");
    if (n < 0) throw std::invalid_argument("quantile_map: argument 'n' must be >= 0, got " + std::to_string(n));
    copy_map(octopt::quantile_map(x, n, bits), out, out_len, "quantile_map");
  });
}

int octopt_quantize_blockwise(const void* x, int dtype, int64_t n, const float* qmap, int64_t qmap_len, int block_size,
                              int bits, int rounding, uint64_t seed, uint8_t* codes, float* absmax, int device,
                              void* stream) {
  return guard([&] {
    constexpr const char* fn = "quantize_blockwise";
    const octopt::DType dt = float_dtype(dtype, fn, "x");
    if (n < 0) throw std::invalid_argument(std::string(fn) + ": argument 'n' must be >= 0, got " + std::to_string(n));
    check_bits(bits, fn);
    octopt::validate_block_size(block_size, fn);
    if (rounding != 0 && rounding != 1)
      throw std::invalid_argument(std::string(fn) +
                                  ": argument 'rounding' must be 0 (nearest) or 1 (stochastic), got " +
                                  std::to_string(rounding));
    check_device(device, fn);
    if (n > 0) {
      require(x, fn, "x");
      require(codes, fn, "codes");
      require(absmax, fn, "absmax");
    }
    const octopt::Codebook cb = codebook(qmap, qmap_len, bits, fn);
    const auto r = rounding ? octopt::Rounding::stochastic : octopt::Rounding::nearest;
    if (device >= 0) {
      octopt::cuda::quantize_blockwise(x, dt, n, cb, block_size, bits, r, seed, codes, absmax,
                                       static_cast<octopt::cudaStream_t>(stream));
      return;
    }
    const std::int64_t bad = octopt::quantize_blockwise(x, dt, n, cb, block_size, bits, r, seed, codes, absmax);
    if (bad > 0)
      throw std::invalid_argument(std::string(fn) + ": argument 'x' contains NaN or Inf (" + std::to_string(bad) +
                                  " block(s) affected)");
  });
}

int octopt_dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, const float* qmap,
                                int64_t qmap_len, int block_size, int bits, int out_dtype, void* out, int device,
                                void* stream) {
  return guard([&] {
    constexpr const char* fn = "dequantize_blockwise";
    const octopt::DType dt = float_dtype(out_dtype, fn, "out");
    if (n < 0) throw std::invalid_argument(std::string(fn) + ": argument 'n' must be >= 0, got " + std::to_string(n));
    check_bits(bits, fn);
    octopt::validate_block_size(block_size, fn);
    check_device(device, fn);
    if (n > 0) {
      require(codes, fn, "codes");
      require(absmax, fn, "absmax");
      require(out, fn, "out");
    }
    const octopt::Codebook cb = codebook(qmap, qmap_len, bits, fn);
    if (device >= 0) {
      octopt::cuda::dequantize_blockwise(codes, absmax, n, cb, block_size, bits, dt, out,
                                         static_cast<octopt::cudaStream_t>(stream));
      return;
    }
    octopt::dequantize_blockwise(codes, absmax, n, cb, block_size, bits, dt, out);
  });
}

}  // extern "C"
