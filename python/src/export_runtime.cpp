#include <nanobind/stl/string.h>

#include "exports.hpp"
#include "octopt/runtime.hpp"
#include "octopt/threading.hpp"

void export_runtime(nb::module_& m) {
  m.def("version", &octopt::version);
  m.def("compiler", &octopt::compiler);
  m.def("simd_level", &octopt::simd_level);
  m.def("set_simd_level", &octopt::set_simd_level, nb::arg("name"));
  m.def("cpu_features", &octopt::cpu_features);
  m.def("cuda_built", &octopt::cuda::built);
  m.def("cuda_available", &octopt::cuda::available);
  m.def("cuda_device_count", &octopt::cuda::device_count);
  m.def("cuda_runtime_version", &octopt::cuda::runtime_version);
  m.def("set_num_threads", &octopt::set_num_threads, nb::arg("n"));
  m.def("get_num_threads", &octopt::get_num_threads);
  // Private, for the tests of the pool (tests/test_fork_safety.py).
  m.def("_max_concurrent_regions", &octopt::detail::max_concurrent_regions, nb::arg("reset") = false);
  m.def("_regions_at_last_fork", &octopt::detail::regions_at_last_fork);
}
