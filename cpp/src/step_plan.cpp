// octopt::StepPlan: layout, state buffers, counters and stepping (files: step_plan_io.cpp).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "octopt/blockwise.hpp"
#include "octopt/runtime.hpp"
#include "state_placement.hpp"
#include "step_plan_impl.hpp"

namespace octopt {
namespace {

std::string where(int device) { return device < 0 ? "cpu" : "cuda:" + std::to_string(device); }

std::size_t elem_size(StateElem e) { return e == StateElem::f32 ? 4 : 1; }

// Aligned host memory, placed within the page where the plan asks (state_placement.hpp), and cudaMalloc.
class DefaultAllocator final : public StateAllocator {
 public:
  void* allocate(const StateRequest& r) override {
    const std::size_t bytes = r.count * elem_size(r.elem);
    if (bytes == 0) return nullptr;
    if (r.device >= 0) return cuda::device_malloc(bytes, r.device);
    void* p = r.page_offset == kNoPageOffset ? std::aligned_alloc(64, (bytes + 63) / 64 * 64)
                                             : placement::alloc_at_offset(bytes, r.page_offset);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p, const StateRequest& r) noexcept override {
    if (!p) return;
    if (r.device >= 0)
      cuda::device_free(p, r.device);
    else if (r.page_offset == kNoPageOffset)
      std::free(p);
    else
      placement::free_at_offset(p);
  }
};

}  // namespace

std::shared_ptr<StateAllocator> default_state_allocator() { return std::make_shared<DefaultAllocator>(); }

PlanBusy::PlanBusy(std::atomic<bool>& flag, const char* fn) : flag_(flag) {
  if (flag_.exchange(true))
    throw std::runtime_error(std::string(fn) + ": this optimizer is already being stepped by another thread");
}

// ---- Impl ---------------------------------------------------------------------------------------

StepPlan::Impl::~Impl() {
  device_plan.reset();
  for (Tensor& t : tensors)
    for (int k = 0; k < kMaxStateSlots; ++k) release(t.values[k]), release(t.absmax[k]);
}

StepPlan::Impl::Buffer StepPlan::Impl::allocate(StateRequest r, const void* param, std::vector<int>& taken) {
  r.device = device;
  r.page_offset = kNoPageOffset;
  if (device < 0 && r.count * elem_size(r.elem) >= placement::kMinBytes) {
    if (taken.empty()) taken.push_back(int(reinterpret_cast<std::uintptr_t>(param) % placement::kPage));
    r.page_offset = placement::farthest(taken);
    taken.push_back(r.page_offset);
  }
  Buffer b;
  b.request = r;
  b.ptr = allocator->allocate(r);
  if (!b.ptr && r.count) throw std::bad_alloc();
  return b;
}

void StepPlan::Impl::release(Buffer& b) noexcept {
  if (b.ptr || b.request.count) allocator->deallocate(b.ptr, b.request);
  b = Buffer{};
}

StepOptions StepPlan::Impl::step_options() const {
  StepOptions o;
  o.seed = options.seed;
  o.stochastic_state = options.stochastic_rounding > 0;
  o.stochastic_bf16 = options.stochastic_bf16;
  o.percentile = options.percentile;
  return o;
}

StepConfig StepPlan::Impl::config() const { return setup_step(kind, step_options(), global_step + 1).cfg; }

void StepPlan::Impl::fill_state(Tensor& t) {
  for (const SlotLayout& s : t.layout.slots) {
    const double init = slot_initial_value(kind, s.index, groups[std::size_t(t.group)].layout);
    Buffer& v = t.values[s.index];
    Buffer& a = t.absmax[s.index];
    std::vector<std::uint8_t> host;  // CUDA: the bytes to copy
    const auto put = [&](const Buffer& b, const void* bytes, std::size_t n) {
      if (!n) return;
      if (device >= 0)
        cuda::copy_to_device(b.ptr, bytes, n, device);
      else
        std::memcpy(b.ptr, bytes, n);
    };
    if (s.bits == 32) {
      std::vector<float> f(v.request.count, float(init));
      put(v, f.data(), f.size() * 4);
    } else {
      std::vector<std::uint8_t> codes(v.request.count, slot_initial_code(s.bits, s.is_signed, init, s.map));
      std::vector<float> am(a.request.count, float(init));
      put(v, codes.data(), codes.size());
      put(a, am.data(), am.size() * 4);
    }
  }
}

void StepPlan::Impl::build_device_plan(cudaStream_t stream, const char* fn) {
  // Building allocates, copies and synchronizes, none of which a graph capture allows: say what to do
  // before any of it fails with a raw CUDA error (or invalidates the capture).
  if (cuda::stream_capturing(stream))
    throw std::invalid_argument(std::string(fn) +
                                ": argument 'stream' is being captured into a CUDA graph, but the optimizer's "
                                "device tables must be built first (no eager step since it was created or its "
                                "tensors, groups or layout changed): take one eager step or call upload() "
                                "before capture");
  std::vector<std::int64_t> per(tensors.size(), 0);
  std::int64_t g = global_step;
  if (device_plan) {
    cuda::read_steps(*device_plan, per.data(), &g);
    // the device's running NAdam products carry over into the new plan through the step tensors
    std::vector<float> mu(device_plan->size());
    cuda::read_mu_products(*device_plan, mu.data());
    for (std::size_t i = 0; i < mu.size() && i < step_tensors.size(); ++i) step_tensors[i].mu_product = mu[i];
    per.resize(tensors.size(), 0);
  } else {
    for (std::size_t i = 0; i < tensors.size(); ++i) per[i] = i < pending_steps.size() ? pending_steps[i] : 0;
  }
  std::vector<int> gids;
  for (const Tensor& t : tensors) gids.push_back(t.group);
  device_plan.reset();
  device_plan = std::make_unique<cuda::DevicePlan>(config(), step_tensors.data(), step_tensors.size(), gids.data(),
                                                   int(groups.size()), device, "Optimizer");
  cuda::write_steps(*device_plan, per.data(), g);
  device_plan_stale = false;
}

cuda::StepArgs StepPlan::Impl::device_args(const void* const* grads, const DType* grad_dtypes,
                                           std::vector<HyperParams>& hps) const {
  hps.clear();
  for (const Group& g : groups) hps.push_back(g.hp);
  cuda::StepArgs a;
  a.grads = grads;
  a.grad_dtypes = grad_dtypes;
  a.hparams = hps.data();
  a.stochastic_state = options.stochastic_rounding > 0;
  a.stochastic_bf16 = options.stochastic_bf16;
  a.percentile = options.percentile;
  return a;
}

// ---- construction -------------------------------------------------------------------------------

StepPlan::StepPlan(OptimKind kind, const PlanOptions& options, std::shared_ptr<StateAllocator> allocator,
                   const char* fn)
    : impl_(std::make_unique<Impl>()) {
  (void)optim_def(kind);  // throws for an unknown kind
  if (!(options.percentile >= 0.0f && options.percentile <= 100.0f))
    throw std::invalid_argument(std::string(fn) + ": 'percentile' must be in [0, 100], got " +
                                format_real(options.percentile));
  if (options.stochastic_rounding < -1 || options.stochastic_rounding > 1)
    throw std::invalid_argument(std::string(fn) + ": 'stochastic_rounding' must be -1 (4-bit states), 0 or 1");
  if (!allocator) throw std::invalid_argument(std::string(fn) + ": argument 'allocator' is null");
  Impl& p = *impl_;
  p.kind = kind;
  p.options = options;
  p.allocator = std::move(allocator);
}

StepPlan::~StepPlan() = default;

OptimKind StepPlan::kind() const { return impl_->kind; }
const PlanOptions& StepPlan::options() const { return impl_->options; }

int StepPlan::add_group(const HyperParams& hp, const LayoutOptions& layout, const char* fn) {
  validate_hparams(impl_->kind, hp, fn);
  validate_layout(layout, fn);
  Impl::Group g;
  g.hp = hp;
  g.layout = layout;
  g.slots = used_slots(impl_->kind, hp);
  impl_->groups.push_back(g);
  impl_->device_plan_stale = true;
  return int(impl_->groups.size() - 1);
}

std::size_t StepPlan::num_groups() const { return impl_->groups.size(); }

static void check_group(const StepPlan::Impl& p, int group, const char* fn) {
  if (group < 0 || std::size_t(group) >= p.groups.size())
    throw std::out_of_range(std::string(fn) + ": argument 'group' is " + std::to_string(group) + " but there are " +
                            std::to_string(p.groups.size()) + " groups");
}

const HyperParams& StepPlan::hparams(int group) const {
  check_group(*impl_, group, "hparams");
  return impl_->groups[std::size_t(group)].hp;
}

const LayoutOptions& StepPlan::layout_options(int group) const {
  check_group(*impl_, group, "layout_options");
  return impl_->groups[std::size_t(group)].layout;
}

void StepPlan::set_hparams(int group, const HyperParams& hp, const char* fn) {
  check_group(*impl_, group, fn);
  validate_hparams(impl_->kind, hp, fn);
  Impl::Group& g = impl_->groups[std::size_t(group)];
  if (used_slots(impl_->kind, hp) != g.slots)
    throw std::invalid_argument(std::string(fn) + ": param group " + std::to_string(group) +
                                ": the new hyper-parameters (momentum, centered) need other state slots than the "
                                "group's state was laid out with");
  g.hp = hp;
  g.cached_step = 0;
}

std::size_t StepPlan::add_tensor(int group, void* data, DType dtype, const std::vector<std::int64_t>& shape, int device,
                                 const char* fn) {
  Impl& p = *impl_;
  check_group(p, group, fn);
  const std::string arg = "params[" + std::to_string(p.tensors.size()) + "]";
  std::int64_t n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' has a negative extent");
    n *= e;
  }
  if (!data && n > 0) throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' has a null address");
  if (!p.tensors.empty() && device != p.device)
    throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is on " + where(device) +
                                " but the optimizer's earlier parameters are on " + where(p.device));
  const std::size_t bytes = std::size_t(n) * dtype_size(dtype);
  const auto lo = reinterpret_cast<std::uintptr_t>(data);
  for (std::size_t j = 0; j < p.tensors.size(); ++j) {
    const Impl::Tensor& o = p.tensors[j];
    const auto olo = reinterpret_cast<std::uintptr_t>(o.data);
    const std::size_t obytes = std::size_t(o.numel) * dtype_size(o.dtype);
    if (bytes && obytes && lo < olo + obytes && olo < lo + bytes)
      throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' overlaps the memory of params[" +
                                  std::to_string(j) + "] (views of one array); pass each parameter once");
  }
  const Impl::Group& g = p.groups[std::size_t(group)];
  p.device = device;
  Impl::Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.numel = n;
  t.shape = shape;
  t.group = group;
  t.layout = layout_tensor(p.kind, g.hp, g.layout, n, p.options.stochastic_rounding);
  if (p.options.signed_maps)
    for (SlotLayout& s : t.layout.slots) s.is_signed = true;
  StepTensor st;
  st.param = data;
  st.param_dtype = dtype;
  st.n = n;
  st.block_size = t.layout.block_size;
  st.rng_stream = p.tensors.size();
  std::vector<int> taken;  // page offsets of the parameter and of its buffers placed so far
  try {
    for (const SlotLayout& s : t.layout.slots) {
      StateBuffer& b = st.state[s.index];
      b.bits = s.bits;
      b.stochastic = s.stochastic;
      StateRequest r;
      r.tensor = p.tensors.size();
      r.slot = s.index;
      const SlotExtent e = slot_extent(s.bits, n, s.block_size);
      if (s.bits == 32) {
        r.count = e.values;
        t.values[s.index] = p.allocate(r, data, taken);
        b.data = t.values[s.index].ptr;
      } else {
        r.count = e.values;
        r.elem = StateElem::u8;
        t.values[s.index] = p.allocate(r, data, taken);
        r.count = e.absmax;
        r.elem = StateElem::f32;
        r.buffer = StateBufferKind::absmax;
        t.absmax[s.index] = p.allocate(r, data, taken);
        b.data = t.values[s.index].ptr;
        b.absmax = static_cast<float*>(t.absmax[s.index].ptr);
        b.codebook = state_map_index(s.bits, s.is_signed, s.map);
      }
      // an empty tensor still marks its slots as used
      if (!b.data) b.data = this;
      if (s.bits != 32 && !b.absmax) b.absmax = reinterpret_cast<float*>(this);
    }
    p.fill_state(t);
  } catch (...) {
    for (int k = 0; k < kMaxStateSlots; ++k) p.release(t.values[k]), p.release(t.absmax[k]);
    throw;
  }
  const StepConfig cfg = p.config();
  validate_step(cfg, &st, 1, fn);
  p.tensors.push_back(std::move(t));
  p.step_tensors.push_back(st);
  p.device_plan_stale = true;
  return p.tensors.size() - 1;
}

