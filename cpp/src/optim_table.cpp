// The optimizer table (optim_table.hpp): definitions, layout rules and validation.
#include "octopt/optim_table.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "octopt/qmap.hpp"

namespace octopt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

const std::vector<HParamDef>& hparam_defs() {
  using T = HParamType;
  static const std::vector<HParamDef> defs = {
      {HParam::lr, "lr", "lr", "learning_rate", T::real, 0.0, kInf, false, "learning rate"},
      {HParam::beta1, "beta1", "betas[0]", "b1", T::real, 0.0, 1.0, true, "first-moment (momentum) decay"},
      {HParam::beta2, "beta2", "betas[1]", "b2", T::real, 0.0, 1.0, true, "second-moment decay (Lion: the momentum's)"},
      {HParam::beta3, "beta3", "betas[2]", "b3", T::real, 0.0, 1.0, true, "AdEMAMix: the slow EMA's decay"},
      {HParam::eps, "eps", "eps", "eps", T::real, 0.0, kInf, false, "added to the denominator"},
      {HParam::weight_decay, "weight_decay", "weight_decay", "weight_decay", T::real, 0.0, kInf, false, "weight decay"},
      {HParam::momentum, "momentum", "momentum", "momentum", T::real, 0.0, kInf, false, "momentum factor"},
      {HParam::dampening, "dampening", "dampening", "dampening", T::real, 0.0, 1.0, false,
       "SGD: dampening of the momentum"},
      {HParam::nesterov, "nesterov", "nesterov", "nesterov", T::flag, 0.0, 1.0, false, "SGD: Nesterov momentum"},
      {HParam::alpha, "alpha", "alpha", "alpha", T::real, 0.0, kInf, false,
       "RMSprop: smoothing constant (in [0, 1)); AdEMAMix: mixing weight of the slow EMA"},
      {HParam::centered, "centered", "centered", "centered", T::flag, 0.0, 1.0, false, "RMSprop: centered variant"},
      {HParam::lr_decay, "lr_decay", "lr_decay", "lr_decay", T::real, 0.0, kInf, false, "Adagrad: learning-rate decay"},
      {HParam::eta, "eta", "eta", "eta", T::real, 0.0, kInf, false, "LARS: trust coefficient"},
      {HParam::t_alpha, "t_alpha", "t_alpha", "t_alpha", T::optional_real, 0.0, kInf, false,
       "AdEMAMix: alpha warm-up (steps)"},
      {HParam::t_beta3, "t_beta3", "t_beta3", "t_beta3", T::optional_real, 0.0, kInf, false,
       "AdEMAMix: beta3 warm-up (steps)"},
      {HParam::bias_correction, "bias_correction", "bias_correction", "bias_correction", T::flag, 0.0, 1.0, false,
       "LAMB: Adam's bias corrections"},
      {HParam::maximize, "maximize", "maximize", "maximize", T::flag, 0.0, 1.0, false, "maximize the objective"},
      {HParam::decoupled_weight_decay, "decoupled_weight_decay", "decoupled_weight_decay", "decoupled_weight_decay",
       T::flag, 0.0, 1.0, false, "RAdam/NAdam: AdamW-style weight decay"},
      {HParam::momentum_decay, "momentum_decay", "momentum_decay", "momentum_decay", T::real, 0.0, kInf, false,
       "NAdam: momentum decay psi"},
      {HParam::eps_in_sqrt, "eps_in_sqrt", "eps_in_sqrt", "eps_in_sqrt", T::flag, 0.0, 1.0, false,
       "RMSprop: eps inside the square root, sqrt(v + eps) (optax's default)"},
      {HParam::no_prox, "no_prox", "no_prox", "no_prox", T::flag, 0.0, 1.0, false,
       "Adan: weight decay as p (1 - lr wd) before the step instead of the proximal (p - lr u) / (1 + lr wd)"},
  };
  return defs;
}

const HParamDef& hparam_def(HParam id) { return hparam_defs()[std::size_t(id)]; }

