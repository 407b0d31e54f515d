// Hand-off probes: each function receives N arrays (or their addresses) the way a step binding could, and
// does only the work of reaching each raw pointer, so that (time / N) is that method's cost per tensor.
// Every function returns the sum of the pointers it reached, which the caller checks, so nothing is
// optimized away and a wrong answer cannot pass as a fast one.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

using Any = nb::ndarray<nb::ro>;

// Sequence access only: len() and one __getitem__ per element, what the current binding pays before
// any conversion (it takes an nb::sequence).
std::uintptr_t seq_only(nb::sequence s) {
  std::uintptr_t acc = 0;
  const std::size_t n = nb::len(s);
  for (std::size_t i = 0; i < n; ++i) acc += reinterpret_cast<std::uintptr_t>(nb::object(s[i]).ptr()) & 1;
  return acc;
}

// nb::try_cast to a read-only nb::ndarray, as export_optim.cpp does per gradient (DLPack import:
// __dlpack__() is called and its capsule consumed).
std::uintptr_t ndarray_cast(nb::sequence s) {
  std::uintptr_t acc = 0;
  const std::size_t n = nb::len(s);
  for (std::size_t i = 0; i < n; ++i) {
    Any a;
    if (!nb::try_cast(nb::object(s[i]), a)) throw nb::type_error("not an array");
    acc += reinterpret_cast<std::uintptr_t>(a.data());
  }
  return acc;
}

// The same plus what the binding adds per gradient besides the cast: the "grads[i]" argument name
// built for messages, the contiguity walk and the dtype/size checks.
std::uintptr_t ndarray_cast_checked(nb::sequence s, std::int64_t size) {
  std::uintptr_t acc = 0;
  const std::size_t n = nb::len(s);
  for (std::size_t i = 0; i < n; ++i) {
    const std::string arg = "grads[" + std::to_string(i) + "]";
    Any a;
    if (!nb::try_cast(nb::object(s[i]), a)) throw nb::type_error(("not an array: " + arg).c_str());
    std::int64_t total = 1, expect = 1;
    for (std::size_t d = a.ndim(); d-- > 0;) {
      if (std::int64_t(a.shape(d)) != 1 && a.stride(d) != expect) throw std::invalid_argument(arg);
      expect *= std::int64_t(a.shape(d));
      total *= std::int64_t(a.shape(d));
    }
    if (a.dtype() != nb::dtype<float>() || total != size || a.device_type() != nb::device::cpu::value)
      throw std::invalid_argument(arg);
    acc += reinterpret_cast<std::uintptr_t>(a.data());
  }
  return acc;
}

// DLPack capsules made in Python beforehand (torch._C._to_dlpack(g)): nanobind takes a capsule as is.
std::uintptr_t capsules(nb::list s) { return ndarray_cast(nb::borrow<nb::sequence>(s)); }

