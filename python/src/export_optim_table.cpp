// Binding of the optimizer table (optim_table.hpp) and the core's HyperParams / LayoutOptions: what
// Python's optimizer classes, the torch and optax adapters read instead of restating it.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>

#include "exports.hpp"
#include "octopt/numerics/trust_ratio.hpp"
#include "octopt/optim_table.hpp"
#include "octopt/step_setup.hpp"

namespace {

const char* type_name(octopt::HParamType t) {
  switch (t) {
    case octopt::HParamType::real:
      return "real";
    case octopt::HParamType::optional_real:
      return "optional_real";
    case octopt::HParamType::flag:
      return "flag";
  }
  return "?";
}

// A hyper-parameter's value as Python users write it: flags as bool, "off" optional numbers as None.
nb::object py_value(const octopt::HParamDef& d, double v) {
  if (d.type == octopt::HParamType::flag) return nb::bool_(v != 0.0);
  if (d.type == octopt::HParamType::optional_real && v == 0.0) return nb::none();
  return nb::float_(v);
}

nb::dict optim_entry(const octopt::OptimDef& o) {
  nb::dict e;
  e["name"] = o.name;
  e["class_name"] = o.class_name;
  e["summary"] = o.summary;
  e["direction_step"] = o.direction_step;
  e["trust_ratio"] = octopt::optim_uses_trust_ratio(o.kind);  // the update scaled by a whole-tensor norm ratio
  nb::list scalars;  // per-tensor scalar state (NAdam's mu_product): name, initial value, range
  for (const octopt::TensorScalarDef& d : octopt::tensor_scalar_defs(o.kind))
    scalars.append(nb::make_tuple(d.name, d.initial, d.lo, d.hi));
  e["tensor_scalars"] = scalars;
  nb::list slots;
  for (const auto& s : o.slots)  // name, signed, first moment, starts at initial_accumulator_value
    slots.append(nb::make_tuple(s.name, s.is_signed, s.first_moment, s.starts_at_initial_accumulator));
  e["slots"] = slots;
  nb::list options;
  for (const char* k : o.options) options.append(k);
  e["options"] = options;
  e["num_betas"] = o.num_betas;
  // every group key with this optimizer's default
  nb::dict defaults;
  for (const auto& d : octopt::hparam_defs()) {
    if (d.id == octopt::HParam::beta1 || d.id == octopt::HParam::beta2 || d.id == octopt::HParam::beta3) continue;
    defaults[d.key] = py_value(d, octopt::get_hparam(o.defaults, d.id));
  }
  defaults["betas"] = o.num_betas == 3 ? nb::make_tuple(o.defaults.beta1, o.defaults.beta2, o.defaults.beta3)
                                       : nb::make_tuple(o.defaults.beta1, o.defaults.beta2);
  defaults["initial_accumulator_value"] = o.initial_accumulator_value;
  const octopt::LayoutOptions lo;
  defaults["bits"] = lo.bits;
  defaults["block_size"] = nb::none();
  defaults["min_8bit_size"] = lo.min_8bit_size;
  defaults["first_moment_bits"] = nb::none();
  defaults["state_map"] = octopt::state_map_key(lo.state_map);
  e["defaults"] = defaults;
  return e;
}

}  // namespace

