#pragma once
// Raw views of DLPack arrays handed over by nanobind. The Python layer has already produced
// user-facing errors; these checks are the last line of defence before a raw pointer is used.
#include <nanobind/ndarray.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "octopt/config.hpp"
#include "octopt/dtype.hpp"

namespace nb = nanobind;

struct ArrayRef {
  void* data;
  std::int64_t size;
  nb::dlpack::dtype dtype;
  int device_type;
  int device_id;
};

template <typename... Ts>
ArrayRef array_ref(const nb::ndarray<Ts...>& a, const char* fn, const char* arg) {
  std::int64_t size = 1, expect = 1;
  bool contiguous = true;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    const std::int64_t extent = std::int64_t(a.shape(d));
    if (extent != 1 && a.stride(d) != expect) contiguous = false;
    expect *= extent;
    size *= extent;
  }
  // An empty array has nothing to lay out, and NumPy reports stride 0 for it.
  if (!contiguous && size != 0)
    throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' must be C-contiguous");
  return ArrayRef{const_cast<void*>(static_cast<const void*>(a.data())), size, a.dtype(), a.device_type(),
                  a.device_id()};
}

inline bool is_float_dtype(const ArrayRef& r, octopt::DType* out) {
  const auto& t = r.dtype;
  if (t.lanes != 1) return false;
  if (t.code == std::uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 32)
    *out = octopt::DType::f32;
  else if (t.code == std::uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 16)
    *out = octopt::DType::f16;
  else if (t.code == std::uint8_t(nb::dlpack::dtype_code::Bfloat) && t.bits == 16)
    *out = octopt::DType::bf16;
  else
    return false;
  return true;
}

inline octopt::DType float_dtype(const ArrayRef& r, const char* fn, const char* arg) {
  octopt::DType d;
  if (!is_float_dtype(r, &d))
    throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be float32, float16 or bfloat16").c_str());
  return d;
}

inline void require_dtype(const ArrayRef& r, nb::dlpack::dtype want, const char* want_name, const char* fn,
                          const char* arg) {
  if (r.dtype != want)
    throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be " + want_name).c_str());
}

inline bool is_cuda(const ArrayRef& r) { return r.device_type == nb::device::cuda::value; }

inline void require_same_device(const ArrayRef& a, const ArrayRef& b, const char* fn, const char* arg) {
  if (a.device_type != b.device_type || (is_cuda(a) && a.device_id != b.device_id))
    throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is on a different device than the input");
  if (a.device_type != nb::device::cpu::value && !is_cuda(a))
    throw std::invalid_argument(std::string(fn) + ": arrays must be on the CPU or a CUDA device");
}

// A gradient must not share memory with its parameter: the step would read values it has written.
// `index`: the gradient's position in 'grads' (its name is built only for the message).
inline void check_grad_alias(const char* fn, std::size_t index, const void* grad, std::size_t grad_bytes,
                             const void* param, std::size_t param_bytes) {
  if (!grad_bytes || !param_bytes) return;
  const auto g = reinterpret_cast<std::uintptr_t>(grad), p = reinterpret_cast<std::uintptr_t>(param);
  if (!(g < p + param_bytes && p < g + grad_bytes)) return;
  const std::string arg = "grads[" + std::to_string(index) + "]";
  if (g == p)
    throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is the parameter itself (aliased memory)");
  throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' overlaps its parameter's memory (aliased)");
}

inline octopt::cudaStream_t as_stream(std::uintptr_t handle) { return reinterpret_cast<octopt::cudaStream_t>(handle); }
