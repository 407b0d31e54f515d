#include <nanobind/ndarray.h>

#include <vector>

#include "exports.hpp"
#include "octopt/qmap.hpp"

namespace {

using HostF32 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using NumpyF32 = nb::ndarray<nb::numpy, float, nb::ndim<1>>;

// Hands a std::vector to NumPy without a copy: the capsule owns it.
NumpyF32 to_numpy(std::vector<float>&& v) {
  auto* owned = new std::vector<float>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return NumpyF32(owned->data(), {owned->size()}, owner);
}

}  // namespace

void export_qmap(nb::module_& m) {
  m.def(
      "dynamic_map",
      [](bool is_signed, int max_exponent_bits, int total_bits) {
        return to_numpy(octopt::dynamic_map(is_signed, max_exponent_bits, total_bits));
      },
      nb::arg("signed"), nb::arg("max_exponent_bits"), nb::arg("total_bits"));
  m.def(
      "linear_map", [](bool is_signed, int bits) { return to_numpy(octopt::linear_map(is_signed, bits)); },
      nb::arg("signed"), nb::arg("bits"));
  m.def("linear_map_nozero", [](int bits) { return to_numpy(octopt::linear_map_nozero(bits)); }, nb::arg("bits"));
  m.def(
      "log2_map_nozero", [](int bits, double step) { return to_numpy(octopt::log2_map_nozero(bits, step)); },
      nb::arg("bits"), nb::arg("step"));
  m.def("fp8_map", []() { return to_numpy(octopt::fp8_map()); });
  m.def(
      "quantile_map",
      [](HostF32 x, int bits) {
        std::vector<float> out;
        {
          nb::gil_scoped_release release;
          out = octopt::quantile_map(x.data(), std::int64_t(x.size()), bits);
        }
        return to_numpy(std::move(out));
      },
      nb::arg("x").noconvert(), nb::arg("bits"));
  m.def(
      "validate_qmap",
      [](HostF32 values, int bits, const char* fn, const char* arg) {
        octopt::validate_qmap(values.data(), std::int64_t(values.size()), bits, fn, arg);
      },
      nb::arg("values").noconvert(), nb::arg("bits"), nb::arg("fn"), nb::arg("arg"));
}
