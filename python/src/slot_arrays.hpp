#pragma once
// Host arrays of one state slot handed over by nanobind, as state_convert.hpp's sources and targets
// (export_state_convert.cpp, and a StepPlan's export_slot/import_slot in export_step_plan.cpp).
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <vector>

#include "array_ref.hpp"
#include "octopt/state_convert.hpp"

using HostIn = nb::ndarray<nb::ro, nb::device::cpu>;
using HostOut = nb::ndarray<nb::device::cpu>;

// The element type of an array and, for the types a slot never holds, its name for messages.
inline octopt::SlotElem elem_of(const ArrayRef& r, std::string& name) {
  const auto& t = r.dtype;
  const auto code = nb::dlpack::dtype_code(t.code);
  if (t.lanes == 1 && code == nb::dlpack::dtype_code::Float && t.bits == 32) return octopt::SlotElem::f32;
  if (t.lanes == 1 && code == nb::dlpack::dtype_code::Float && t.bits == 64) return octopt::SlotElem::f64;
  if (t.lanes == 1 && code == nb::dlpack::dtype_code::Float && t.bits == 16) return octopt::SlotElem::f16;
  if (t.lanes == 1 && code == nb::dlpack::dtype_code::Bfloat && t.bits == 16) return octopt::SlotElem::bf16;
  if (t.lanes == 1 && code == nb::dlpack::dtype_code::UInt && t.bits == 8) return octopt::SlotElem::u8;
  switch (code) {
    case nb::dlpack::dtype_code::Int:
      name = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      name = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      name = "float";
      break;
    case nb::dlpack::dtype_code::Complex:
      name = "complex";
      break;
    case nb::dlpack::dtype_code::Bool:
      name = "bool";
      return octopt::SlotElem::other;
    default:
      name = "dtype code " + std::to_string(int(t.code)) + " of ";
  }
  name += std::to_string(int(t.bits));
  return octopt::SlotElem::other;
}

inline octopt::SlotNames names_of(const std::string& where, const std::vector<std::string>& keys) {
  octopt::SlotNames nm;
  nm.where = where;
  if (keys.size() > 0) nm.values = keys[0];
  if (keys.size() > 1) nm.absmax = keys[1];
  if (keys.size() > 2) nm.map = keys[2];
  return nm;
}

// Keeps the dtype names of a source alive while the core reads it.
struct SlotArrays {
  std::string values_elem, absmax_elem;
};

inline octopt::SlotSource slot_source(const HostIn& values, const std::optional<HostIn>& absmax, const char* fn,
                                      SlotArrays& names) {
  const ArrayRef vr = array_ref(values, fn, "values");
  octopt::SlotSource s;
  s.values = vr.data;
  s.elem = elem_of(vr, names.values_elem);
  s.elem_name = names.values_elem.c_str();
  s.count = vr.size;
  if (absmax) {
    const ArrayRef ar = array_ref(*absmax, fn, "absmax");
    static const float given = 0.0f;  // an empty absmax is still one that was given
    s.absmax_elem = elem_of(ar, names.absmax_elem);
    s.absmax_elem_name = names.absmax_elem.c_str();
    s.absmax = ar.data ? static_cast<const float*>(ar.data) : &given;
    s.absmax_count = ar.size;
  }
  return s;
}

inline octopt::SlotTarget slot_target(const octopt::SlotForm& form, const HostOut& values,
                                      const std::optional<HostOut>& absmax, const char* fn) {
  const ArrayRef ov = array_ref(values, fn, "out_values");
  const bool codes = form.bits != 32;
  require_dtype(ov, codes ? nb::dtype<std::uint8_t>() : nb::dtype<float>(), codes ? "uint8" : "float32", fn,
                "out_values");
  octopt::SlotTarget t{ov.data, ov.size, nullptr, 0};
  if (absmax) {
    const ArrayRef oa = array_ref(*absmax, fn, "out_absmax");
    require_dtype(oa, nb::dtype<float>(), "float32", fn, "out_absmax");
    t.absmax = static_cast<float*>(oa.data);
    t.absmax_count = oa.size;
  }
  return t;
}
