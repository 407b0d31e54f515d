// Muon's final update (octopt/muon.hpp) over any DLPack arrays: the parameter in place, the orthogonalized
// direction read. The momentum step is an ordinary StepPlan step (numerics/rules/muon.hpp).
#include <nanobind/ndarray.h>

#include "array_ref.hpp"
#include "exports.hpp"
#include "octopt/muon.hpp"

namespace {

using AnyIn = nb::ndarray<nb::ro>;
using AnyOut = nb::ndarray<>;

void muon_apply(AnyOut param, AnyIn update, double decay, double alpha, std::uintptr_t stream, bool bf16_bits,
                const char* fn) {
  const ArrayRef pr = array_ref(param, fn, "param");
  const ArrayRef ur = array_ref(update, fn, "update");
  // NumPy bfloat16 (ml_dtypes) arrives as a uint16 view of its bits (see export_blockwise.cpp)
  const octopt::DType pd = bf16_bits ? octopt::DType::bf16 : float_dtype(pr, fn, "param");
  const octopt::DType ud =
      (bf16_bits && ur.dtype == nb::dtype<std::uint16_t>()) ? octopt::DType::bf16 : float_dtype(ur, fn, "update");
  if (bf16_bits) require_dtype(pr, nb::dtype<std::uint16_t>(), "uint16 (the bits of a bfloat16 array)", fn, "param");
  require_same_device(pr, ur, fn, "update");
  if (pr.size != ur.size)
    throw std::invalid_argument(std::string(fn) + ": argument 'update' has " + std::to_string(ur.size) +
                                " elements but 'param' has " + std::to_string(pr.size));
  if (is_cuda(pr)) {
    octopt::cuda::muon_apply(pr.data, pd, ur.data, ud, pr.size, decay, alpha, as_stream(stream), pr.device_id, fn);
    return;
  }
  nb::gil_scoped_release release;
  octopt::muon_apply(pr.data, pd, ur.data, ud, pr.size, decay, alpha, fn);
}

}  // namespace

void export_muon(nb::module_& m) {
  m.def("muon_apply", &muon_apply, nb::arg("param").noconvert(), nb::arg("update").noconvert(), nb::arg("decay"),
        nb::arg("alpha"), nb::arg("stream") = 0, nb::arg("bf16_bits") = false, nb::arg("fn") = "muon_apply",
        "param <- param * decay + alpha * update in one pass (Muon's final update; octopt/muon.hpp).");
}
