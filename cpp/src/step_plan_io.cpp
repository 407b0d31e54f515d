// octopt::StepPlan's state files (docs/format.md section 5): every tensor's state, the step counts and
// the groups' hyper-parameters, in the safetensors-compatible container of state_io.hpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "json.hpp"
#include "octopt/runtime.hpp"
#include "octopt/state_io.hpp"
#include "step_plan_impl.hpp"

namespace octopt {
namespace {

using detail::Json;

Json integer(std::int64_t v) { return Json::integer(std::uint64_t(v < 0 ? -v : v), v < 0); }

std::string tensor_name(std::size_t i, const std::string& slot, const char* part) {
  return "state." + std::to_string(i) + "." + slot + (part ? std::string(".") + part : std::string());
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + (s.size() == 1 ? ",)" : ")");
}

const char* const kLayoutKeys[] = {"bits", "block_size", "min_8bit_size", "first_moment_bits", "state_map"};

Json layout_value(const LayoutOptions& lo, const std::string& key) {
  if (key == "bits") return integer(lo.bits);
  if (key == "state_map") return Json::string(state_map_key(lo.state_map));
  if (key == "block_size") return lo.block_size ? integer(lo.block_size) : Json();
  if (key == "min_8bit_size") return integer(lo.min_8bit_size);
  return lo.first_moment_bits ? integer(lo.first_moment_bits) : Json();  // first_moment_bits
}

// A group as the state file holds it: every key of a Python param group, sorted.
Json group_json(const OptimDef& def, const HyperParams& hp, const LayoutOptions& lo,
                const std::vector<std::size_t>& ids) {
  std::map<std::string, Json> g;
  for (const HParamDef& d : hparam_defs()) {
    if (d.id == HParam::beta1 || d.id == HParam::beta2 || d.id == HParam::beta3) continue;
    const double v = get_hparam(hp, d.id);
    if (d.type == HParamType::flag)
      g[d.key] = Json::boolean(v != 0.0);
    else if (d.type == HParamType::optional_real && v == 0.0)
      g[d.key] = Json();
    else
      g[d.key] = Json::number(v);
  }
  Json::Array betas{Json::number(hp.beta1), Json::number(hp.beta2)};
  if (def.num_betas == 3) betas.push_back(Json::number(hp.beta3));
  g["betas"] = Json::array(std::move(betas));
  for (const char* k : kLayoutKeys) g[k] = layout_value(lo, k);
  g["initial_accumulator_value"] = Json::number(lo.initial_accumulator_value);
  Json::Array params;
  for (std::size_t i : ids) params.push_back(integer(std::int64_t(i)));
  g["params"] = Json::array(std::move(params));
  Json::Object out;
  for (auto& kv : g) out.emplace_back(kv.first, std::move(kv.second));
  return Json::object(std::move(out));
}

}  // namespace

void StepPlan::save(const std::string& path) {
  Impl& p = *impl_;
  const OptimDef& def = optim_def(p.kind);
  const std::vector<std::int64_t> steps = tensor_steps();
  const std::vector<float> mu = tensor_mu_products();
  const std::int64_t gstep = global_step();
  std::vector<std::vector<std::uint8_t>> host;  // CUDA: host copies of the state
  std::vector<TensorView> views;
  Json::Array layout;
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    const Impl::Tensor& t = p.tensors[i];
    Json::Object slots;
    for (const SlotLayout& s : t.layout.slots) {
      const auto view = [&](const char* part, const char* dtype, const Impl::Buffer& b) {
        const std::size_t bytes = b.request.count * (b.request.elem == StateElem::f32 ? 4 : 1);
        const void* data = b.ptr;
        if (p.device >= 0 && bytes) {
          host.emplace_back(bytes);
          cuda::copy_to_host(host.back().data(), b.ptr, bytes, p.device);
          data = host.back().data();
        }
        views.push_back({tensor_name(i, s.name, part), dtype, {std::int64_t(b.request.count)}, data});
      };
      if (s.bits == 32) {
        view(nullptr, "F32", t.values[s.index]);
      } else {
        view("codes", "U8", t.values[s.index]);
        view("absmax", "F32", t.absmax[s.index]);
      }
      slots.emplace_back(s.name, Json::object({{"bits", integer(s.bits)},
                                               {"block_size", integer(t.layout.block_size)},
                                               {"map", Json::string(state_map_name(s.bits, s.is_signed, s.map))}}));
    }
    // keys sorted, as Python's json.dumps(sort_keys=True) writes them
    std::sort(slots.begin(), slots.end(),
              [](const Json::Member& a, const Json::Member& b) { return a.first < b.first; });
    Json::Array shape;
    for (std::int64_t e : t.shape) shape.push_back(integer(e));
    Json::Object entry{{"dtype", Json::string(dtype_name(t.dtype))},
                       {"numel", integer(t.numel)},
                       {"shape", Json::array(std::move(shape))},
                       {"slots", Json::object(std::move(slots))},
                       {"step", integer(steps[i])}};
    // a per-tensor scalar (NAdam's running product) is state the step count does not give back cheaply (sorted
    // key order: mu_product comes first)
    if (optim_has_tensor_scalar(p.kind))
      entry.insert(entry.begin(), {tensor_scalar_defs(p.kind)[0].name, Json::number(double(mu[i]))});
    layout.push_back(Json::object(std::move(entry)));
  }
  Json::Array groups;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    std::vector<std::size_t> ids;
    for (std::size_t i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].group == int(gi)) ids.push_back(i);
    groups.push_back(group_json(def, p.groups[gi].hp, p.groups[gi].layout, ids));
  }
  const std::map<std::string, std::string> metadata = {
      {"octopt.optimizer", def.name},
      {"octopt.step", std::to_string(gstep)},
      {"octopt.hparams", detail::write_json(Json::array(std::move(groups)))},
      {"octopt.tensors", detail::write_json(Json::array(std::move(layout)))},
  };
  write_state_file(path, views, metadata);
}

