// The optimizer of the C ABI (c.h): a handle over the core's StepPlan that follows octopt.Optimizer
// (python/octopt/optimizer.py) step for step, so that the same calls give the same bits and the same
// mistakes the same messages. Options are set by the optimizer table's keys; groups snapshot them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "guard.hpp"
#include "octopt/c.h"
#include "octopt/optim_table.hpp"
#include "octopt/runtime.hpp"
#include "octopt/step_plan.hpp"

using octopt::capi::guard;
using octopt::capi::NullError;
using octopt::capi::require;
using octopt::capi::TypeError;

struct octopt_optimizer {
  const octopt::OptimDef* def = nullptr;
  octopt::PlanOptions options;
  octopt::HyperParams hp;  // the options of groups added from now on
  octopt::LayoutOptions lo;
  std::unique_ptr<octopt::StepPlan> plan;   // made with the first group, from `options`
  std::vector<octopt::HyperParams> groups;  // what users set; handed to the plan at the next step or save
  std::vector<bool> changed;
  std::vector<const void*> grads;  // per step
  std::vector<octopt::DType> grad_dtypes;
};

namespace {

using octopt::HParamDef;
using octopt::HParamType;

const char* fn_of(const octopt_optimizer* o) { return o->def->class_name; }

octopt_optimizer& handle(octopt_optimizer* o, const char* fn) {
  require(o, fn, "opt");
  return *o;
}
const octopt_optimizer& handle(const octopt_optimizer* o, const char* fn) {
  require(o, fn, "opt");
  return *o;
}

const HParamDef* hparam_by_key(const std::string& key) {
  for (const HParamDef& d : octopt::hparam_defs())
    if (key == d.key) return &d;
  return nullptr;
}

bool is_layout_int(const std::string& k) {
  return k == "bits" || k == "block_size" || k == "min_8bit_size" || k == "first_moment_bits";
}
bool is_plan_key(const std::string& k) {
  return k == "seed" || k == "stochastic_rounding" || k == "stochastic_bf16" || k == "percentile" || k == "strict";
}

// A layout option as an integer: Python's to_layout refuses anything but an int with these words.
std::int64_t layout_int(const std::string& key, double v, const char* fn) {
  const char* what = key == "bits"                ? "32, 8 or 4"
                     : key == "first_moment_bits" ? "None, 32, 8 or 4"
                     : key == "block_size"        ? "a power of two in [32, 4096]"
                                                  : "an int >= 0";
  const double limit = key == "min_8bit_size" ? 9223372036854775808.0 : 2147483648.0;
  if (!std::isfinite(v) || v != std::floor(v) || v < -limit || v >= limit)
    throw std::invalid_argument(std::string(fn) + ": '" + key + "' must be " + what + ", got " +
                                octopt::format_real(v));
  return std::int64_t(v);
}

void set_option(octopt_optimizer& o, const char* key_c, double v) {
  const char* fn = fn_of(&o);
  const std::string key(key_c);
  if (is_plan_key(key)) {
    if (o.plan)
      throw std::runtime_error("octopt_set: '" + key +
                               "' applies to the whole optimizer and is fixed once the first param group exists");
    if (key == "seed") {
      if (!(v >= 0 && v <= 18446744073709551615.0) || v != std::floor(v))
        throw std::invalid_argument(std::string(fn) + ": argument 'seed' must be in [0, 18446744073709551615], got " +
                                    octopt::format_real(v));
      o.options.seed = std::uint64_t(v);
    } else if (key == "stochastic_rounding") {
      if (v != -1 && v != 0 && v != 1)
        throw std::invalid_argument(std::string(fn) + ": 'stochastic_rounding' must be -1 (4-bit states), 0 or 1");
      o.options.stochastic_rounding = int(v);
    } else if (key == "percentile") {
      // Python checks the range before the core, with these words
      if (!(v >= 0.0 && v <= 100.0))
        throw std::invalid_argument(std::string(fn) + ": 'percentile' must be in [0, 100], got " +
                                    octopt::format_real(v));
      o.options.percentile = float(v);
    } else if (key == "stochastic_bf16") {
      o.options.stochastic_bf16 = v != 0;
    } else {
      o.options.strict = v != 0;
    }
    return;
  }
  if (const HParamDef* d = hparam_by_key(key)) {
    octopt::set_hparam(o.hp, d->id, d->type == HParamType::flag ? (v != 0 ? 1.0 : 0.0) : v);
    return;
  }
  if (key == "initial_accumulator_value") {
    o.lo.initial_accumulator_value = v;
    return;
  }
  if (is_layout_int(key)) {
    const std::int64_t i = layout_int(key, v, fn);
    if (key == "bits") o.lo.bits = int(i);
    if (key == "block_size") o.lo.block_size = int(i);
    if (key == "first_moment_bits") o.lo.first_moment_bits = int(i);
    if (key == "min_8bit_size") o.lo.min_8bit_size = i;
    return;
  }
  throw TypeError(std::string(fn) + ": unexpected option '" + key + "'");
}

int add_group(octopt_optimizer& o) {
  const char* fn = fn_of(&o);
  // Python's order: the plan's options, then the group's hyper-parameters, then its layout
  if (!o.plan)
    o.plan = std::make_unique<octopt::StepPlan>(o.def->kind, o.options, octopt::default_state_allocator(), fn);
  octopt::validate_hparams(o.def->kind, o.hp, fn);
  octopt::validate_layout(o.lo, fn);
  const int g = o.plan->add_group(o.hp, o.lo, fn);
  o.groups.push_back(o.hp);
  o.changed.push_back(false);
  return g;
}

// Hands the groups changed since the last step to the core, which validates them (Python's _sync_hparams).
void sync(octopt_optimizer& o, const char* fn) {
  for (std::size_t g = 0; g < o.groups.size(); ++g) {
    if (!o.changed[g]) continue;
    o.plan->set_hparams(int(g), o.groups[g], fn);
    o.changed[g] = false;
  }
}

octopt::DType dtype_code(int code, const std::string& fn, const std::string& arg, const std::string& want) {
  if (code != OCTOPT_FLOAT32 && code != OCTOPT_FLOAT16 && code != OCTOPT_BFLOAT16)
    throw TypeError(fn + ": argument '" + arg + "' must " + want + ", got dtype code " + std::to_string(code));
  return octopt::DType(code);
}

// A gradient must not share memory with its parameter: the step would read values it has written.
// (The same rule and words as the Python binding's check, python/src/array_ref.hpp.)
void check_alias(std::size_t i, const void* grad, std::size_t grad_bytes, const void* param, std::size_t param_bytes) {
  if (!grad_bytes || !param_bytes) return;
  const auto g = reinterpret_cast<std::uintptr_t>(grad), p = reinterpret_cast<std::uintptr_t>(param);
  if (!(g < p + param_bytes && p < g + grad_bytes)) return;
  const std::string arg = "grads[" + std::to_string(i) + "]";
  if (g == p) throw std::invalid_argument("step: argument '" + arg + "' is the parameter itself (aliased memory)");
  throw std::invalid_argument("step: argument '" + arg + "' overlaps its parameter's memory (aliased)");
}

const octopt::HParamDef& group_key(const octopt_optimizer& o, const char* fn, int group, const char* key_c) {
  require(key_c, fn, "key");
  if (group < 0 || std::size_t(group) >= o.groups.size())
    throw std::out_of_range(std::string(fn) + ": argument 'group' is " + std::to_string(group) + " but there are " +
                            std::to_string(o.groups.size()) + " param group(s)");
  const std::string key(key_c);
  if (const HParamDef* d = hparam_by_key(key)) return *d;
  if (is_layout_int(key) || key == "initial_accumulator_value" || key == "state_map")
    throw std::invalid_argument(
        std::string(fn) + ": '" + key +
        "' lays out the group's state; the state layout cannot change after the group was added");
  throw std::invalid_argument(std::string(fn) + ": unknown option '" + key + "' for " + o.def->name);
}

}  // namespace