void export_optim_table(nb::module_& m) {
  // the width of every per-tensor state array: the XLA handlers take this many slot descriptions per tensor
  m.attr("MAX_STATE_SLOTS") = octopt::kMaxStateSlots;
  nb::class_<octopt::HyperParams> hp(m, "HyperParams");
  hp.def(nb::init<>());
  // one read/write property per hyper-parameter of the table, under its HyperParams name
  for (const auto& d : octopt::hparam_defs()) {
    const octopt::HParam id = d.id;
    if (octopt::hparam_is_flag(id))
      hp.def_prop_rw(
          d.field, [id](const octopt::HyperParams& h) { return octopt::get_hparam(h, id) != 0.0; },
          [id](octopt::HyperParams& h, bool v) { octopt::set_hparam(h, id, v ? 1.0 : 0.0); });
    else
      hp.def_prop_rw(
          d.field, [id](const octopt::HyperParams& h) { return octopt::get_hparam(h, id); },
          [id](octopt::HyperParams& h, double v) { octopt::set_hparam(h, id, v); });
  }
  nb::class_<octopt::LayoutOptions>(m, "LayoutOptions")
      .def(nb::init<>())
      .def_rw("bits", &octopt::LayoutOptions::bits)
      .def_rw("block_size", &octopt::LayoutOptions::block_size)
      .def_rw("min_8bit_size", &octopt::LayoutOptions::min_8bit_size)
      .def_rw("first_moment_bits", &octopt::LayoutOptions::first_moment_bits)
      .def_rw("initial_accumulator_value", &octopt::LayoutOptions::initial_accumulator_value)
      .def_prop_rw(
          "state_map", [](const octopt::LayoutOptions& lo) { return octopt::state_map_key(lo.state_map); },
          [](octopt::LayoutOptions& lo, const std::string& v) {
            lo.state_map = octopt::parse_state_map(v, "LayoutOptions");
          });

  m.def(
      "optimizer_table",
      [] {
        nb::list out;
        for (const auto& o : octopt::optim_defs()) out.append(optim_entry(o));
        return out;
      },
      "Every optimizer of the core's table: name, class name, state slots, options and defaults.");
  m.def(
      "hparam_table",
      [] {
        nb::list out;
        for (const auto& d : octopt::hparam_defs()) {
          nb::dict e;
          e["key"] = d.key;
          e["field"] = d.field;
          e["optax_key"] = d.optax_key;
          e["type"] = type_name(d.type);
          e["lo"] = d.lo;
          e["hi"] = d.hi;
          e["hi_open"] = d.hi_open;
          e["doc"] = d.doc;
          out.append(e);
        }
        return out;
      },
      "Every hyper-parameter of the core's table, in the order of the XLA handlers' arrays.");
  m.def(
      "layout_rules",
      [] {
        nb::dict r;
        r["min_block_size"] = octopt::kMinBlockSize;
        r["max_block_size"] = octopt::kMaxBlockSize;
        r["default_block_size"] = nb::make_tuple(nb::make_tuple(32, octopt::default_block_size(32)),
                                                 nb::make_tuple(8, octopt::default_block_size(8)),
                                                 nb::make_tuple(4, octopt::default_block_size(4)));
        r["min_8bit_size"] = octopt::kDefaultMin8bitSize;
        // (bits, signed, state_map) -> the name state files record
        nb::dict maps;
        nb::list kinds;
        for (int m = 0; m < octopt::kNumStateMapKinds; ++m) {
          const auto map = octopt::StateMap(m);
          kinds.append(octopt::state_map_key(map));
          for (int bits : {8, 4})
            for (bool s : {true, false})
              if (map != octopt::StateMap::fp8 || bits == 8)
                maps[nb::make_tuple(bits, s, octopt::state_map_key(map))] = octopt::state_map_name(bits, s, map);
        }
        r["maps"] = maps;
        r["state_maps"] = nb::tuple(kinds);
        return r;
      },
      "The layout rules: block sizes, min_8bit_size and the maps of quantized state.");
  m.def(
      "state_map_values",
      [](int bits, bool is_signed, const std::string& map) {
        return octopt::state_map_values(bits, is_signed, octopt::parse_state_map(map, "state_map_values"));
      },
      nb::arg("bits"), nb::arg("signed"), nb::arg("state_map") = "dynamic");
  m.def(
      "state_map_index",
      [](int bits, bool is_signed, const std::string& map) {
        return octopt::state_map_index(bits, is_signed, octopt::parse_state_map(map, "state_map_index"));
      },
      nb::arg("bits"), nb::arg("signed"), nb::arg("state_map") = "dynamic");
  m.def(
      "validate_hparams",
      [](const std::string& kind, const octopt::HyperParams& h, const std::string& fn) {
        octopt::validate_hparams(octopt::optim_def(kind).kind, h, fn.c_str());
      },
      nb::arg("kind"), nb::arg("hparams"), nb::arg("fn"));
  m.def(
      "validate_layout",
      [](const octopt::LayoutOptions& lo, const std::string& fn) { octopt::validate_layout(lo, fn.c_str()); },
      nb::arg("layout"), nb::arg("fn"));
  m.def(
      "layout_tensor",
      [](const std::string& kind, const octopt::HyperParams& h, const octopt::LayoutOptions& lo, std::int64_t numel,
         int stochastic_rounding) {
        const octopt::TensorLayout t =
            octopt::layout_tensor(octopt::optim_def(kind).kind, h, lo, numel, stochastic_rounding);
        nb::list slots;
        for (const auto& s : t.slots)
          slots.append(nb::make_tuple(s.index, s.name, s.is_signed, s.bits, s.block_size, s.stochastic,
                                      octopt::state_map_key(s.map)));
        return nb::make_tuple(t.block_size, slots);
      },
      nb::arg("kind"), nb::arg("hparams"), nb::arg("layout"), nb::arg("numel"), nb::arg("stochastic_rounding") = -1);
  m.def(
      "slot_initial_value",
      [](const std::string& kind, int slot, const octopt::LayoutOptions& lo) {
        return octopt::slot_initial_value(octopt::optim_def(kind).kind, slot, lo);
      },
      nb::arg("kind"), nb::arg("slot"), nb::arg("layout"));
  m.def(
      "slot_initial_code",
      [](int bits, bool is_signed, double init, const std::string& map) {
        return octopt::slot_initial_code(bits, is_signed, init, octopt::parse_state_map(map, "slot_initial_code"));
      },
      nb::arg("bits"), nb::arg("signed"), nb::arg("init"), nb::arg("state_map") = "dynamic");
  m.def("format_real", &octopt::format_real, nb::arg("value"));
  m.def(
      "validate_block_size",
      [](std::int64_t block_size, const std::string& fn) { octopt::validate_block_size(block_size, fn.c_str()); },
      nb::arg("block_size"), nb::arg("fn"));
}