// The buffer protocol directly (NumPy arrays): a C-contiguous float32 view, released at once.
std::uintptr_t buffers(nb::list s, std::int64_t size) {
  std::uintptr_t acc = 0;
  const std::size_t n = nb::len(s);
  for (std::size_t i = 0; i < n; ++i) {
    Py_buffer view;
    if (PyObject_GetBuffer(PyList_GET_ITEM(s.ptr(), Py_ssize_t(i)), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
      throw nb::python_error();
    const bool ok =
        view.itemsize == 4 && view.format && view.format[0] == 'f' && view.format[1] == 0 && view.len == size * 4;
    acc += reinterpret_cast<std::uintptr_t>(view.buf);
    PyBuffer_Release(&view);
    if (!ok) throw std::invalid_argument("buffer: not float32 of the expected size");
  }
  return acc;
}

// Addresses as a list of Python ints, through nanobind's std::vector caster.
std::uintptr_t ptr_vector(const std::vector<std::uintptr_t>& p) {
  std::uintptr_t acc = 0;
  for (auto x : p) acc += x;
  return acc;
}

// The same list read by hand (no vector built).
std::uintptr_t ptr_list(nb::list s) {
  std::uintptr_t acc = 0;
  const Py_ssize_t n = PyList_GET_SIZE(s.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    void* p = PyLong_AsVoidPtr(PyList_GET_ITEM(s.ptr(), i));
    if (!p && PyErr_Occurred()) throw nb::python_error();
    acc += reinterpret_cast<std::uintptr_t>(p);
  }
  return acc;
}

// Addresses as one int64 array (e.g. np.fromiter(map(Tensor.data_ptr, grads), np.int64)).
std::uintptr_t ptr_array(nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> a) {
  std::uintptr_t acc = 0;
  for (std::size_t i = 0; i < a.shape(0); ++i) acc += std::uintptr_t(a.data()[i]);
  return acc;
}

// torch tensors read through their Python attributes from C++, with no DLPack and no torch headers:
// data_ptr(), dtype (compared by identity with the expected torch.dtype object), numel(), is_contiguous()
// and is_cpu. A fast path for octopt.torch could check and read each gradient this way.
struct Names {
  nb::object data_ptr = nb::str("data_ptr"), dtype = nb::str("dtype"), numel = nb::str("numel"),
             is_contiguous = nb::str("is_contiguous"), is_cpu = nb::str("is_cpu"), grad = nb::str("grad");
};
Names* names = nullptr;

inline std::uintptr_t call_ptr(PyObject* t) {
  PyObject* r = PyObject_CallMethodNoArgs(t, names->data_ptr.ptr());
  if (!r) throw nb::python_error();
  void* p = PyLong_AsVoidPtr(r);
  Py_DECREF(r);
  return reinterpret_cast<std::uintptr_t>(p);
}

std::uintptr_t torch_data_ptr(nb::list s) {
  std::uintptr_t acc = 0;
  const Py_ssize_t n = PyList_GET_SIZE(s.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) acc += call_ptr(PyList_GET_ITEM(s.ptr(), i));
  return acc;
}

inline std::uintptr_t checked_tensor(PyObject* t, PyObject* want_dtype, std::int64_t size) {
  nb::object dt = nb::steal(PyObject_GetAttr(t, names->dtype.ptr()));
  nb::object ne = nb::steal(PyObject_CallMethodNoArgs(t, names->numel.ptr()));
  nb::object co = nb::steal(PyObject_CallMethodNoArgs(t, names->is_contiguous.ptr()));
  nb::object cpu = nb::steal(PyObject_GetAttr(t, names->is_cpu.ptr()));
  if (!dt.is_valid() || !ne.is_valid() || !co.is_valid() || !cpu.is_valid()) throw nb::python_error();
  if (dt.ptr() != want_dtype || PyLong_AsLongLong(ne.ptr()) != size || co.ptr() != Py_True || cpu.ptr() != Py_True)
    throw std::invalid_argument("tensor: wrong dtype, size, layout or device");
  return call_ptr(t);
}

std::uintptr_t torch_checked(nb::list s, nb::handle dtype, std::int64_t size) {
  std::uintptr_t acc = 0;
  const Py_ssize_t n = PyList_GET_SIZE(s.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) acc += checked_tensor(PyList_GET_ITEM(s.ptr(), i), dtype.ptr(), size);
  return acc;
}

// The whole torch hand-off from the parameters: p.grad fetched in C++, then as torch_checked.
std::uintptr_t torch_param_grads(nb::list params, nb::handle dtype, std::int64_t size) {
  std::uintptr_t acc = 0;
  const Py_ssize_t n = PyList_GET_SIZE(params.ptr());
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object g = nb::steal(PyObject_GetAttr(PyList_GET_ITEM(params.ptr(), i), names->grad.ptr()));
    if (!g.is_valid()) throw nb::python_error();
    if (g.is_none()) continue;
    acc += checked_tensor(g.ptr(), dtype.ptr(), size);
  }
  return acc;
}

}  // namespace

NB_MODULE(_handoff_probe, m) {
  names = new Names();  // lives as long as the process: the module is never unloaded
  m.def("noop", [](nb::handle) { return 0; });
  m.def("seq_only", &seq_only);
  m.def("ndarray_cast", &ndarray_cast);
  m.def("ndarray_cast_checked", &ndarray_cast_checked);
  m.def("capsules", &capsules);
  m.def("buffers", &buffers);
  m.def("ptr_vector", &ptr_vector);
  m.def("ptr_list", &ptr_list);
  m.def("ptr_array", &ptr_array);
  m.def("torch_data_ptr", &torch_data_ptr);
  m.def("torch_checked", &torch_checked);
  m.def("torch_param_grads", &torch_param_grads);
}