extern "C" {

int octopt_optimizer_create(const char* name, octopt_optimizer** out) {
  return guard([&] {
    constexpr const char* fn = "octopt_optimizer_create";
    require(out, fn, "out");
    *out = nullptr;
    require(name, fn, "name");
    const octopt::OptimDef* def = nullptr;
    try {
      def = &octopt::optim_def(std::string(name));
    } catch (const std::invalid_argument&) {
      std::string names;
      for (const octopt::OptimDef& d : octopt::optim_defs()) names += (names.empty() ? "" : ", ") + std::string(d.name);
      throw std::invalid_argument(std::string(fn) + ": argument 'name' is '" + name +
                                  "', which is no optimizer of the table (" + names + ")");
    }
    // a direction step (Muon) writes a direction into the "parameter" for a matrix step the caller runs: stepping it
    // here would overwrite the parameter with its momentum
    if (def->direction_step)
      throw std::invalid_argument(std::string(fn) + ": argument 'name' is '" + name +
                                  "', whose step writes a direction for the caller's orthogonalization, which the C "
                                  "API does not run; step it with the C++ or Python API (docs/muon.md)");
    auto o = std::make_unique<octopt_optimizer>();
    o->def = def;
    o->hp = def->defaults;
    o->lo.initial_accumulator_value = def->initial_accumulator_value;
    *out = o.release();
  });
}

void octopt_optimizer_destroy(octopt_optimizer* opt) { delete opt; }

int octopt_set(octopt_optimizer* opt, const char* key, double value) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_set");
    require(key, "octopt_set", "key");
    set_option(o, key, value);
  });
}

