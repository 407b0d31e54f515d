// octopt::Optimizer: state ownership, stepping and the state-file layout of Python's
// octopt.Optimizer (python/octopt/_layout.py, _checkpoint.py; docs/format.md section 5).
#include "octopt/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "json.hpp"
#include "octopt/qmap.hpp"
#include "octopt/state_io.hpp"

namespace octopt {
namespace {

using detail::Json;

struct SlotDef {
  const char* name;
  bool is_signed;
};

// State slots (s0, s1, s2) per optimizer and whether each holds signed values: _layout.SLOTS.
std::vector<SlotDef> slot_defs(OptimKind kind) {
  switch (kind) {
    case OptimKind::adam:
    case OptimKind::adamw:
    case OptimKind::lamb:
    case OptimKind::radam:
    case OptimKind::nadam: return {{"exp_avg", true}, {"exp_avg_sq", false}};
    case OptimKind::ademamix: return {{"m1", true}, {"nu", false}, {"m2", true}};
    case OptimKind::sgd:
    case OptimKind::lars: return {{"momentum_buffer", true}};
    case OptimKind::lion: return {{"exp_avg", true}};
    case OptimKind::rmsprop: return {{"square_avg", false}, {"momentum_buffer", true}, {"grad_avg", true}};
    case OptimKind::adagrad: return {{"sum", false}};
  }
  return {};
}

// The slots used under these hyper-parameters: _layout.used_slots.
std::vector<int> used_slots(OptimKind kind, const HyperParams& hp) {
  if (kind == OptimKind::sgd || kind == OptimKind::lars) return hp.momentum != 0 ? std::vector<int>{0} : std::vector<int>{};
  if (kind == OptimKind::rmsprop) {
    std::vector<int> s{0};
    if (hp.momentum > 0) s.push_back(1);
    if (hp.centered) s.push_back(2);
    return s;
  }
  std::vector<int> s;
  for (int k = 0; k < int(slot_defs(kind).size()); ++k) s.push_back(k);
  return s;
}

// Codebook registry: _layout.CODEBOOKS and MAP_NAMES.
int codebook_index(int bits, bool is_signed) { return (bits == 8 ? 0 : 2) + (is_signed ? 0 : 1); }
const char* map_name(int bits, bool is_signed) {
  if (bits == 32) return "float32";
  if (bits == 8) return is_signed ? "dynamic_signed_8" : "dynamic_unsigned_8";
  return is_signed ? "dynamic_signed_4" : "log2_step0.8_nozero_4";
}

std::int64_t num_blocks(std::int64_t n, int block_size) { return (n + block_size - 1) / block_size; }

std::string tensor_name(std::size_t i, const std::string& slot, const char* part) {
  return "state." + std::to_string(i) + "." + slot + (part ? std::string(".") + part : std::string());
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + (s.size() == 1 ? ",)" : ")");
}

void check_real(double v, const char* fn, const char* name, double lo, double hi = INFINITY, bool hi_open = false) {
  if (!std::isfinite(v) || v < lo || (hi_open ? v >= hi : v > hi))
    throw std::invalid_argument(std::string(fn) + ": hyper-parameter '" + name + "' must be finite and in [" +
                                std::to_string(lo) + (std::isinf(hi) ? ", inf)" : ", " + std::to_string(hi) + (hi_open ? ")" : "]")) +
                                ", got " + std::to_string(v));
}

// The checks of Python's _hparams.validate_group that apply to HyperParams.
void validate_hparams(OptimKind kind, const HyperParams& hp, const char* fn) {
  check_real(hp.lr, fn, "lr", 0.0);
  check_real(hp.eps, fn, "eps", 0.0);
  check_real(hp.weight_decay, fn, "weight_decay", 0.0);
  check_real(hp.beta1, fn, "beta1", 0.0, 1.0, true);
  check_real(hp.beta2, fn, "beta2", 0.0, 1.0, true);
  check_real(hp.beta3, fn, "beta3", 0.0, 1.0, true);
  check_real(hp.momentum, fn, "momentum", 0.0);
  check_real(hp.dampening, fn, "dampening", 0.0, 1.0);
  check_real(hp.alpha, fn, "alpha", 0.0, kind == OptimKind::rmsprop ? 1.0 : INFINITY, kind == OptimKind::rmsprop);
  check_real(hp.lr_decay, fn, "lr_decay", 0.0);
  check_real(hp.eta, fn, "eta", 0.0);
  check_real(hp.t_alpha, fn, "t_alpha", 0.0);
  check_real(hp.t_beta3, fn, "t_beta3", 0.0);
  if (hp.nesterov && (hp.momentum <= 0 || hp.dampening != 0))
    throw std::invalid_argument(std::string(fn) + ": Nesterov momentum requires momentum > 0 and zero dampening");
}

Json real(double v) { return Json::number(v); }
Json integer(std::int64_t v) { return Json::integer(std::uint64_t(v < 0 ? -v : v), v < 0); }

}  // namespace

Optimizer::Optimizer(OptimKind kind, HyperParams hp, int bits, int block_size, std::int64_t min_8bit_size,
                     std::uint64_t seed)
    : kind_(kind), hp_(hp), bits_(bits), block_size_(block_size), min_8bit_size_(min_8bit_size), seed_(seed) {
  constexpr const char* fn = "Optimizer";
  if (int(kind) > int(OptimKind::lars))
    throw std::invalid_argument("Optimizer: argument 'kind' is not a known optimizer (" + std::to_string(int(kind)) + ")");
  if (bits != 32 && bits != 8 && bits != 4)
    throw std::invalid_argument("Optimizer: argument 'bits' must be 32, 8 or 4, got " + std::to_string(bits));
  if (block_size != 0 && (block_size < 32 || block_size > 4096 || (block_size & (block_size - 1))))
    throw std::invalid_argument("Optimizer: argument 'block_size' must be 0 (automatic) or a power of two in [32, 4096], got " +
                                std::to_string(block_size));
  if (min_8bit_size < 0)
    throw std::invalid_argument("Optimizer: argument 'min_8bit_size' must be >= 0, got " + std::to_string(min_8bit_size));
  validate_hparams(kind, hp, fn);
  // The maps of Python's Optimizer, in the order of _layout.CODEBOOKS; unsigned (second-moment)
  // states never round a positive value to zero (docs/numerics.md).
  const std::vector<float> maps[4] = {dynamic_map(true, 7, 8), dynamic_map(false, 7, 8), dynamic_map(true, 3, 4),
                                      log2_map_nozero(4, 0.8)};
  const int map_bits[4] = {8, 8, 4, 4};
  for (int k = 0; k < 4; ++k) {
    codebooks_.push_back(make_codebook(maps[k].data(), std::int64_t(maps[k].size()), map_bits[k], fn, "qmap"));
    if (k % 2 == 1) keep_nonzero(codebooks_.back());
  }
}

void Optimizer::set_initial_accumulator_value(double value) {
  check_real(value, "set_initial_accumulator_value", "value", 0.0);
  initial_accumulator_value_ = value;
}

std::size_t Optimizer::add_param(float* data, std::int64_t n, std::vector<std::int64_t> shape) {
  const std::string where = "add_param: parameter " + std::to_string(tensors_.size());
  if (n < 0) throw std::invalid_argument(where + ": argument 'n' must be >= 0, got " + std::to_string(n));
  if (data == nullptr && n > 0) throw std::invalid_argument(where + ": argument 'data' is null");
  if (shape.empty()) shape = {n};
  std::int64_t prod = 1;
  for (std::int64_t e : shape) {
    if (e < 0) throw std::invalid_argument(where + ": argument 'shape' " + shape_str(shape) + " has a negative extent");
    prod *= e;
  }
  if (prod != n)
    throw std::invalid_argument(where + ": argument 'shape' " + shape_str(shape) + " holds " + std::to_string(prod) +
                                " elements but 'n' is " + std::to_string(n));
  for (std::size_t j = 0; j < tensors_.size(); ++j) {
    const Tensor& o = tensors_[j];
    if (n > 0 && o.n > 0 && data < o.param + o.n && o.param < data + n)
      throw std::invalid_argument(where + ": argument 'data' overlaps the memory of parameter " + std::to_string(j));
  }
  Tensor t;
  t.param = data;
  t.n = n;
  t.shape = std::move(shape);
  // _layout.plan_slots: small tensors keep 32-bit state
  const int bits = n < min_8bit_size_ ? 32 : bits_;
  t.block_size = block_size_ ? block_size_ : (bits == 4 ? 128 : 256);
  const auto defs = slot_defs(kind_);
  for (int k : used_slots(kind_, hp_)) {
    Slot s;
    s.index = k;
    s.name = defs[std::size_t(k)].name;
    s.is_signed = defs[std::size_t(k)].is_signed;
    s.bits = bits;
    const double init = (kind_ == OptimKind::adagrad && k == 0) ? initial_accumulator_value_ : 0.0;
    if (bits == 32) {
      s.values.assign(std::size_t(n), float(init));
    } else {
      // a constant block: absmax = |init|, every code the one nearest to sign(init) (Python's _allocate)
      const Codebook& cb = codebooks_[std::size_t(codebook_index(bits, s.is_signed))];
      const double target = init > 0 ? 1.0 : 0.0;
      int code = 0;
      for (int c = 1; c < cb.size; ++c)
        if (std::fabs(double(cb.values[c]) - target) < std::fabs(double(cb.values[code]) - target)) code = c;
      if (bits == 4) code |= code << 4;
      s.codes.assign(std::size_t(bits == 4 ? (n + 1) / 2 : n), std::uint8_t(code));
      s.absmax.assign(std::size_t(num_blocks(n, t.block_size)), float(init));
    }
    t.slots.push_back(std::move(s));
  }
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

std::int64_t Optimizer::step(const std::vector<const float*>& grads) {
  constexpr const char* fn = "step";
  if (grads.size() != tensors_.size())
    throw std::invalid_argument("step: argument 'grads' has " + std::to_string(grads.size()) + " entries but the optimizer has " +
                                std::to_string(tensors_.size()) + " parameters");
  validate_hparams(kind_, hp_, fn);
  slots_.resize(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    if (grads[i] != nullptr && grads[i] == t.param && t.n > 0)
      throw std::invalid_argument("step: argument 'grads[" + std::to_string(i) + "]' is the parameter itself");
    StepTensor s;
    s.param = t.param;
    s.grad = grads[i];
    s.n = t.n;
    s.block_size = t.block_size;
    s.rng_stream = i;
    for (Slot& st : t.slots) {
      StateBuffer& b = s.state[st.index];
      b.bits = st.bits;
      if (st.bits == 32) {
        b.data = st.values.data();
      } else {
        b.data = st.codes.data();
        b.absmax = st.absmax.data();
        b.codebook = codebook_index(st.bits, st.is_signed);
        b.stochastic = st.bits == 4;  // as Python's default: 16 levels need unbiased rounding (docs/decisions.md)
      }
    }
    if (grads[i] != nullptr) s.scalars = compute_scalars(kind_, hp_, t.step + 1);
    slots_[i] = s;
  }
  StepConfig cfg;
  cfg.kind = kind_;
  cfg.codebooks = codebooks_.data();
  cfg.num_codebooks = int(codebooks_.size());
  cfg.seed = seed_;
  cfg.step = global_step_ + 1;
  validate_step(cfg, slots_.data(), slots_.size(), fn);
  const StepResult r = octopt::step(cfg, slots_.data(), slots_.size(), ws_);
  global_step_ = cfg.step;
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    if (grads[i] != nullptr) ++tensors_[i].step;
  return r.skipped_blocks;
}

std::size_t Optimizer::state_bytes() const {
  std::size_t total = 0;
  for (const Tensor& t : tensors_)
    for (const Slot& s : t.slots) total += s.values.size() * 4 + s.codes.size() + s.absmax.size() * 4;
  return total;
}

std::int64_t Optimizer::param_step(std::size_t i) const {
  if (i >= tensors_.size())
    throw std::out_of_range("param_step: argument 'i' is " + std::to_string(i) + " but there are " +
                            std::to_string(tensors_.size()) + " parameters");
  return tensors_[i].step;
}

std::vector<int> Optimizer::state_bits(std::size_t i) const {
  if (i >= tensors_.size())
    throw std::out_of_range("state_bits: argument 'i' is " + std::to_string(i) + " but there are " +
                            std::to_string(tensors_.size()) + " parameters");
  std::vector<int> out;
  for (const Slot& s : tensors_[i].slots) out.push_back(s.bits);
  return out;
}

// ---- files ------------------------------------------------------------------------------------

void Optimizer::save(const std::string& path) const {
  std::vector<TensorView> views;
  Json::Array layout;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    Json::Object slots;
    for (const Slot& s : t.slots) {
      if (s.bits == 32) {
        views.push_back({tensor_name(i, s.name, nullptr), "F32", {std::int64_t(s.values.size())}, s.values.data()});
      } else {
        views.push_back({tensor_name(i, s.name, "codes"), "U8", {std::int64_t(s.codes.size())}, s.codes.data()});
        views.push_back({tensor_name(i, s.name, "absmax"), "F32", {std::int64_t(s.absmax.size())}, s.absmax.data()});
      }
      // keys sorted, as Python's json.dumps(sort_keys=True)
      slots.emplace_back(s.name, Json::object({{"bits", integer(s.bits)},
                                               {"block_size", integer(t.block_size)},
                                               {"map", Json::string(map_name(s.bits, s.is_signed))}}));
    }
    std::sort(slots.begin(), slots.end(), [](const Json::Member& a, const Json::Member& b) { return a.first < b.first; });
    Json::Array shape;
    for (std::int64_t e : t.shape) shape.push_back(integer(e));
    layout.push_back(Json::object({{"dtype", Json::string("float32")},
                                   {"numel", integer(t.n)},
                                   {"shape", Json::array(std::move(shape))},
                                   {"slots", Json::object(std::move(slots))},
                                   {"step", integer(t.step)}}));
  }
  // One param group holding every parameter, with every key Python's group has (_hparams.GROUP_KEYS).
  Json::Array betas{real(hp_.beta1), real(hp_.beta2)};
  if (kind_ == OptimKind::ademamix) betas.push_back(real(hp_.beta3));
  Json::Array params;
  for (std::size_t i = 0; i < tensors_.size(); ++i) params.push_back(integer(std::int64_t(i)));
  std::map<std::string, Json> g;
  g["alpha"] = real(hp_.alpha);
  g["betas"] = Json::array(std::move(betas));
  g["bias_correction"] = Json::boolean(hp_.bias_correction);
  g["bits"] = integer(bits_);
  g["block_size"] = block_size_ ? integer(block_size_) : Json();
  g["centered"] = Json::boolean(hp_.centered);
  g["dampening"] = real(hp_.dampening);
  g["eps"] = real(hp_.eps);
  g["eta"] = real(hp_.eta);
  g["first_moment_bits"] = Json();
  g["initial_accumulator_value"] = real(initial_accumulator_value_);
  g["lr"] = real(hp_.lr);
  g["lr_decay"] = real(hp_.lr_decay);
  g["maximize"] = Json::boolean(hp_.maximize);
  g["min_8bit_size"] = integer(min_8bit_size_);
  g["momentum"] = real(hp_.momentum);
  g["nesterov"] = Json::boolean(hp_.nesterov);
  g["params"] = Json::array(std::move(params));
  g["t_alpha"] = hp_.t_alpha > 0 ? real(hp_.t_alpha) : Json();
  g["t_beta3"] = hp_.t_beta3 > 0 ? real(hp_.t_beta3) : Json();
  g["weight_decay"] = real(hp_.weight_decay);
  Json::Object group;
  for (auto& kv : g) group.emplace_back(kv.first, std::move(kv.second));
  const std::map<std::string, std::string> metadata = {
      {"octopt.optimizer", optim_name(kind_)},
      {"octopt.step", std::to_string(global_step_)},
      {"octopt.hparams", detail::write_json(Json::array({Json::object(std::move(group))}))},
      {"octopt.tensors", detail::write_json(Json::array(std::move(layout)))},
  };
  write_state_file(path, views, metadata);
}

void Optimizer::load(const std::string& path) {
  const std::string fn = "Optimizer::load: " + path;
  StateFile file = read_state_file(path);
  for (const char* key : {"octopt.optimizer", "octopt.step", "octopt.hparams", "octopt.tensors"})
    if (!file.metadata.count(key))
      throw FormatError(fn + " is not an octopt optimizer state file (metadata lacks " + key + ")");
  const std::string& kind = file.metadata["octopt.optimizer"];
  if (kind != optim_name(kind_))
    throw std::invalid_argument(fn + " holds state for optimizer '" + kind + "' but this optimizer is '" +
                                optim_name(kind_) + "'");
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
  const auto malformed = [&](const std::string& what) { return FormatError(fn + " has malformed octopt metadata: " + what); };
  const auto int_of = [&](const Json* v, const std::string& what) -> std::int64_t {
    if (v == nullptr || !v->is_integer() || v->magnitude() > (std::uint64_t(1) << 62))
      throw malformed(what + " is missing or not an integer");
    return v->negative() ? -std::int64_t(v->magnitude()) : std::int64_t(v->magnitude());
  };

  // -- the param group --
  if (!groups.is_array()) throw malformed("octopt.hparams is not a list");
  if (groups.as_array().size() != 1)
    throw std::invalid_argument(fn + " has " + std::to_string(groups.as_array().size()) +
                                " param groups but this optimizer has 1");
  const Json& g = groups.as_array()[0];
  if (!g.is_object()) throw malformed("param group 0 is not an object");
  const Json* params = g.find("params");
  if (params == nullptr || !params->is_array()) throw malformed("param group 0 lacks 'params'");
  bool params_match = params->as_array().size() == tensors_.size();
  for (std::size_t i = 0; params_match && i < tensors_.size(); ++i)
    params_match = params->as_array()[i].is_integer() && !params->as_array()[i].negative() &&
                   params->as_array()[i].magnitude() == i;
  if (!params_match)
    throw std::invalid_argument(fn + ": param group 0 holds parameters " + detail::write_json(*params) +
                                " in the file but this optimizer's group holds parameters 0.." +
                                std::to_string(int(tensors_.size()) - 1));
  const auto check_int_key = [&](const char* key, const Json& mine) {
    const Json* v = g.find(key);
    const std::string theirs = v ? detail::write_json(*v) : "(missing)";
    if (theirs != detail::write_json(mine))
      throw std::invalid_argument(fn + ": param group 0 has " + key + "=" + theirs + " in the file but " +
                                  detail::write_json(mine) + " here");
  };
  check_int_key("bits", integer(bits_));
  check_int_key("block_size", block_size_ ? integer(block_size_) : Json());
  check_int_key("min_8bit_size", integer(min_8bit_size_));
  check_int_key("first_moment_bits", Json());
  HyperParams hp = hp_;
  double init_acc = initial_accumulator_value_;
  static const std::set<std::string> known = {
      "alpha", "betas", "bias_correction", "bits", "block_size", "centered", "dampening", "eps", "eta",
      "first_moment_bits", "initial_accumulator_value", "lr", "lr_decay", "maximize", "min_8bit_size", "momentum",
      "nesterov", "params", "t_alpha", "t_beta3", "weight_decay"};
  for (const auto& [key, v] : g.as_object()) {
    if (!known.count(key)) throw std::invalid_argument(fn + ": param group 0 has unknown hyper-parameter '" + key + "'");
    const auto number = [&]() {
      if (!v.is_number()) throw malformed("hyper-parameter '" + key + "' is not a number");
      return v.as_double();
    };
    const auto flag = [&]() {
      if (!v.is_bool()) throw malformed("hyper-parameter '" + key + "' is not true/false");
      return v.as_bool();
    };
    if (key == "lr") hp.lr = number();
    else if (key == "eps") hp.eps = number();
    else if (key == "weight_decay") hp.weight_decay = number();
    else if (key == "momentum") hp.momentum = number();
    else if (key == "dampening") hp.dampening = number();
    else if (key == "alpha") hp.alpha = number();
    else if (key == "lr_decay") hp.lr_decay = number();
    else if (key == "eta") hp.eta = number();
    else if (key == "initial_accumulator_value") init_acc = number();
    else if (key == "t_alpha") hp.t_alpha = v.is_null() ? 0.0 : number();
    else if (key == "t_beta3") hp.t_beta3 = v.is_null() ? 0.0 : number();
    else if (key == "nesterov") hp.nesterov = flag();
    else if (key == "centered") hp.centered = flag();
    else if (key == "bias_correction") hp.bias_correction = flag();
    else if (key == "maximize") hp.maximize = flag();
    else if (key == "betas") {
      const std::size_t want = kind_ == OptimKind::ademamix ? 3 : 2;
      if (!v.is_array() || v.as_array().size() != want)
        throw malformed("'betas' must be a list of " + std::to_string(want) + " numbers for " + optim_name(kind_));
      double b[3] = {hp.beta1, hp.beta2, hp.beta3};
      for (std::size_t k = 0; k < want; ++k) {
        if (!v.as_array()[k].is_number()) throw malformed("'betas' holds a value that is not a number");
        b[k] = v.as_array()[k].as_double();
      }
      hp.beta1 = b[0], hp.beta2 = b[1], hp.beta3 = b[2];
    }
  }
  validate_hparams(kind_, hp, fn.c_str());
  if (used_slots(kind_, hp) != used_slots(kind_, hp_))
    throw std::invalid_argument(fn + ": the file's hyper-parameters (momentum, centered) need other state slots than "
                                "this optimizer's");

  // -- the tensors --
  if (!layout.is_array()) throw malformed("octopt.tensors is not a list");
  const Json::Array& entries = layout.as_array();
  if (entries.size() != tensors_.size())
    throw std::invalid_argument(fn + " has " + std::to_string(entries.size()) + " tensors but this optimizer has " +
                                std::to_string(tensors_.size()) + " parameters");
  std::map<std::string, const StateFile::Tensor*> by_name;
  for (const auto& t : file.tensors) by_name[t.name] = &t;
  struct Copy {
    void* dst;
    const std::uint8_t* src;
    std::size_t nbytes;
  };
  std::vector<Copy> copies;
  std::vector<std::int64_t> steps;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    const Json& e = entries[i];
    const std::string where = fn + ": tensor " + std::to_string(i);
    if (!e.is_object()) throw malformed("tensor " + std::to_string(i) + " is not an object");
    const std::int64_t numel = int_of(e.find("numel"), "tensor " + std::to_string(i) + " 'numel'");
    if (numel != t.n)
      throw std::invalid_argument(where + " has " + std::to_string(numel) + " elements in the file but parameter " +
                                  std::to_string(i) + " has " + std::to_string(t.n));
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
    const Json* slots = e.find("slots");
    if (slots == nullptr || !slots->is_object()) throw malformed("tensor " + std::to_string(i) + " lacks 'slots'");
    std::set<std::string> theirs, mine;
    for (const auto& kv : slots->as_object()) theirs.insert(kv.first);
    for (const Slot& s : t.slots) mine.insert(s.name);
    if (theirs != mine) {
      const auto list = [](const std::set<std::string>& x) {
        std::string out = "[";
        for (const auto& n : x) out += (out.size() > 1 ? ", '" : "'") + n + "'";
        return out + "]";
      };
      throw std::invalid_argument(where + " has state slots " + list(theirs) + " in the file but " + list(mine) + " here");
    }
    for (Slot& s : t.slots) {
      const Json& spec = *slots->find(s.name);
      const std::string swhere = where + " slot '" + s.name + "'";
      if (!spec.is_object()) throw malformed("tensor " + std::to_string(i) + " slot '" + s.name + "' is not an object");
      const std::pair<const char*, Json> expect[3] = {{"bits", integer(s.bits)},
                                                      {"block_size", integer(t.block_size)},
                                                      {"map", Json::string(map_name(s.bits, s.is_signed))}};
      for (const auto& [key, want] : expect) {
        const Json* v = spec.find(key);
        const std::string got = v ? detail::write_json(*v) : "(missing)";
        if (got != detail::write_json(want))
          throw std::invalid_argument(swhere + " has " + key + "=" + got + " in the file but " +
                                      detail::write_json(want) + " here");
      }
      const auto take = [&](const char* part, const char* dtype, void* dst, std::size_t count, std::size_t elem) {
        const std::string name = tensor_name(i, s.name, part);
        auto it = by_name.find(name);
        if (it == by_name.end()) throw std::invalid_argument(swhere + ": the file lacks tensor '" + name + "'");
        const StateFile::Tensor& ft = *it->second;
        if (ft.dtype != dtype)
          throw std::invalid_argument(swhere + ": tensor '" + name + "' has dtype " + ft.dtype + ", expected " + dtype);
        if (ft.nbytes != count * elem)
          throw std::invalid_argument(swhere + ": tensor '" + name + "' has " + std::to_string(ft.nbytes / elem) +
                                      " elements, expected " + std::to_string(count));
        copies.push_back({dst, ft.data, ft.nbytes});
      };
      if (s.bits == 32) {
        take(nullptr, "F32", s.values.data(), s.values.size(), 4);
      } else {
        take("codes", "U8", s.codes.data(), s.codes.size(), 1);
        take("absmax", "F32", s.absmax.data(), s.absmax.size(), 4);
      }
    }
  }
  // Everything matched: only now change the optimizer.
  for (const Copy& c : copies)
    if (c.nbytes) std::copy(c.src, c.src + c.nbytes, static_cast<std::uint8_t*>(c.dst));
  for (std::size_t i = 0; i < tensors_.size(); ++i) tensors_[i].step = steps[i];
  hp_ = hp;
  initial_accumulator_value_ = init_acc;
  global_step_ = global_step;
}

}  // namespace octopt
