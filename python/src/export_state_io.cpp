// Bindings of the state-file layer (octopt/state_io.hpp). Arrays go in as any CPU DLPack / buffer-protocol
// object and come back as NumPy arrays viewing one buffer that a capsule owns.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "array_ref.hpp"
#include "exports.hpp"
#include "octopt/state_io.hpp"

namespace {

using AnyRO = nb::ndarray<nb::ro>;

// The safetensors dtype of an array element type, or "" when a state file cannot hold it.
std::string state_dtype(nb::dlpack::dtype t) {
  if (t.lanes != 1) return "";
  const auto code = nb::dlpack::dtype_code(t.code);
  switch (code) {
    case nb::dlpack::dtype_code::Float:
      return t.bits == 64 ? "F64" : t.bits == 32 ? "F32" : t.bits == 16 ? "F16" : "";
    case nb::dlpack::dtype_code::Bfloat:
      return t.bits == 16 ? "BF16" : "";
    case nb::dlpack::dtype_code::Int:
      return t.bits == 64 ? "I64" : t.bits == 32 ? "I32" : t.bits == 16 ? "I16" : t.bits == 8 ? "I8" : "";
    case nb::dlpack::dtype_code::UInt:
      return t.bits == 64 ? "U64" : t.bits == 32 ? "U32" : t.bits == 16 ? "U16" : t.bits == 8 ? "U8" : "";
    case nb::dlpack::dtype_code::Bool:
      return t.bits == 8 ? "BOOL" : "";
    default:
      return "";
  }
}

std::string dlpack_dtype_name(nb::dlpack::dtype t) {
  const char* kind = "type";
  switch (nb::dlpack::dtype_code(t.code)) {
    case nb::dlpack::dtype_code::Float:
      kind = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      kind = "bfloat";
      break;
    case nb::dlpack::dtype_code::Int:
      kind = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      kind = "uint";
      break;
    case nb::dlpack::dtype_code::Bool:
      kind = "bool";
      break;
    case nb::dlpack::dtype_code::Complex:
      kind = "complex";
      break;
    default:
      break;
  }
  std::string s = kind + std::to_string(int(t.bits));
  if (t.lanes != 1) s += "x" + std::to_string(int(t.lanes));
  return s;
}

// The NumPy element type a state-file dtype comes back as. BF16 has no NumPy type: its raw bits come
// back as uint16 and the caller is told the file's dtype.
nb::dlpack::dtype numpy_dtype(const std::string& d) {
  if (d == "F64") return nb::dtype<double>();
  if (d == "F32") return nb::dtype<float>();
  if (d == "F16") return nb::dlpack::dtype{std::uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
  if (d == "BF16" || d == "U16") return nb::dtype<std::uint16_t>();
  if (d == "I64") return nb::dtype<std::int64_t>();
  if (d == "I32") return nb::dtype<std::int32_t>();
  if (d == "I16") return nb::dtype<std::int16_t>();
  if (d == "I8") return nb::dtype<std::int8_t>();
  if (d == "U64") return nb::dtype<std::uint64_t>();
  if (d == "U32") return nb::dtype<std::uint32_t>();
  if (d == "U8") return nb::dtype<std::uint8_t>();
  if (d == "BOOL") return nb::dtype<bool>();
  throw std::logic_error("load_state_file: no NumPy type for dtype " + d);
}

// Paths: str, bytes or os.PathLike, as the operating system sees them.
std::string fs_path(nb::handle path) {
  nb::object encoded = nb::module_::import_("os").attr("fsencode")(path);
  nb::bytes b = nb::borrow<nb::bytes>(encoded);
  return std::string(b.c_str(), b.size());
}

std::string py_type_name(nb::handle h) { return nb::cast<std::string>(nb::str(h.type().attr("__name__"))); }

std::string as_str(nb::handle h, const std::string& what) {
  if (!nb::isinstance<nb::str>(h))
    throw nb::type_error(("save_state_file: " + what + " must be a str, got " + py_type_name(h)).c_str());
  return nb::cast<std::string>(h);
}

void save_state_file(nb::handle path, nb::handle tensors, nb::handle metadata) {
  constexpr const char* fn = "save_state_file";
  const std::string p = fs_path(path);
  if (!nb::isinstance<nb::list>(tensors) && !nb::isinstance<nb::tuple>(tensors))
    throw nb::type_error((std::string(fn) +
                          ": argument 'tensors' must be a list of (name, array) or (name, "
                          "array, dtype) tuples, got " +
                          py_type_name(tensors))
                             .c_str());
  if (!nb::isinstance<nb::dict>(metadata))
    throw nb::type_error(
        (std::string(fn) + ": argument 'metadata' must be a dict[str, str], got " + py_type_name(metadata)).c_str());

  std::vector<AnyRO> keep;  // holds the arrays (and what they view) until the write is done
  std::vector<octopt::TensorView> views;
  for (nb::handle item : tensors) {
    const bool sequence = nb::isinstance<nb::tuple>(item) || nb::isinstance<nb::list>(item);
    if (!sequence || (nb::len(item) != 2 && nb::len(item) != 3))
      throw nb::type_error((std::string(fn) +
                            ": each entry of 'tensors' must be a (name, array) or (name, array, "
                            "dtype) tuple, got " +
                            py_type_name(item))
                               .c_str());
    const std::string name = as_str(item[0], "a tensor name");
    const std::string arg = "tensors['" + name + "']";
    AnyRO a;
    if (!nb::try_cast(item[1], a, false))
      throw nb::type_error((std::string(fn) + ": tensor '" + name +
                            "' must be an array with DLPack or the buffer "
                            "protocol (native byte order), got " +
                            py_type_name(item[1]))
                               .c_str());
    if (a.device_type() != nb::device::cpu::value)
      throw std::invalid_argument(std::string(fn) + ": tensor '" + name + "' is not in CPU memory (copy it first)");
    if (a.size() != 0) array_ref(a, fn, arg.c_str());  // C-contiguous (an empty array has nothing to lay out)
    std::string dtype = state_dtype(a.dtype());
    if (nb::len(item) == 3) {
      const std::string want = as_str(item[2], "the dtype of tensor '" + name + "'");
      if (octopt::state_dtype_size(want) == 0 || octopt::state_dtype_size(want) * 8 != a.dtype().bits ||
          a.dtype().lanes != 1)
        throw std::invalid_argument(std::string(fn) + ": tensor '" + name + "': dtype '" + want +
                                    "' cannot be stored from an array of " + dlpack_dtype_name(a.dtype()) +
                                    " (needs a known dtype of the same element size)");
      dtype = want;
    }
    if (dtype.empty())
      throw nb::type_error((std::string(fn) + ": tensor '" + name + "' has element type " +
                            dlpack_dtype_name(a.dtype()) + ", which state files cannot hold")
                               .c_str());
    std::vector<std::int64_t> shape(a.ndim());
    for (std::size_t d = 0; d < a.ndim(); ++d) shape[d] = std::int64_t(a.shape(d));
    views.push_back(octopt::TensorView{name, dtype, std::move(shape), a.size() ? a.data() : nullptr});
    keep.push_back(std::move(a));
  }
  std::map<std::string, std::string> meta;
  for (auto [key, value] : nb::borrow<nb::dict>(metadata)) {
    const std::string k = as_str(key, "a metadata key");
    meta[k] = as_str(value, "the value of metadata key '" + k + "'");
  }
  nb::gil_scoped_release release;
  octopt::write_state_file(p, views, meta);
}

nb::tuple load_state_file(nb::handle path) {
  const std::string p = fs_path(path);
  auto sf = std::make_unique<octopt::StateFile>();
  {
    nb::gil_scoped_release release;
    *sf = octopt::read_state_file(p);
  }
  nb::dict meta;
  for (const auto& [key, value] : sf->metadata)
    meta[nb::str(key.data(), key.size())] = nb::str(value.data(), value.size());

  octopt::StateFile* raw = sf.get();
  nb::capsule owner(sf.release(), [](void* q) noexcept { delete static_cast<octopt::StateFile*>(q); });
  nb::list out;
  for (const octopt::StateFile::Tensor& t : raw->tensors) {
    const std::size_t itemsize = octopt::state_dtype_size(t.dtype);
    std::vector<std::size_t> shape(t.shape.begin(), t.shape.end());
    const void* data = t.data;
    nb::handle keeper = owner;
    nb::capsule copy_owner;
    // Views share the file's buffer; a tensor the layout leaves misaligned for its type gets its own copy.
    if (reinterpret_cast<std::uintptr_t>(data) % itemsize != 0) {
      auto* buf = new std::uint64_t[(t.nbytes + 7) / 8];
      std::memcpy(buf, t.data, t.nbytes);
      copy_owner = nb::capsule(buf, [](void* q) noexcept { delete[] static_cast<std::uint64_t*>(q); });
      data = buf;
      keeper = copy_owner;
    }
    nb::ndarray<nb::numpy> arr(const_cast<void*>(data), shape.size(), shape.data(), keeper, nullptr,
                               numpy_dtype(t.dtype));
    out.append(nb::make_tuple(nb::str(t.name.data(), t.name.size()), nb::cast(arr), nb::str(t.dtype.c_str())));
  }
  return nb::make_tuple(meta, out);
}

std::string inspect_state_file(nb::handle path) {
  const std::string p = fs_path(path);
  nb::gil_scoped_release release;
  return octopt::inspect_state_file(p);
}

std::uint32_t crc32c(nb::bytes data, const std::string& impl) {
  octopt::Crc32cImpl which;
  if (impl == "auto")
    which = octopt::Crc32cImpl::automatic;
  else if (impl == "portable")
    which = octopt::Crc32cImpl::portable;
  else if (impl == "sse4.2")
    which = octopt::Crc32cImpl::sse42;
  else
    throw std::invalid_argument("crc32c: argument 'impl' must be 'auto', 'portable' or 'sse4.2', got '" + impl + "'");
  return octopt::crc32c(data.data(), data.size(), which);
}

}  // namespace

void export_state_io(nb::module_& m) {
  nb::exception<octopt::FormatError> state_file_error(m, "StateFileError", PyExc_ValueError);
  state_file_error.attr("__module__") = "octopt";
  state_file_error.attr("__doc__") =
      "A state file is corrupt, truncated, or of a format version this build cannot read.";
  // Operating-system errors become OSError (FileNotFoundError, PermissionError, ...).
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const octopt::FileError& e) {
      // OSError(errno, message) picks the subclass from errno. The message already names the path, so
      // .filename stays unset (OSError would print the path a second time).
      PyObject* exc = PyObject_CallFunction(PyExc_OSError, "is", e.code().value(), e.what());
      if (!exc) return;
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
      Py_DECREF(exc);
    }
  });

  m.def("save_state_file", &save_state_file, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata"),
        "Writes a state file atomically. tensors: list of (name, array) or (name, array, dtype) where dtype\n"
        "overrides the safetensors dtype of an array of the same element size (e.g. uint16 bits as 'BF16').");
  m.def("load_state_file", &load_state_file, nb::arg("path"),
        "Reads and validates a state file: (metadata, [(name, array, dtype), ...]) in file order. BF16\n"
        "tensors come back as uint16 arrays of the raw bits, with dtype 'BF16'.");
  m.def("inspect_state_file", &inspect_state_file, nb::arg("path"), "A JSON report of a state file.");
  m.def("crc32c", &crc32c, nb::arg("data"), nb::arg("impl") = "auto",
        "CRC-32C of bytes; impl: 'auto', 'portable' or 'sse4.2'.");
  m.def("crc32c_hardware", &octopt::crc32c_hardware);
}