int octopt_set_string(octopt_optimizer* opt, const char* key, const char* value) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_set_string");
    require(key, "octopt_set_string", "key");
    require(value, "octopt_set_string", "value");
    if (std::strcmp(key, "state_map") != 0)
      throw TypeError(std::string(fn_of(&o)) + ": unexpected option '" + key + "'");
    o.lo.state_map = octopt::parse_state_map(value, fn_of(&o));
  });
}

int octopt_add_group(octopt_optimizer* opt, int* group) {
  return guard([&] {
    const int g = add_group(handle(opt, "octopt_add_group"));
    if (group) *group = g;
  });
}

int octopt_add_param(octopt_optimizer* opt, int group, void* data, int dtype, const int64_t* shape, int ndim,
                     int device, size_t* index) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_add_param");
    const char* fn = fn_of(&o);
    const std::size_t i = o.plan ? o.plan->num_tensors() : 0;
    const std::string arg = "params[" + std::to_string(i) + "]";
    if (ndim < 0)
      throw std::invalid_argument(std::string(fn) + ": argument 'ndim' must be >= 0, got " + std::to_string(ndim));
    if (ndim > 0) require(shape, fn, "shape");
    const octopt::DType dt = dtype_code(dtype, fn, arg, "have dtype float32 or float16 or bfloat16");
    if (device < OCTOPT_CPU)
      throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' must be on the CPU or a CUDA device");
    if (device >= 0) {
      const std::string where = "cuda:" + std::to_string(device);
      if (!octopt::cuda::built())
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is on " + where +
                                    " but octopt was built without CUDA");
      if (o.options.strict)
        throw std::invalid_argument(std::string(fn) +
                                    ": argument 'strict' must be False for CUDA parameters (checking the gradients "
                                    "first would synchronize every step); read skipped_blocks instead");
    }
    for (std::size_t j = 0; data && j < i; ++j)
      if (o.plan->tensor_data(j) == data)
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' appears more than once");
    if (o.groups.empty() && group == 0) add_group(o);
    if (group < 0 || std::size_t(group) >= o.groups.size())
      throw std::out_of_range(std::string(fn) + ": argument 'group' is " + std::to_string(group) + " but there are " +
                              std::to_string(o.groups.size()) + " param group(s)");
    const std::vector<std::int64_t> dims(shape, shape + ndim);
    const std::size_t k = o.plan->add_tensor(group, data, dt, dims, device, fn);
    if (index) *index = k;
  });
}

int octopt_group_set(octopt_optimizer* opt, int group, const char* key, double value) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_group_set");
    const HParamDef& d = group_key(o, "octopt_group_set", group, key);
    octopt::set_hparam(o.groups[std::size_t(group)], d.id,
                       d.type == HParamType::flag ? (value != 0 ? 1.0 : 0.0) : value);
    o.changed[std::size_t(group)] = true;
  });
}

int octopt_group_get(const octopt_optimizer* opt, int group, const char* key, double* value) {
  return guard([&] {
    const octopt_optimizer& o = handle(opt, "octopt_group_get");
    require(value, "octopt_group_get", "value");
    const HParamDef& d = group_key(o, "octopt_group_get", group, key);
    *value = octopt::get_hparam(o.groups[std::size_t(group)], d.id);
  });
}

int octopt_step(octopt_optimizer* opt, const void* const* grads, const int* grad_dtypes, size_t n_grads, void* stream,
                int64_t* skipped_blocks) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "step");
    const std::size_t n = o.plan ? o.plan->num_tensors() : 0;
    if (n_grads != n)
      throw std::invalid_argument("step: expected " + std::to_string(n) + " gradients (one per parameter), got " +
                                  std::to_string(n_grads));
    if (n == 0) {
      if (skipped_blocks) *skipped_blocks = 0;
      return;
    }
    require(grads, "step", "grads");
    o.grads.assign(grads, grads + n);
    o.grad_dtypes.assign(n, octopt::DType::f32);
    for (std::size_t i = 0; i < n; ++i) {
      const octopt::DType pd = o.plan->tensor_dtype(i);
      if (!grads[i]) continue;
      const std::string arg = "grads[" + std::to_string(i) + "]";
      const int code = grad_dtypes ? grad_dtypes[i] : int(pd);
      const auto gd = octopt::DType(code);
      // Python's words for a gradient of another dtype (an unknown code is such a dtype)
      if ((code != int(pd) && code != OCTOPT_FLOAT32) || (gd != pd && gd != octopt::DType::f32))
        throw TypeError("step: argument '" + arg + "' must be float32 or the parameter's dtype (" +
                        octopt::dtype_name(pd) + ")");
      const std::size_t numel = std::size_t(o.plan->tensor_numel(i));
      check_alias(i, grads[i], numel * octopt::dtype_size(gd), o.plan->tensor_data(i), numel * octopt::dtype_size(pd));
      o.grad_dtypes[i] = gd;
    }
    sync(o, "step");
    const std::int64_t skipped =
        o.plan->step(o.grads.data(), o.grad_dtypes.data(), static_cast<octopt::cudaStream_t>(stream), "step");
    if (skipped_blocks) *skipped_blocks = skipped;
  });
}

