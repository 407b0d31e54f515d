#include <nanobind/ndarray.h>

#include "array_ref.hpp"
#include "exports.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/qmap.hpp"

namespace {

using HostF32 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using AnyIn = nb::ndarray<nb::ro>;
using AnyOut = nb::ndarray<>;

// NumPy has no bfloat16 of its own, and an ml_dtypes bfloat16 array reaches nanobind neither through
// DLPack (NumPy refuses to export the dtype) nor through the buffer protocol. The Python layer hands
// such an array over as a uint16 view of its bits and says so with `bf16_bits`.
octopt::DType float_or_bf16_bits(const ArrayRef& r, bool bf16_bits, const char* fn, const char* arg) {
  if (!bf16_bits) return float_dtype(r, fn, arg);
  require_dtype(r, nb::dtype<std::uint16_t>(), "uint16 (the bits of a bfloat16 array)", fn, arg);
  return octopt::DType::bf16;
}

// Returns the number of blocks with NaN/Inf input on the CPU; -1 on CUDA, where the caller
// inspects absmax itself (reading a count back would synchronize the stream).
std::int64_t quantize_into(AnyIn x, HostF32 qmap, int block_size, int bits, bool stochastic, std::uint64_t seed,
                           AnyOut codes, AnyOut absmax, std::uintptr_t stream, bool bf16_bits) {
  constexpr const char* fn = "quantize_blockwise";
  const ArrayRef xr = array_ref(x, fn, "x");
  const ArrayRef cr = array_ref(codes, fn, "codes");
  const ArrayRef ar = array_ref(absmax, fn, "absmax");
  const octopt::DType dt = float_or_bf16_bits(xr, bf16_bits, fn, "x");
  require_dtype(cr, nb::dtype<std::uint8_t>(), "uint8", fn, "codes");
  require_dtype(ar, nb::dtype<float>(), "float32", fn, "absmax");
  require_same_device(xr, cr, fn, "codes");
  require_same_device(xr, ar, fn, "absmax");
  octopt::validate_block_size(block_size, fn);
  const octopt::Codebook cb = octopt::make_codebook(qmap.data(), std::int64_t(qmap.size()), bits, fn, "qmap");
  if (cr.size != octopt::num_code_bytes(xr.size, bits))
    throw std::invalid_argument(std::string(fn) + ": argument 'codes' must hold " +
                                std::to_string(octopt::num_code_bytes(xr.size, bits)) + " bytes, got " +
                                std::to_string(cr.size));
  if (ar.size != octopt::num_blocks(xr.size, block_size))
    throw std::invalid_argument(std::string(fn) + ": argument 'absmax' must hold " +
                                std::to_string(octopt::num_blocks(xr.size, block_size)) + " values, got " +
                                std::to_string(ar.size));
  const auto rounding = stochastic ? octopt::Rounding::stochastic : octopt::Rounding::nearest;
  auto* c = static_cast<std::uint8_t*>(cr.data);
  auto* a = static_cast<float*>(ar.data);
  if (is_cuda(xr)) {
    octopt::cuda::quantize_blockwise(xr.data, dt, xr.size, cb, block_size, bits, rounding, seed, c, a,
                                     as_stream(stream), xr.device_id);
    return -1;
  }
  nb::gil_scoped_release release;
  return octopt::quantize_blockwise(xr.data, dt, xr.size, cb, block_size, bits, rounding, seed, c, a);
}

void dequantize_into(AnyIn codes, AnyIn absmax, HostF32 qmap, int block_size, int bits, AnyOut out,
                     std::uintptr_t stream, bool bf16_bits) {
  constexpr const char* fn = "dequantize_blockwise";
  const ArrayRef cr = array_ref(codes, fn, "codes");
  const ArrayRef ar = array_ref(absmax, fn, "absmax");
  const ArrayRef orf = array_ref(out, fn, "out");
  require_dtype(cr, nb::dtype<std::uint8_t>(), "uint8", fn, "codes");
  require_dtype(ar, nb::dtype<float>(), "float32", fn, "absmax");
  const octopt::DType dt = float_or_bf16_bits(orf, bf16_bits, fn, "out");
  require_same_device(cr, ar, fn, "absmax");
  require_same_device(cr, orf, fn, "out");
  octopt::validate_block_size(block_size, fn);
  const octopt::Codebook cb = octopt::make_codebook(qmap.data(), std::int64_t(qmap.size()), bits, fn, "qmap");
  const std::int64_t n = orf.size;
  if (cr.size != octopt::num_code_bytes(n, bits))
    throw std::invalid_argument(std::string(fn) + ": argument 'codes' holds " + std::to_string(cr.size) +
                                " bytes but " + std::to_string(n) + " elements need " +
                                std::to_string(octopt::num_code_bytes(n, bits)));
  if (ar.size != octopt::num_blocks(n, block_size))
    throw std::invalid_argument(std::string(fn) + ": argument 'absmax' holds " + std::to_string(ar.size) +
                                " values but " + std::to_string(n) + " elements in blocks of " +
                                std::to_string(block_size) + " need " +
                                std::to_string(octopt::num_blocks(n, block_size)));
  const auto* c = static_cast<const std::uint8_t*>(cr.data);
  const auto* a = static_cast<const float*>(ar.data);
  if (is_cuda(cr)) {
    octopt::cuda::dequantize_blockwise(c, a, n, cb, block_size, bits, dt, orf.data, as_stream(stream), cr.device_id);
    return;
  }
  nb::gil_scoped_release release;
  octopt::dequantize_blockwise(c, a, n, cb, block_size, bits, dt, orf.data);
}

}  // namespace

void export_blockwise(nb::module_& m) {
  m.def("quantize_blockwise_into", &quantize_into, nb::arg("x").noconvert(), nb::arg("qmap").noconvert(),
        nb::arg("block_size"), nb::arg("bits"), nb::arg("stochastic"), nb::arg("seed"), nb::arg("codes").noconvert(),
        nb::arg("absmax").noconvert(), nb::arg("stream"), nb::arg("bf16_bits") = false);
  m.def("dequantize_blockwise_into", &dequantize_into, nb::arg("codes").noconvert(), nb::arg("absmax").noconvert(),
        nb::arg("qmap").noconvert(), nb::arg("block_size"), nb::arg("bits"), nb::arg("out").noconvert(),
        nb::arg("stream"), nb::arg("bf16_bits") = false);
}
