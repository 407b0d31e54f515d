// Binding of the XLA FFI handlers (octopt.optax): the CPU and, when built, CUDA handlers as PyCapsules for
// jax.ffi.register_ffi_target, and the hyper-parameter order it expects.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "exports.hpp"
#include "ffi_step.hpp"
#include "octopt/numerics/hparam_array.hpp"
#include "octopt/optim.hpp"
#include "octopt/step_setup.hpp"

void export_ffi(nb::module_& m) {
#ifdef OCTOPT_HAVE_XLA_FFI
  m.def("xla_ffi_built", [] { return true; });
  m.def(
      "xla_ffi_step_cpu", [] { return nb::capsule(octopt_ffi::step_cpu_handler()); },
      "The CPU step handler (XLA_FFI_Handler*) as a PyCapsule for jax.ffi.register_ffi_target.");
#else
  m.def("xla_ffi_built", [] { return false; });
#endif
#ifdef OCTOPT_HAVE_XLA_FFI_CUDA
  m.def("xla_ffi_cuda_built", [] { return true; });
  m.def(
      "xla_ffi_step_cuda", [] { return nb::capsule(octopt_ffi::step_cuda_handler()); },
      "The CUDA step handler (XLA_FFI_Handler*) as a PyCapsule for jax.ffi.register_ffi_target.");
#else
  m.def("xla_ffi_cuda_built", [] { return false; });
#endif
  m.def("xla_ffi_kind", [](const std::string& name) { return int(octopt::parse_optim(name)); }, nb::arg("name"));
  m.def("xla_ffi_hyperparam_names", [] { return octopt::hparam_array_names(); });
  m.def(
      "xla_ffi_tensor_scalars",
      [](const std::string& name) {
        std::vector<std::pair<std::string, float>> out;
        for (const octopt::TensorScalarDef& d : octopt::tensor_scalar_defs(octopt::parse_optim(name)))
          out.emplace_back(d.name, d.initial);
        return out;
      },
      nb::arg("name"),
      "The per-tensor scalar state of an optimizer ((name, initial value) in the order of the handlers' "
      "tensor_scalars operand): NAdam's mu_product, else none.");
  m.def("xla_ffi_flag_bits", [] {
    std::vector<std::pair<std::string, long long>> out;
    long long bit = 1;
    for (const std::string& name : octopt::hparam_flag_names()) out.emplace_back(name, bit), bit <<= 1;
    out.emplace_back("stochastic_state", octopt::kHpStochasticState);
    out.emplace_back("stochastic_bf16", octopt::kHpStochasticBf16);
    return out;
  });
}