int octopt_save(octopt_optimizer* opt, const char* path) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "save");
    require(path, "save", "path");
    if (!o.plan) throw std::runtime_error("save: the optimizer has no param group yet");
    sync(o, "save");  // the file holds values set since the last step too
    o.plan->save(path);
  });
}

int octopt_load(octopt_optimizer* opt, const char* path) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "load");
    require(path, "load", "path");
    if (!o.plan) throw std::runtime_error("load: the optimizer has no param group yet");
    o.plan->load(path);
    // the core replaced the groups' hyper-parameters: what users read and change follows
    for (std::size_t g = 0; g < o.groups.size(); ++g) {
      o.groups[g] = o.plan->hparams(int(g));
      o.changed[g] = false;
    }
  });
}

int octopt_state_bytes(const octopt_optimizer* opt, size_t* bytes) {
  return guard([&] {
    const octopt_optimizer& o = handle(opt, "octopt_state_bytes");
    require(bytes, "octopt_state_bytes", "bytes");
    *bytes = o.plan ? o.plan->state_bytes() : 0;
  });
}

int octopt_num_params(const octopt_optimizer* opt, size_t* count) {
  return guard([&] {
    const octopt_optimizer& o = handle(opt, "octopt_num_params");
    require(count, "octopt_num_params", "count");
    *count = o.plan ? o.plan->num_tensors() : 0;
  });
}

int octopt_num_groups(const octopt_optimizer* opt, int* count) {
  return guard([&] {
    const octopt_optimizer& o = handle(opt, "octopt_num_groups");
    require(count, "octopt_num_groups", "count");
    *count = int(o.groups.size());
  });
}

int octopt_global_step(octopt_optimizer* opt, int64_t* step) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_global_step");
    require(step, "octopt_global_step", "step");
    *step = o.plan ? o.plan->global_step() : 0;
  });
}

namespace {
std::size_t checked_param(const octopt_optimizer& o, std::size_t param, const char* fn) {
  const std::size_t n = o.plan ? o.plan->num_tensors() : 0;
  if (param >= n)
    throw std::out_of_range(std::string(fn) + ": argument 'param' is " + std::to_string(param) + " but there are " +
                            std::to_string(n) + " parameter(s)");
  return param;
}
}  // namespace

int octopt_param_step(octopt_optimizer* opt, size_t param, int64_t* step) {
  return guard([&] {
    octopt_optimizer& o = handle(opt, "octopt_param_step");
    require(step, "octopt_param_step", "step");
    const std::size_t i = checked_param(o, param, "octopt_param_step");  // before o.plan is used: it may be null
    *step = o.plan->tensor_steps()[i];
  });
}

int octopt_param_slot_count(const octopt_optimizer* opt, size_t param, int* count) {
  return guard([&] {
    const octopt_optimizer& o = handle(opt, "octopt_param_slot_count");
    require(count, "octopt_param_slot_count", "count");
    const std::size_t i = checked_param(o, param, "octopt_param_slot_count");
    *count = int(o.plan->tensor_state(i).size());
  });
}

int octopt_param_slot(const octopt_optimizer* opt, size_t param, int slot, const char** name, int* bits,
                      int* block_size, void** data, size_t* count, float** absmax, size_t* blocks) {
  return guard([&] {
    constexpr const char* fn = "octopt_param_slot";
    const octopt_optimizer& o = handle(opt, fn);
    const std::size_t i = checked_param(o, param, fn);
    const std::vector<octopt::StateBuffers> s = o.plan->tensor_state(i);
    if (slot < 0 || std::size_t(slot) >= s.size())
      throw std::out_of_range(std::string(fn) + ": argument 'slot' is " + std::to_string(slot) + " but parameter " +
                              std::to_string(param) + " has " + std::to_string(s.size()) + " state slot(s)");
    const octopt::StateBuffers& b = s[std::size_t(slot)];
    if (name) *name = b.slot.name;
    if (bits) *bits = b.slot.bits;
    if (block_size) *block_size = b.slot.block_size;
    if (data) *data = b.data;
    if (count) *count = b.count;
    if (absmax) *absmax = b.absmax;
    if (blocks) *blocks = b.blocks;
  });
}

}  // extern "C"