void StepPlan::load(const std::string& path) {
  Impl& p = *impl_;
  const OptimDef& def = optim_def(p.kind);
  const std::string fn = "load: " + path;
  StateFile file = read_state_file(path);
  for (const char* key : {"octopt.optimizer", "octopt.step", "octopt.hparams", "octopt.tensors"})
    if (!file.metadata.count(key))
      throw FormatError(fn + " is not an octopt optimizer state file (metadata lacks " + key + ")");
  const std::string& kind = file.metadata["octopt.optimizer"];
  if (kind != def.name)
    throw std::invalid_argument(fn + ": the file holds state for optimizer '" + kind + "' but this optimizer is '" +
                                def.name + "'");
  Json groups, layout;
  std::int64_t global_step = 0;
  try {
    groups = detail::parse_json(file.metadata["octopt.hparams"]);
    layout = detail::parse_json(file.metadata["octopt.tensors"]);
    const std::string& s = file.metadata["octopt.step"];
    std::size_t used = 0;
    global_step = std::stoll(s, &used);
    if (used != s.size() || global_step < 0) throw std::invalid_argument("bad octopt.step '" + s + "'");
  } catch (const std::exception& e) {
    throw FormatError(fn + " has malformed octopt metadata: " + e.what());
  }
  const auto malformed = [&](const std::string& what) {
    return FormatError(fn + " has malformed octopt metadata: " + what);
  };
  const auto int_of = [&](const Json* v, const std::string& what) -> std::int64_t {
    if (v == nullptr || !v->is_integer() || v->magnitude() > (std::uint64_t(1) << 62))
      throw malformed(what + " is missing or not an integer");
    return v->negative() ? -std::int64_t(v->magnitude()) : std::int64_t(v->magnitude());
  };

  if (!layout.is_array()) throw malformed("octopt.tensors is not a list");
  if (layout.as_array().size() != p.tensors.size())
    throw std::invalid_argument(fn + ": the file has " + std::to_string(layout.as_array().size()) +
                                " tensors but this optimizer has " + std::to_string(p.tensors.size()) + " parameters");

  // -- the param groups --
  if (!groups.is_array()) throw malformed("octopt.hparams is not a list");
  if (groups.as_array().size() != p.groups.size())
    throw std::invalid_argument(fn + ": the file has " + std::to_string(groups.as_array().size()) +
                                " param groups but this optimizer has " + std::to_string(p.groups.size()));
  std::vector<HyperParams> new_hp;
  std::vector<double> new_init;
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    const Impl::Group& mine = p.groups[gi];
    const std::string gwhere = fn + ": param group " + std::to_string(gi);
    const Json& g = groups.as_array()[gi];
    if (!g.is_object()) throw malformed("param group " + std::to_string(gi) + " is not an object");
    const Json* params = g.find("params");
    if (params == nullptr || !params->is_array())
      throw malformed("param group " + std::to_string(gi) + " lacks 'params'");
    Json::Array ids;
    for (std::size_t i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].group == int(gi)) ids.push_back(integer(std::int64_t(i)));
    const std::string want_ids = detail::write_json(Json::array(ids));
    if (detail::write_json(*params) != want_ids)
      throw std::invalid_argument(gwhere + " holds parameters " + detail::write_json(*params) + " in the file but " +
                                  want_ids + " here");
    for (const char* key : kLayoutKeys) {
      const Json* v = g.find(key);
      // files written before the option existed hold the dynamic maps
      const Json dynamic = Json::string(state_map_key(StateMap::dynamic));
      if (!v && std::string(key) == "state_map") v = &dynamic;
      const std::string theirs = v ? detail::write_json(*v) : "(missing)";
      const std::string here = detail::write_json(layout_value(mine.layout, key));
      if (theirs != here)
        throw std::invalid_argument(gwhere + " has " + key + "=" + theirs + " in the file but " + here + " here");
    }
    HyperParams hp = mine.hp;
    double init_acc = mine.layout.initial_accumulator_value;
    for (const auto& [key, v] : g.as_object()) {
      if (key == "params" || std::find_if(std::begin(kLayoutKeys), std::end(kLayoutKeys),
                                          [&](const char* k) { return key == k; }) != std::end(kLayoutKeys))
        continue;
      const auto number = [&]() {
        if (!v.is_number()) throw malformed("hyper-parameter '" + key + "' is not a number");
        return v.as_double();
      };
      if (key == "betas") {
        const std::size_t want = def.num_betas == 3 ? 3 : 2;
        if (!v.is_array() || v.as_array().size() != want)
          throw malformed("'betas' must be a list of " + std::to_string(want) + " numbers for " + def.name);
        for (std::size_t k = 0; k < want; ++k) {
          if (!v.as_array()[k].is_number()) throw malformed("'betas' holds a value that is not a number");
          set_hparam(hp, HParam(int(HParam::beta1) + int(k)), v.as_array()[k].as_double());
        }
        continue;
      }
      if (key == "initial_accumulator_value") {
        init_acc = number();
        continue;
      }
      const HParamDef* d = nullptr;
      for (const HParamDef& x : hparam_defs())
        if (key == x.key) d = &x;
      if (d == nullptr) throw std::invalid_argument(gwhere + " has unknown hyper-parameter '" + key + "'");
      if (d->type == HParamType::flag) {
        if (!v.is_bool()) throw malformed("hyper-parameter '" + key + "' is not true/false");
        set_hparam(hp, d->id, v.as_bool() ? 1.0 : 0.0);
      } else if (d->type == HParamType::optional_real && v.is_null()) {
        set_hparam(hp, d->id, 0.0);
      } else {
        set_hparam(hp, d->id, number());
      }
    }
    validate_hparams(p.kind, hp, fn.c_str());
    LayoutOptions lo = mine.layout;
    lo.initial_accumulator_value = init_acc;
    validate_layout(lo, fn.c_str());
    if (used_slots(p.kind, hp) != mine.slots)
      throw std::invalid_argument(gwhere +
                                  ": the file's hyper-parameters (momentum, centered) need other state "
                                  "slots than this optimizer's");
    new_hp.push_back(hp);
    new_init.push_back(init_acc);
  }

  // -- the tensors --
  if (!layout.is_array()) throw malformed("octopt.tensors is not a list");
  const Json::Array& entries = layout.as_array();
  if (entries.size() != p.tensors.size())
    throw std::invalid_argument(fn + ": the file has " + std::to_string(entries.size()) +
                                " tensors but this optimizer has " + std::to_string(p.tensors.size()) + " parameters");
  std::map<std::string, const StateFile::Tensor*> by_name;
  for (const auto& t : file.tensors) by_name[t.name] = &t;
  struct Copy {
    void* dst;
    const std::uint8_t* src;
    std::size_t nbytes;
  };
  std::vector<Copy> copies;
  std::vector<std::int64_t> steps;
  std::vector<float> mus;
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    const Impl::Tensor& t = p.tensors[i];
    const Json& e = entries[i];
    const std::string where = fn + ": tensor " + std::to_string(i);
    if (!e.is_object()) throw malformed("tensor " + std::to_string(i) + " is not an object");
    const std::int64_t numel = int_of(e.find("numel"), "tensor " + std::to_string(i) + " 'numel'");
    if (numel != t.numel)
      throw std::invalid_argument(where + " has " + std::to_string(numel) + " elements in the file but parameter " +
                                  std::to_string(i) + " has " + std::to_string(t.numel));
    if (const Json* shape = e.find("shape"); shape != nullptr && shape->is_array()) {
      std::vector<std::int64_t> s;
      for (const Json& x : shape->as_array()) s.push_back(int_of(&x, "tensor " + std::to_string(i) + " 'shape'"));
      if (s != t.shape)
        throw std::invalid_argument(where + " has shape " + shape_str(s) + " in the file but parameter " +
                                    std::to_string(i) + " has shape " + shape_str(t.shape));
    }
    const std::int64_t step = int_of(e.find("step"), "tensor " + std::to_string(i) + " 'step'");
    if (step < 0) throw malformed("tensor " + std::to_string(i) + " has a negative step count");
    steps.push_back(step);
    if (optim_has_tensor_scalar(p.kind)) {
      const char* name = tensor_scalar_defs(p.kind)[0].name;
      const Json* m = e.find(name);
      const std::string why = m && m->is_number() ? tensor_scalar_problem(p.kind, m->as_double()) : "missing";
      if (!why.empty())
        throw malformed("tensor " + std::to_string(i) + " lacks " + optim_def(p.kind).class_name + "'s '" + name +
                        "' in " + tensor_scalar_range(p.kind));
      mus.push_back(float(m->as_double()));
    }
    const Json* slots = e.find("slots");
    if (slots == nullptr || !slots->is_object()) throw malformed("tensor " + std::to_string(i) + " lacks 'slots'");
    std::set<std::string> theirs, mine;
    for (const auto& kv : slots->as_object()) theirs.insert(kv.first);
    for (const SlotLayout& s : t.layout.slots) mine.insert(s.name);
    if (theirs != mine) {
      const auto list = [](const std::set<std::string>& x) {
        std::string out = "[";
        for (const auto& n : x) out += (out.size() > 1 ? ", '" : "'") + n + "'";
        return out + "]";
      };
      throw std::invalid_argument(where + " has state slots " + list(theirs) + " in the file but " + list(mine) +
                                  " here");
    }
    for (const SlotLayout& s : t.layout.slots) {
      const Json& spec = *slots->find(s.name);
      const std::string swhere = where + " slot '" + s.name + "'";
      if (!spec.is_object()) throw malformed("tensor " + std::to_string(i) + " slot '" + s.name + "' is not an object");
      const std::pair<const char*, Json> expect[3] = {
          {"bits", integer(s.bits)},
          {"block_size", integer(t.layout.block_size)},
          {"map", Json::string(state_map_name(s.bits, s.is_signed, s.map))}};
      for (const auto& [key, want] : expect) {
        const Json* v = spec.find(key);
        const std::string got = v ? detail::write_json(*v) : "(missing)";
        if (got != detail::write_json(want))
          throw std::invalid_argument(swhere + " has " + key + "=" + got + " in the file but " +
                                      detail::write_json(want) + " here");
      }
      const auto take = [&](const char* part, const char* dtype, const Impl::Buffer& b) {
        const std::size_t elem = b.request.elem == StateElem::f32 ? 4 : 1;
        const std::string name = tensor_name(i, s.name, part);
        auto it = by_name.find(name);
        if (it == by_name.end()) throw std::invalid_argument(swhere + ": the file lacks tensor '" + name + "'");
        const StateFile::Tensor& ft = *it->second;
        if (ft.dtype != dtype)
          throw std::invalid_argument(swhere + ": tensor '" + name + "' has dtype " + ft.dtype + ", expected " + dtype);
        if (ft.nbytes != b.request.count * elem)
          throw std::invalid_argument(swhere + ": tensor '" + name + "' has " + std::to_string(ft.nbytes / elem) +
                                      " elements, expected " + std::to_string(b.request.count));
        copies.push_back({b.ptr, ft.data, ft.nbytes});
      };
      if (s.bits == 32) {
        take(nullptr, "F32", t.values[s.index]);
      } else {
        take("codes", "U8", t.values[s.index]);
        take("absmax", "F32", t.absmax[s.index]);
      }
    }
  }
  // Everything matched: only now change the plan.
  for (const Copy& c : copies) {
    if (!c.nbytes) continue;
    if (p.device >= 0)
      cuda::copy_to_device(c.dst, c.src, c.nbytes, p.device);
    else
      std::memcpy(c.dst, c.src, c.nbytes);
  }
  for (std::size_t gi = 0; gi < p.groups.size(); ++gi) {
    p.groups[gi].hp = new_hp[gi];
    p.groups[gi].layout.initial_accumulator_value = new_init[gi];
    p.groups[gi].cached_step = 0;
  }
  set_tensor_steps(steps, "load");
  if (optim_has_tensor_scalar(p.kind)) set_tensor_mu_products(mus, "load");
  set_global_step(global_step);
}

}  // namespace octopt