std::size_t StepPlan::num_tensors() const { return impl_->tensors.size(); }
int StepPlan::device() const { return impl_->device; }

static const StepPlan::Impl::Tensor& tensor_at(const StepPlan::Impl& p, std::size_t i, const char* fn) {
  if (i >= p.tensors.size())
    throw std::out_of_range(std::string(fn) + ": argument 'i' is " + std::to_string(i) + " but there are " +
                            std::to_string(p.tensors.size()) + " parameters");
  return p.tensors[i];
}

int StepPlan::tensor_group(std::size_t i) const { return tensor_at(*impl_, i, "tensor_group").group; }
std::int64_t StepPlan::tensor_numel(std::size_t i) const { return tensor_at(*impl_, i, "tensor_numel").numel; }
const std::vector<std::int64_t>& StepPlan::tensor_shape(std::size_t i) const {
  return tensor_at(*impl_, i, "tensor_shape").shape;
}
DType StepPlan::tensor_dtype(std::size_t i) const { return tensor_at(*impl_, i, "tensor_dtype").dtype; }
void* StepPlan::tensor_data(std::size_t i) const { return tensor_at(*impl_, i, "tensor_data").data; }
int StepPlan::tensor_block_size(std::size_t i) const {
  return tensor_at(*impl_, i, "tensor_block_size").layout.block_size;
}