std::vector<std::string> hparam_array_names() {
  std::vector<std::string> out;
  for (const HParamDef& d : hparam_defs())
    if (!hparam_is_flag(d.id)) out.push_back(d.optax_key);
  return out;
}

std::vector<std::string> hparam_flag_names() {
  std::vector<std::string> out;
  for (const HParamDef& d : hparam_defs())
    if (hparam_is_flag(d.id)) out.push_back(d.key);
  return out;
}

namespace {

// The table entry of K, from its definition (numerics/rules/<name>.hpp).
template <OptimKind K>
OptimDef def_of() {
  using R = OptimRule<K>;
  OptimDef d{K, R::name, R::class_name, R::summary, {}, {}, R::num_betas, HyperParams{}, 0.0};
  for (const SlotSpec& s : R::slots)
    d.slots.push_back({s.name, s.is_signed, s.first_moment, s.init == SlotInit::initial_accumulator});
  d.options.assign(R::options.begin(), R::options.end());
  for (const HParamValue& v : R::defaults) set_hparam(d.defaults, v.id, v.value);
  d.direction_step = R::direction_step;
  return d;
}

}  // namespace

const std::vector<OptimDef>& optim_defs() {
  static const std::vector<OptimDef> defs = [] {
    std::vector<OptimDef> d;
#define OCTOPT_TABLE_ENTRY(name) d.push_back(def_of<OptimKind::name>());
    OCTOPT_OPTIMIZERS(OCTOPT_TABLE_ENTRY)
#undef OCTOPT_TABLE_ENTRY
    return d;
  }();
  return defs;
}

const OptimDef& optim_def(OptimKind kind) {
  for (const OptimDef& d : optim_defs())
    if (d.kind == kind) return d;
  throw std::invalid_argument("optim_def: unknown optimizer kind " + std::to_string(int(kind)));
}

const OptimDef& optim_def(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const OptimDef& d : optim_defs())
    if (lower == d.name) return d;
  throw std::invalid_argument("unknown optimizer '" + name + "'");
}

bool optim_takes(const OptimDef& def, const char* key) {
  for (const char* k : def.options)
    if (std::strcmp(k, key) == 0) return true;
  return false;
}

// ---- layout -------------------------------------------------------------------------------------

const char* state_map_key(StateMap map) { return map == StateMap::fp8 ? "fp8" : "dynamic"; }

StateMap parse_state_map(const std::string& key, const char* fn) {
  for (int m = 0; m < kNumStateMapKinds; ++m)
    if (key == state_map_key(StateMap(m))) return StateMap(m);
  throw std::invalid_argument(std::string(fn) + ": 'state_map' must be 'dynamic' or 'fp8', got '" + key + "'");
}

const char* state_map_name(int bits, bool is_signed, StateMap map) {
  if (bits == 32) return "float32";
  if (map == StateMap::fp8) return "fp8_e4m3";
  if (bits == 8) return is_signed ? "dynamic_signed_8" : "dynamic_unsigned_8";
  return is_signed ? "dynamic_signed_4" : "log2_step0.8_nozero_4";
}

std::vector<float> state_map_values(int bits, bool is_signed, StateMap map) {
  if (bits != 8 && bits != 4)
    throw std::invalid_argument("state_map_values: argument 'bits' must be 8 or 4, got " + std::to_string(bits));
  if (map == StateMap::fp8) {
    if (bits != 8) throw std::invalid_argument("state_map_values: the fp8 map has 8 bits, got bits=4");
    return fp8_map();  // signed and unsigned slots share its values
  }
  if (bits == 8) return dynamic_map(is_signed, 7, 8);
  return is_signed ? dynamic_map(true, 3, 4) : log2_map_nozero(4, 0.8);
}

