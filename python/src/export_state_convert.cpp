// Binding of state_convert.hpp: one state slot from one layout to another, on host arrays in place. The
// state-dict formats in Python hold only key maps and call this.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "array_ref.hpp"
#include "exports.hpp"
#include "slot_arrays.hpp"
#include "octopt/state_convert.hpp"

namespace {

using HostMap = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// n elements of `values` (and `absmax`) in form `src` into `out_values` (and `out_absmax`) in form `dst`.
void convert(std::int64_t n, const octopt::SlotForm& src, HostIn values, std::optional<HostIn> absmax,
             const octopt::SlotForm& dst, HostOut out_values, std::optional<HostOut> out_absmax,
             const std::string& where, const std::vector<std::string>& keys) {
  const octopt::SlotNames nm = names_of(where, keys);
  SlotArrays in;
  const octopt::SlotSource src_arrays = slot_source(values, absmax, "convert_slot", in);
  const octopt::SlotTarget t = slot_target(dst, out_values, out_absmax, "convert_slot");
  nb::gil_scoped_release release;
  octopt::convert_slot(n, src, src_arrays, dst, t, nm);
}

octopt::SlotForm make_form(int bits, int block_size, std::optional<HostMap> map, bool packed,
                           const std::vector<std::int64_t>& segments, std::int64_t offset) {
  octopt::SlotForm f;
  f.bits = bits;
  f.block_size = block_size;
  if (map) f.map.assign(map->data(), map->data() + map->size());
  f.packed = packed;
  f.segments = segments;
  f.offset = offset;
  return f;
}

void pack4(HostIn codes, HostOut packed) {
  const ArrayRef c = array_ref(codes, "pack_codes4", "codes"), p = array_ref(packed, "pack_codes4", "packed");
  require_dtype(c, nb::dtype<std::uint8_t>(), "uint8", "pack_codes4", "codes");
  require_dtype(p, nb::dtype<std::uint8_t>(), "uint8", "pack_codes4", "packed");
  if (p.size != (c.size + 1) / 2)
    throw std::invalid_argument("pack_codes4: argument 'packed' must hold " + std::to_string((c.size + 1) / 2) +
                                " bytes, got " + std::to_string(p.size));
  octopt::pack_codes4(static_cast<const std::uint8_t*>(c.data), c.size, static_cast<std::uint8_t*>(p.data));
}

void unpack4(HostIn packed, HostOut codes) {
  const ArrayRef p = array_ref(packed, "unpack_codes4", "packed"), c = array_ref(codes, "unpack_codes4", "codes");
  require_dtype(c, nb::dtype<std::uint8_t>(), "uint8", "unpack_codes4", "codes");
  require_dtype(p, nb::dtype<std::uint8_t>(), "uint8", "unpack_codes4", "packed");
  if (p.size != (c.size + 1) / 2)
    throw std::invalid_argument("unpack_codes4: argument 'packed' must hold " + std::to_string((c.size + 1) / 2) +
                                " bytes, got " + std::to_string(p.size));
  octopt::unpack_codes4(static_cast<const std::uint8_t*>(p.data), c.size, static_cast<std::uint8_t*>(c.data));
}

}  // namespace

void export_state_convert(nb::module_& m) {
  nb::class_<octopt::SlotForm>(m, "SlotForm")
      .def(nb::new_(&make_form), nb::arg("bits"), nb::arg("block_size") = 0, nb::arg("map").none() = nb::none(),
           nb::arg("packed") = true, nb::arg("segments") = std::vector<std::int64_t>{}, nb::arg("offset") = 0)
      .def_ro("bits", &octopt::SlotForm::bits)
      .def_ro("block_size", &octopt::SlotForm::block_size)
      .def_ro("packed", &octopt::SlotForm::packed)
      .def_ro("segments", &octopt::SlotForm::segments)
      .def_ro("offset", &octopt::SlotForm::offset)
      .def_prop_ro("map", [](const octopt::SlotForm& f) { return f.map; });
  m.def("slot_values_count", &octopt::slot_values_count, nb::arg("n"), nb::arg("form"));
  m.def("slot_absmax_count", &octopt::slot_absmax_count, nb::arg("n"), nb::arg("form"));
  m.def("convert_slot", &convert, nb::arg("n"), nb::arg("src"), nb::arg("values").noconvert(),
        nb::arg("absmax").noconvert().none(), nb::arg("dst"), nb::arg("out_values").noconvert(),
        nb::arg("out_absmax").noconvert().none(), nb::arg("where"), nb::arg("keys"));
  m.def(
      "infer_code_bits",
      [](std::int64_t n, std::int64_t code_bytes, const std::string& where, const std::vector<std::string>& keys) {
        return octopt::infer_code_bits(n, code_bytes, names_of(where, keys));
      },
      nb::arg("n"), nb::arg("code_bytes"), nb::arg("where"), nb::arg("keys"));
  m.def(
      "infer_block_size",
      [](std::int64_t n, std::int64_t blocks, const std::vector<int>& candidates, const std::string& where,
         const std::vector<std::string>& keys) {
        return octopt::infer_block_size(n, blocks, candidates, names_of(where, keys));
      },
      nb::arg("n"), nb::arg("blocks"), nb::arg("candidates"), nb::arg("where"), nb::arg("keys"));
  m.def("pack_codes4", &pack4, nb::arg("codes").noconvert(), nb::arg("packed").noconvert());
  m.def("unpack_codes4", &unpack4, nb::arg("packed").noconvert(), nb::arg("codes").noconvert());
}