std::vector<StateBuffers> StepPlan::tensor_state(std::size_t i) const {
  const Impl::Tensor& t = tensor_at(*impl_, i, "tensor_state");
  std::vector<StateBuffers> out;
  for (const SlotLayout& s : t.layout.slots) {
    StateBuffers b;
    b.slot = s;
    b.data = t.values[s.index].ptr;
    b.count = t.values[s.index].request.count;
    b.absmax = static_cast<float*>(t.absmax[s.index].ptr);
    b.blocks = t.absmax[s.index].request.count;
    out.push_back(b);
  }
  return out;
}

std::size_t StepPlan::state_bytes() const {
  std::size_t total = 0;
  for (const Impl::Tensor& t : impl_->tensors)
    for (int k = 0; k < kMaxStateSlots; ++k)
      total += t.values[k].request.count * elem_size(t.values[k].request.elem) +
               t.absmax[k].request.count * elem_size(t.absmax[k].request.elem);
  return total;
}

// ---- stepping -----------------------------------------------------------------------------------

std::int64_t StepPlan::step(const void* const* grads, const DType* grad_dtypes, cudaStream_t stream, const char* fn) {
  Impl& p = *impl_;
  PlanBusy busy(p.busy, fn);
  const std::size_t n = p.tensors.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (!grads[i]) continue;
    const DType gd = grad_dtypes[i];
    if (gd != p.tensors[i].dtype && gd != DType::f32)
      throw std::invalid_argument(std::string(fn) + ": argument 'grads[" + std::to_string(i) +
                                  "]' must be float32 or the parameter's dtype (" + dtype_name(p.tensors[i].dtype) +
                                  ")");
  }
  if (p.device >= 0) {
    if (p.options.strict)
      throw std::invalid_argument(std::string(fn) +
                                  ": strict=True is not supported for CUDA parameters (it would "
                                  "synchronize the stream); read skipped_blocks instead");
    if (!p.device_plan || p.device_plan_stale) p.build_device_plan(stream, fn);
    std::vector<HyperParams> hps;
    const cuda::StepArgs a = p.device_args(grads, grad_dtypes, hps);
    cuda::step(*p.device_plan, a, stream);
    return -1;
  }
  const StepOptions options = p.step_options();
  for (std::size_t i = 0; i < n; ++i) {
    StepTensor& st = p.step_tensors[i];
    st.grad = grads[i];
    if (!st.grad) continue;
    st.grad_dtype = grad_dtypes[i];
    // the scalars depend on the group and the step count only: computed once per group and step
    Impl::Group& g = p.groups[std::size_t(p.tensors[i].group)];
    const std::int64_t t = p.tensors[i].step + 1;
    if (g.cached_step != t) {
      g.scalars = setup_step(p.kind, options, p.global_step + 1, &g.hp, t, fn).scalars;
      g.cached_step = t;
    }
    st.scalars = g.scalars;
  }
  const StepConfig cfg = p.config();
  StepResult r;
  try {
    if (p.options.strict) {
      const std::int64_t bad = count_nonfinite_blocks(p.step_tensors.data(), n);
      if (bad)
        throw std::invalid_argument(std::string(fn) + ": " + std::to_string(bad) +
                                    " block(s) of the gradients hold NaN or Inf (strict=True); nothing was changed");
    }
    r = octopt::step(cfg, p.step_tensors.data(), n, p.workspace);
  } catch (...) {
    for (StepTensor& st : p.step_tensors) st.grad = nullptr;
    throw;
  }
  p.global_step = cfg.step;
  for (std::size_t i = 0; i < n; ++i) {
    if (p.step_tensors[i].grad) ++p.tensors[i].step;
    p.step_tensors[i].grad = nullptr;
  }
  p.skipped_last = r.skipped_blocks;
  p.skipped_total += r.skipped_blocks;
  return r.skipped_blocks;
}

