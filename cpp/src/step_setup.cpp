// The stateless part of a step (step_setup.hpp): layout sizes, per-tensor scalar state, the StepConfig
// and scalars of a step, and optax's updates.
#include "octopt/step_setup.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "octopt/blockwise.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/numerics/hparam_array.hpp"
#include "octopt/optim_table.hpp"

namespace octopt {

SlotExtent slot_extent(int bits, std::int64_t n, int block_size) {
  if (bits != 32 && bits != 8 && bits != 4)
    throw std::invalid_argument("slot_extent: state bits must be 32, 8 or 4, got " + std::to_string(bits));
  SlotExtent e;
  if (bits == 32) {
    e.values = std::size_t(n);
    e.value_bytes = e.values * sizeof(float);
    return e;
  }
  e.values = std::size_t(num_code_bytes(n, bits));
  e.value_bytes = e.values;
  e.absmax = std::size_t(num_blocks(n, block_size));
  return e;
}

std::vector<TensorScalarDef> tensor_scalar_defs(OptimKind kind) {
  return visit_optim(kind, [](auto k) {
    const auto& defs = OptimRule<decltype(k)::value>::tensor_scalars;
    return std::vector<TensorScalarDef>(defs.begin(), defs.end());
  });
}

// StepTensor holds one per-tensor scalar (mu_product, the only one any definition declares so far)
namespace {

// v as the shortest of std::to_string's digits ("1.000000" -> "1", "0.500000" -> "0.5")
std::string short_number(float v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string tensor_scalar_range(OptimKind kind) {
  return visit_optim(kind, [](auto k) -> std::string {
    for (const TensorScalarDef& d : OptimRule<decltype(k)::value>::tensor_scalars)
      return "[" + short_number(d.lo) + ", " + short_number(d.hi) + "]";
    return std::string();
  });
}

std::string tensor_scalar_problem(OptimKind kind, double x) {
  return visit_optim(kind, [&](auto k) -> std::string {
    for (const TensorScalarDef& d : OptimRule<decltype(k)::value>::tensor_scalars)
      if (!(x >= double(d.lo) && x <= double(d.hi)))
        return std::string(d.name) + " must be in " + tensor_scalar_range(kind);
    return std::string();
  });
}

void load_tensor_scalars(OptimKind kind, const float* values, StepTensor* tensors, std::size_t n_tensors) {
  if (tensor_scalar_defs(kind).empty()) return;
  for (std::size_t t = 0; t < n_tensors; ++t) tensors[t].mu_product = values[t];
}

void store_tensor_scalars(OptimKind kind, const StepTensor* tensors, std::size_t n_tensors, float* values) {
  if (tensor_scalar_defs(kind).empty()) return;
  for (std::size_t t = 0; t < n_tensors; ++t) values[t] = tensors[t].mu_product;
}

StepSetup setup_step(OptimKind kind, const StepOptions& options, std::int64_t global_step, const HyperParams* hp,
                     std::int64_t tensor_step, const char* fn) {
  (void)optim_def(kind);  // throws for an unknown kind
  if (!(options.percentile >= 0.0f && options.percentile <= 100.0f))
    throw std::invalid_argument(std::string(fn) + ": 'percentile' must be in [0, 100], got " +
                                format_real(options.percentile));
  StepSetup s;
  s.cfg.kind = kind;
  s.cfg.codebooks = state_codebooks().data();
  s.cfg.num_codebooks = int(state_codebooks().size());
  s.cfg.seed = options.seed;
  s.cfg.step = global_step;
  s.cfg.stochastic_state = options.stochastic_state;
  s.cfg.stochastic_bf16 = options.stochastic_bf16;
  s.cfg.percentile = options.percentile;
  if (hp) {
    if (tensor_step < 1)
      throw std::invalid_argument(std::string(fn) + ": the step count must be >= 1, got " +
                                  std::to_string(tensor_step));
    s.scalars = scalars_for_step(kind, *hp, tensor_step);
  }
  return s;
}

HyperParams hparams_from_values(const double* values, long long flags, const char* fn) {
  for (std::size_t k = 0; k < kNumHyperParams; ++k)
    if (!std::isfinite(values[k]))
      throw std::invalid_argument(std::string(fn) + ": hyper-parameter '" + hparam_array_names()[k] +
                                  "' must be finite, got " + std::to_string(values[k]));
  return hparams_from_array(values, flags);
}

namespace {

template <DType D>
void to_updates(void* out, const void* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) update_from_params<D>(out, p, i);
}

}  // namespace

void params_to_updates(const StepTensor* tensors, const void* const* params_in, std::size_t n_tensors) {
  for (std::size_t t = 0; t < n_tensors; ++t) {
    const StepTensor& s = tensors[t];
    switch (s.param_dtype) {
      case DType::f32:
        to_updates<DType::f32>(s.param, params_in[t], s.n);
        break;
      case DType::f16:
        to_updates<DType::f16>(s.param, params_in[t], s.n);
        break;
      case DType::bf16:
        to_updates<DType::bf16>(s.param, params_in[t], s.n);
        break;
    }
  }
}

}  // namespace octopt