const std::vector<Codebook>& state_codebooks() {
  static const std::vector<Codebook> books = [] {
    std::vector<Codebook> b(kNumStateMaps);
    for (int m = 0; m < kNumStateMapKinds; ++m)
      for (int bits : {8, 4}) {
        if (StateMap(m) == StateMap::fp8 && bits == 4) continue;
        for (bool is_signed : {true, false}) {
          const std::vector<float> q = state_map_values(bits, is_signed, StateMap(m));
          Codebook& cb = b[std::size_t(state_map_index(bits, is_signed, StateMap(m)))];
          cb = make_codebook(q.data(), std::int64_t(q.size()), bits, "state_codebooks", "qmap");
          // unsigned (second-moment) states never round a positive value to zero (docs/numerics.md)
          if (!is_signed) keep_nonzero(cb);
        }
      }
    return b;
  }();
  return books;
}

std::vector<int> used_slots(OptimKind kind, const HyperParams& hp) {
  std::vector<int> s;
  for (int k = 0; k < optim_state_slots(kind); ++k)
    if (state_slot_used(kind, k, hp.momentum, hp.centered)) s.push_back(k);
  return s;
}

TensorLayout layout_tensor(OptimKind kind, const HyperParams& hp, const LayoutOptions& lo, std::int64_t numel,
                           int stochastic_rounding) {
  // small tensors keep 32-bit state: their quantization overhead outweighs the saving
  const int bits = numel < lo.min_8bit_size ? 32 : lo.bits;
  TensorLayout t;
  t.block_size = lo.block_size ? lo.block_size : default_block_size(bits);
  const OptimDef& def = optim_def(kind);
  for (int k : used_slots(kind, hp)) {
    const SlotDef& s = def.slots[std::size_t(k)];
    int b = bits;
    if (s.first_moment && bits != 32 && lo.first_moment_bits != 0) b = lo.first_moment_bits;
    // 4-bit codes round stochastically unless told otherwise: with 16 levels the bias of nearest
    // rounding accumulates over steps (docs/decisions.md)
    const bool stochastic = b != 32 && (stochastic_rounding < 0 ? b == 4 : stochastic_rounding > 0);
    t.slots.push_back({k, s.name, s.is_signed, b, t.block_size, stochastic, b == 8 ? lo.state_map : StateMap::dynamic});
  }
  return t;
}

double slot_initial_value(OptimKind kind, int slot, const LayoutOptions& lo) {
  const SlotSpec* s = state_slot_spec(kind, slot);
  return s && s->init == SlotInit::initial_accumulator ? lo.initial_accumulator_value : 0.0;
}

std::uint8_t slot_initial_code(int bits, bool is_signed, double init, StateMap map) {
  // absmax = |init| and the code nearest to sign(init): a constant block decodes to init exactly
  const std::vector<float> q = state_map_values(bits, is_signed, map);
  const double target = init > 0 ? 1.0 : 0.0;
  int code = 0;
  for (int c = 1; c < int(q.size()); ++c)
    if (std::fabs(double(q[std::size_t(c)]) - target) < std::fabs(double(q[std::size_t(code)]) - target)) code = c;
  if (bits == 4) code |= code << 4;
  return std::uint8_t(code);
}

// ---- validation ---------------------------------------------------------------------------------

std::string format_real(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // [-]d[.ddd]e(+|-)xx, the shortest digits that round-trip
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const std::size_t e = s.find('e');
  const int exp10 = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp10 < -4 || exp10 >= 16) {  // Python's repr switches to scientific notation here
    std::string m = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    const int a = exp10 < 0 ? -exp10 : exp10;
    return sign + m + "e" + (exp10 < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  }
  std::string out;
  if (exp10 < 0) {
    out = "0." + std::string(std::size_t(-exp10 - 1), '0') + digits;
  } else if (std::size_t(exp10 + 1) >= digits.size()) {
    out = digits + std::string(std::size_t(exp10 + 1) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, std::size_t(exp10 + 1)) + "." + digits.substr(std::size_t(exp10 + 1));
  }
  return sign + out;
}