void StepPlan::upload(const void* const* grads, const DType* grad_dtypes, cudaStream_t stream, const char* fn) {
  Impl& p = *impl_;
  if (p.device < 0)
    throw std::invalid_argument(std::string(fn) + ": only CUDA optimizers hold their arguments on the device");
  PlanBusy busy(p.busy, fn);
  if (!p.device_plan || p.device_plan_stale) p.build_device_plan(stream, fn);
  std::vector<HyperParams> hps;
  cuda::upload(*p.device_plan, p.device_args(grads, grad_dtypes, hps), stream);
}

// ---- counters -----------------------------------------------------------------------------------

std::int64_t StepPlan::global_step() {
  Impl& p = *impl_;
  if (p.device >= 0 && p.device_plan) cuda::read_steps(*p.device_plan, nullptr, &p.global_step);
  return p.global_step;
}

void StepPlan::set_global_step(std::int64_t s) {
  Impl& p = *impl_;
  if (s < 0) throw std::invalid_argument("set_global_step: argument 'step' must be >= 0, got " + std::to_string(s));
  p.global_step = s;
  if (p.device >= 0 && p.device_plan) {
    std::vector<std::int64_t> per(p.tensors.size());
    cuda::read_steps(*p.device_plan, per.data(), nullptr);
    cuda::write_steps(*p.device_plan, per.data(), s);
  }
}

