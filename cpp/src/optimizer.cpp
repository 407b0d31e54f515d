// octopt::Optimizer: the C++ front end over StepPlan (state, layout, counters and files are the plan's).
#include "octopt/optimizer.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "octopt/optim_table.hpp"

namespace octopt {

namespace {

// An optimizer whose step writes a direction (Muon: its momentum step, to be orthogonalized and applied with
// muon_apply) would write that direction into the parameter: Optimizer refuses it.
OptimKind stepping_kind(OptimKind kind, const char* fn) {
  const OptimDef& def = optim_def(kind);
  if (def.direction_step)
    throw std::invalid_argument(std::string(fn) + ": argument 'kind' is " + def.name +
                                ", whose step writes a direction rather than the parameter: step it with a StepPlan "
                                "into a direction buffer, orthogonalize, then octopt::muon_apply (docs/muon.md)");
  return kind;
}

}  // namespace

Optimizer::Optimizer(OptimKind kind, HyperParams hp, int bits, int block_size, std::int64_t min_8bit_size,
                     std::uint64_t seed) {
  constexpr const char* fn = "Optimizer";
  (void)stepping_kind(kind, fn);
  LayoutOptions lo;
  lo.bits = bits;
  lo.block_size = block_size;
  lo.min_8bit_size = min_8bit_size;
  validate_layout(lo, fn);
  validate_hparams(kind, hp, fn);
  PlanOptions o;
  o.seed = seed;
  plan_ = std::make_unique<StepPlan>(kind, o, default_state_allocator(), fn);
  hparams_.push_back(hp);
  layouts_.push_back(lo);
}

Optimizer::Optimizer(OptimKind kind, const PlanOptions& options, std::shared_ptr<StateAllocator> allocator)
    : plan_(std::make_unique<StepPlan>(stepping_kind(kind, "Optimizer"), options, std::move(allocator), "Optimizer")) {}

int Optimizer::add_group(const HyperParams& hp, const LayoutOptions& layout) {
  // groups are made in order: the constructor's group 0 first
  while (created_groups_ < int(hparams_.size())) {
    plan_->add_group(hparams_[std::size_t(created_groups_)], layouts_[std::size_t(created_groups_)], "add_group");
    ++created_groups_;
  }
  const int g = plan_->add_group(hp, layout, "add_group");
  hparams_.push_back(hp);
  layouts_.push_back(layout);
  created_groups_ = g + 1;
  return g;
}

void Optimizer::set_initial_accumulator_value(double value) {
  if (hparams_.empty() || created_groups_ > 0)
    throw std::logic_error("set_initial_accumulator_value: call it before the first add_param");
  LayoutOptions lo = layouts_[0];
  lo.initial_accumulator_value = value;
  validate_layout(lo, "set_initial_accumulator_value");
  layouts_[0] = lo;
}

std::size_t Optimizer::add_param(float* data, std::int64_t n, std::vector<std::int64_t> shape) {
  const std::string where = "add_param: parameter " + std::to_string(num_params());
  if (n < 0) throw std::invalid_argument(where + ": argument 'n' must be >= 0, got " + std::to_string(n));
  if (shape.empty()) shape = {n};
  std::int64_t prod = 1;
  for (std::int64_t e : shape) prod *= e;
  if (prod != n)
    throw std::invalid_argument(where + ": argument 'shape' holds " + std::to_string(prod) + " elements but 'n' is " +
                                std::to_string(n));
  return add_param(0, data, DType::f32, std::move(shape), -1);
}

std::size_t Optimizer::add_param(int group, void* data, DType dtype, std::vector<std::int64_t> shape, int device) {
  while (created_groups_ <= group && created_groups_ < int(hparams_.size())) {
    plan_->add_group(hparams_[std::size_t(created_groups_)], layouts_[std::size_t(created_groups_)], "add_param");
    ++created_groups_;
  }
  return plan_->add_tensor(group, data, dtype, shape, device, "add_param");
}

void Optimizer::sync_hparams() {
  for (int g = 0; g < created_groups_; ++g) {
    const HyperParams& mine = hparams_[std::size_t(g)];
    const HyperParams& theirs = plan_->hparams(g);
    bool same = true;
    for (int k = 0; same && k < kNumHParams; ++k) same = get_hparam(mine, HParam(k)) == get_hparam(theirs, HParam(k));
    if (!same) plan_->set_hparams(g, mine, "step");
  }
}

std::int64_t Optimizer::step(const std::vector<const float*>& grads) {
  const std::size_t n = num_params();
  if (grads.size() != n)
    throw std::invalid_argument("step: argument 'grads' has " + std::to_string(grads.size()) +
                                " entries but the optimizer has " + std::to_string(n) + " parameters");
  ptrs_.assign(grads.begin(), grads.end());
  dtypes_.assign(n, DType::f32);
  for (std::size_t i = 0; i < n; ++i)
    if (ptrs_[i] && ptrs_[i] == plan_->tensor_data(i) && plan_->tensor_numel(i) > 0)
      throw std::invalid_argument("step: argument 'grads[" + std::to_string(i) + "]' is the parameter itself");
  sync_hparams();
  return plan_->step(ptrs_.data(), dtypes_.data(), nullptr, "step");
}

std::int64_t Optimizer::step(const std::vector<const void*>& grads, const std::vector<DType>& grad_dtypes,
                             cudaStream_t stream) {
  const std::size_t n = num_params();
  if (grads.size() != n || grad_dtypes.size() != n)
    throw std::invalid_argument("step: arguments 'grads' and 'grad_dtypes' must have one entry per parameter (" +
                                std::to_string(n) + ")");
  sync_hparams();
  return plan_->step(grads.data(), grad_dtypes.data(), stream, "step");
}

void Optimizer::save(const std::string& path) {
  sync_hparams();  // the file holds the values a program set since the last step too
  plan_->save(path);
}

void Optimizer::load(const std::string& path) {
  plan_->load(path);
  for (int g = 0; g < created_groups_; ++g) hparams_[std::size_t(g)] = plan_->hparams(g);
}

std::size_t Optimizer::state_bytes() const { return plan_->state_bytes(); }
OptimKind Optimizer::kind() const { return plan_->kind(); }

const HyperParams& Optimizer::hparams(int group) const {
  if (group < 0 || std::size_t(group) >= hparams_.size())
    throw std::out_of_range("hparams: argument 'group' is " + std::to_string(group) + " but there are " +
                            std::to_string(hparams_.size()) + " groups");
  return hparams_[std::size_t(group)];
}

HyperParams& Optimizer::hparams(int group) {
  return const_cast<HyperParams&>(static_cast<const Optimizer&>(*this).hparams(group));
}

std::size_t Optimizer::num_params() const { return plan_->num_tensors(); }
std::int64_t Optimizer::global_step() { return plan_->global_step(); }

std::int64_t Optimizer::param_step(std::size_t i) {
  if (i >= num_params())
    throw std::out_of_range("param_step: argument 'i' is " + std::to_string(i) + " but there are " +
                            std::to_string(num_params()) + " parameters");
  return plan_->tensor_steps()[i];
}

std::vector<int> Optimizer::state_bits(std::size_t i) const {
  if (i >= num_params())
    throw std::out_of_range("state_bits: argument 'i' is " + std::to_string(i) + " but there are " +
                            std::to_string(num_params()) + " parameters");
  std::vector<int> out;
  for (const StateBuffers& b : plan_->tensor_state(i)) out.push_back(b.slot.bits);
  return out;
}

}  // namespace octopt