namespace {

// `who`: the optimizer whose own bound this is ("" for the shared range), named in the message with the bounds
// as written in its definition ([0, 1) rather than [0.0, 1.0))
void check_range(double x, const HParamDef& d, double lo, double hi, bool hi_open, const std::string& who,
                 const char* fn) {
  const std::string pre = std::string(fn) + ": '" + d.key + "' must be ";
  if (!std::isfinite(x) && who.empty()) throw std::invalid_argument(pre + "finite, got " + format_real(x));
  if (!std::isfinite(x) || x < lo || (hi_open ? x >= hi : x > hi)) {
    const auto num = [&](double v) {
      std::string t = format_real(v);
      if (!who.empty() && t.size() > 2 && t.compare(t.size() - 2, 2, ".0") == 0) t.resize(t.size() - 2);
      return t;
    };
    const std::string bound = std::isinf(hi) ? ">= " + num(lo) : "[" + num(lo) + ", " + num(hi) + (hi_open ? ")" : "]");
    throw std::invalid_argument(pre + "in " + bound + (who.empty() ? "" : " for " + who) + ", got " + format_real(x));
  }
}

}  // namespace

void validate_hparams(OptimKind kind, const HyperParams& hp, const char* fn) {
  for (const HParamDef& d : hparam_defs()) {
    if (d.type == HParamType::flag) continue;
    const double x = get_hparam(hp, d.id);
    if (d.type == HParamType::optional_real && x == 0.0) continue;
    // an optimizer may narrow a shared hyper-parameter's range (RMSprop's alpha: [0, 1))
    double lo = d.lo, hi = d.hi;
    bool hi_open = d.hi_open;
    std::string who;
    visit_optim(kind, [&](auto k) {
      using R = OptimRule<decltype(k)::value>;
      for (const HParamBound& b : R::bounds)
        if (b.id == d.id) lo = b.lo, hi = b.hi, hi_open = b.hi_open, who = R::class_name;
    });
    check_range(x, d, lo, hi, hi_open, who, fn);
  }
  if (hp.nesterov && (hp.momentum <= 0 || hp.dampening != 0))
    throw std::invalid_argument(std::string(fn) + ": Nesterov momentum requires momentum > 0 and zero dampening");
}

void validate_layout(const LayoutOptions& lo, const char* fn) {
  const std::string f(fn);
  if (lo.bits != 32 && lo.bits != 8 && lo.bits != 4)
    throw std::invalid_argument(f + ": 'bits' must be 32, 8 or 4, got " + std::to_string(lo.bits));
  if (lo.first_moment_bits != 0 && lo.first_moment_bits != 32 && lo.first_moment_bits != 8 && lo.first_moment_bits != 4)
    throw std::invalid_argument(f + ": 'first_moment_bits' must be None, 32, 8 or 4, got " +
                                std::to_string(lo.first_moment_bits));
  if (int(lo.state_map) >= kNumStateMapKinds)  // an enum value cast from outside the list
    throw std::invalid_argument(f + ": 'state_map' must be 'dynamic' or 'fp8', got value " +
                                std::to_string(int(lo.state_map)));
  if (lo.state_map == StateMap::fp8 && (lo.bits == 4 || lo.first_moment_bits == 4))
    throw std::invalid_argument(f + ": 'state_map' 'fp8' is an 8-bit map, but '" +
                                (lo.bits == 4 ? "bits" : "first_moment_bits") + "' is 4");
  const int bs = lo.block_size;
  if (bs != 0 && (bs < kMinBlockSize || bs > kMaxBlockSize || (bs & (bs - 1))))
    throw std::invalid_argument(f + ": 'block_size' must be a power of two in [" + std::to_string(kMinBlockSize) +
                                ", " + std::to_string(kMaxBlockSize) + "], got " + std::to_string(bs));
  if (lo.min_8bit_size < 0)
    throw std::invalid_argument(f + ": 'min_8bit_size' must be an int >= 0, got " + std::to_string(lo.min_8bit_size));
  const double v = lo.initial_accumulator_value;
  if (!std::isfinite(v))
    throw std::invalid_argument(f + ": 'initial_accumulator_value' must be finite, got " + format_real(v));
  if (v < 0.0)
    throw std::invalid_argument(f + ": 'initial_accumulator_value' must be in >= 0.0, got " + format_real(v));
}

}  // namespace octopt