std::vector<std::int64_t> StepPlan::tensor_steps() {
  Impl& p = *impl_;
  std::vector<std::int64_t> per(p.tensors.size(), 0);
  if (p.device >= 0) {
    if (p.device_plan && !p.device_plan_stale)
      cuda::read_steps(*p.device_plan, per.data(), nullptr);
    else if (p.device_plan) {
      cuda::read_steps(*p.device_plan, per.data(), nullptr);
    } else
      for (std::size_t i = 0; i < per.size() && i < p.pending_steps.size(); ++i) per[i] = p.pending_steps[i];
    return per;
  }
  for (std::size_t i = 0; i < per.size(); ++i) per[i] = p.tensors[i].step;
  return per;
}

void StepPlan::set_tensor_steps(const std::vector<std::int64_t>& steps, const char* fn) {
  Impl& p = *impl_;
  if (steps.size() != p.tensors.size())
    throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(p.tensors.size()) +
                                " step counts (one per parameter), got " + std::to_string(steps.size()));
  for (std::int64_t s : steps)
    if (s < 0) throw std::invalid_argument(std::string(fn) + ": a step count is negative (" + std::to_string(s) + ")");
  for (std::size_t i = 0; i < steps.size(); ++i) p.tensors[i].step = steps[i];
  for (Impl::Group& g : p.groups) g.cached_step = 0;
  if (p.device >= 0) {
    if (p.device_plan)
      cuda::write_steps(*p.device_plan, steps.data(), global_step());
    else
      p.pending_steps = steps;
  }
}

std::vector<float> StepPlan::tensor_mu_products() {
  Impl& p = *impl_;
  std::vector<float> out;
  for (const StepTensor& st : p.step_tensors) out.push_back(st.mu_product);
  if (p.device >= 0 && p.device_plan && p.device_plan->size() == out.size())
    cuda::read_mu_products(*p.device_plan, out.data());
  return out;
}

void StepPlan::set_tensor_mu_products(const std::vector<float>& values, const char* fn) {
  Impl& p = *impl_;
  if (values.size() != p.tensors.size())
    throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(p.tensors.size()) +
                                " mu_product values (one per parameter), got " + std::to_string(values.size()));
  for (float v : values)
    if (!(v >= 0.0f && v <= 1.0f))
      throw std::invalid_argument(std::string(fn) + ": a mu_product is outside [0, 1] (" + format_real(v) + ")");
  for (std::size_t i = 0; i < values.size(); ++i) p.step_tensors[i].mu_product = values[i];
  if (p.device >= 0 && p.device_plan && p.device_plan->size() == values.size())
    cuda::write_mu_products(*p.device_plan, values.data());
}

std::int64_t StepPlan::skipped_blocks(bool last_step_only) {
  Impl& p = *impl_;
  if (p.device >= 0) return p.device_plan ? cuda::skipped_blocks(*p.device_plan, last_step_only) : 0;
  return last_step_only ? p.skipped_last : p.skipped_total;
}

std::vector<float> StepPlan::trust_ratios() {
  Impl& p = *impl_;
  if (p.device >= 0)
    return p.device_plan ? cuda::trust_ratios(*p.device_plan) : std::vector<float>(p.tensors.size(), 0.0f);
  std::vector<float> out;
  for (const StepTensor& st : p.step_tensors) out.push_back(st.scalars.trust);
  return out;
}

}  // namespace octopt
