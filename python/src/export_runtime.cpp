#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>

#include "exports.hpp"
#include "octopt/runtime.hpp"
#include "octopt/threading.hpp"

namespace {

// Paged optimizer state (octopt.bnb's Paged* optimizers): one block of CUDA managed memory, freed with
// the object, exposed through __cuda_array_interface__ so torch wraps it without a copy (the tensor keeps
// this object alive).
class ManagedBuffer {
 public:
  ManagedBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
    if (bytes == 0) throw std::invalid_argument("ManagedBuffer: argument 'nbytes' must be positive");
    ptr_ = octopt::cuda::managed_malloc(bytes, device);
  }
  ~ManagedBuffer() { octopt::cuda::managed_free(ptr_, device_); }
  ManagedBuffer(const ManagedBuffer&) = delete;
  ManagedBuffer& operator=(const ManagedBuffer&) = delete;

  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(ptr_); }
  std::size_t nbytes() const { return bytes_; }
  int device() const { return device_; }
  void prefetch(std::uintptr_t stream) const { octopt::cuda::prefetch_to_device(ptr_, bytes_, device_, stream); }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_;
  int device_;
};

}  // namespace

void export_runtime(nb::module_& m) {
  m.def("version", &octopt::version);
  m.def("compiler", &octopt::compiler);
  m.def("simd_level", &octopt::simd_level);
  m.def("set_simd_level", &octopt::set_simd_level, nb::arg("name"));
  m.def("cpu_features", &octopt::cpu_features);
  // Contraction of the core's and of this extension's own translation units (cmake/numerics.cmake).
  m.def("fp_contract", [] {
#if defined(OCTOPT_FP_CONTRACT_OFF)
    const char* ext = "off";
#else
    const char* ext = "compiler default";
#endif
    return nb::make_tuple(octopt::fp_contract(), ext);
  });
  m.def("cuda_built", &octopt::cuda::built);
  m.def("cuda_available", &octopt::cuda::available);
  m.def("cuda_device_count", &octopt::cuda::device_count);
  m.def("cuda_unavailable_reason", &octopt::cuda::unavailable_reason);
  m.def("cuda_runtime_version", &octopt::cuda::runtime_version);
  m.def("set_num_threads", &octopt::set_num_threads, nb::arg("n"));
  m.def("get_num_threads", &octopt::get_num_threads);
  // Private, for the tests of the pool (tests/test_fork_safety.py).
  m.def("_max_concurrent_regions", &octopt::detail::max_concurrent_regions, nb::arg("reset") = false);
  m.def("_regions_at_last_fork", &octopt::detail::regions_at_last_fork);
  nb::class_<ManagedBuffer>(m, "ManagedBuffer",
                            "CUDA managed memory for paged optimizer state (bytes, on a device); "
                            "torch.as_tensor wraps it")
      .def(nb::init<std::size_t, int>(), nb::arg("nbytes"), nb::arg("device"))
      .def_prop_ro("ptr", &ManagedBuffer::ptr)
      .def_prop_ro("nbytes", &ManagedBuffer::nbytes)
      .def_prop_ro("device", &ManagedBuffer::device)
      .def("prefetch", &ManagedBuffer::prefetch, nb::arg("stream"),
           "Moves the pages to the device, enqueued on the stream (an integer cudaStream_t)")
      .def_prop_ro("__cuda_array_interface__", [](const ManagedBuffer& b) {
        nb::dict d;
        d["shape"] = nb::make_tuple(b.nbytes());
        d["typestr"] = "|u1";
        d["data"] = nb::make_tuple(b.ptr(), false);
        d["version"] = 3;
        return d;
      });
}
