// Operand reading shared by the CPU and CUDA step handlers (ffi_operands.hpp).
#include "ffi_operands.hpp"

#include <optional>

#include "ffi_step.hpp"
#include "octopt/optim_table.hpp"

namespace octopt_ffi {

namespace {

// slot descriptions per tensor in the attributes (octopt.optax passes MAX_STATE_SLOTS of them)
constexpr std::size_t kSlots = std::size_t(octopt::kMaxStateSlots);

bool float_dtype(ffi::DataType t, octopt::DType* out) {
  switch (t) {
    case ffi::DataType::F32:
      *out = octopt::DType::f32;
      return true;
    case ffi::DataType::F16:
      *out = octopt::DType::f16;
      return true;
    case ffi::DataType::BF16:
      *out = octopt::DType::bf16;
      return true;
    default:
      return false;
  }
}

// The buffers of the tensors, taken from the variadic operands and results in order.
class Buffers {
 public:
  Buffers(const ffi::RemainingArgs& in, const ffi::RemainingRets& out) : in_(in), out_(out) {}
  std::optional<ffi::AnyBuffer> operand() {
    auto a = in_.get<ffi::AnyBuffer>(i_++);
    if (!a.has_value()) return std::nullopt;
    return *a;
  }
  std::optional<ffi::AnyBuffer> result() {
    auto r = out_.get<ffi::AnyBuffer>(o_++);
    if (!r.has_value()) return std::nullopt;
    return **r;
  }
  bool all_used() const { return i_ == in_.size() && o_ == out_.size(); }

 private:
  const ffi::RemainingArgs& in_;
  const ffi::RemainingRets& out_;
  std::size_t i_ = 0, o_ = 0;
};

std::string tensor(std::size_t t) { return "tensor " + std::to_string(t) + ": "; }

// Records the copy of an operand into its result unless XLA aliased the two.
void copy_into(const ffi::AnyBuffer& src, ffi::AnyBuffer& dst, std::vector<Copy>& copies) {
  if (src.untyped_data() != dst.untyped_data())
    copies.push_back({src.untyped_data(), dst.untyped_data(), src.size_bytes()});
}

// Fills one slot from the next buffers.
ffi::Error take_tensor(Buffers& bufs, const Attrs& a, std::size_t t, octopt::StepTensor& slot, const void** param_in,
                       std::vector<Copy>& copies) {
  auto param = bufs.operand();
  auto out = bufs.result();
  auto grad = bufs.operand();
  if (!param || !out || !grad) return bad("internal: missing buffers");
  octopt::DType pd, gd;
  if (!float_dtype(param->element_type(), &pd))
    return bad(tensor(t) + "the parameter must be float32, float16 or bfloat16");
  if (!float_dtype(grad->element_type(), &gd) || (gd != pd && gd != octopt::DType::f32))
    return bad(tensor(t) + "the gradient must be float32 or the parameter's dtype");
  const std::int64_t n = std::int64_t(param->element_count());
  if (std::int64_t(grad->element_count()) != n) return bad(tensor(t) + "the gradient and the parameter differ in size");
  if (out->element_type() != param->element_type() || std::int64_t(out->element_count()) != n)
    return bad("internal: the result does not match the parameter");
  const std::int64_t block_size = a.block_sizes[t];
  slot.param = out->untyped_data();
  slot.param_dtype = pd;
  slot.grad = grad->untyped_data();
  slot.grad_dtype = gd;
  slot.n = n;
  slot.block_size = int(block_size);
  slot.rng_stream = std::uint64_t(a.rng_streams[t]);
  if (block_size < 1) return bad("internal: block sizes must be positive");
  for (std::size_t k = 0; k < kSlots; ++k) {
    const int bits = int(a.slot_bits[kSlots * t + k]);
    if (bits == 0) continue;
    if (bits != 32 && bits != 8 && bits != 4) return bad("internal: state bits must be 32, 8 or 4");
    auto din = bufs.operand();
    auto dout = bufs.result();
    if (!din || !dout) return bad("internal: missing state buffer");
    const octopt::SlotExtent extent = octopt::slot_extent(bits, n, int(block_size));
    const std::size_t want = extent.value_bytes;
    const std::int64_t blocks = std::int64_t(extent.absmax);
    const ffi::DataType wt = bits == 32 ? ffi::DataType::F32 : ffi::DataType::U8;
    if (din->element_type() != wt || din->size_bytes() != want || dout->size_bytes() != want)
      return bad(tensor(t) + "state slot " + std::to_string(k) + " does not match the parameter (expected " +
                 std::to_string(want) + " bytes of " + (bits == 32 ? "float32" : "uint8") + ")");
    copy_into(*din, *dout, copies);
    octopt::StateBuffer& st = slot.state[k];
    st.bits = bits;
    st.data = dout->untyped_data();
    st.stochastic = a.slot_stochastic[kSlots * t + k] != 0;
    if (bits == 32) continue;
    // the slot's map, by octopt::state_map_index (set by octopt.optax from the layout)
    const std::int64_t cb = a.slot_codebooks[kSlots * t + k];
    if (cb < 0 || cb >= octopt::kNumStateMaps || octopt::state_codebooks()[std::size_t(cb)].size != (1 << bits))
      return bad("internal: state slot " + std::to_string(k) + " has codebook " + std::to_string(cb) +
                 ", which is no map of " + std::to_string(bits) + "-bit state");
    st.codebook = int(cb);
    auto ain = bufs.operand();
    auto aout = bufs.result();
    if (!ain || !aout) return bad("internal: missing absmax buffer");
    if (ain->element_type() != ffi::DataType::F32 || std::int64_t(ain->element_count()) != blocks ||
        std::int64_t(aout->element_count()) != blocks)
      return bad(tensor(t) + "the absmax of state slot " + std::to_string(k) + " must hold " + std::to_string(blocks) +
                 " float32 values (one per block of " + std::to_string(block_size) + ")");
    copy_into(*ain, *aout, copies);
    st.absmax = static_cast<float*>(aout->untyped_data());
  }
  copy_into(*param, *out, copies);
  *param_in = param->untyped_data();
  return ffi::Error::Success();
}

}  // namespace

ffi::Error bad(const std::string& what) { return ffi::Error::InvalidArgument(std::string(kFn) + ": " + what); }

ffi::Error check_attrs(const Attrs& a, std::size_t n_hp_dynamic) {
  const std::size_t n_tensors = a.block_sizes.size();
  if (a.kind < 0 || a.kind >= octopt::kNumOptimKinds) return bad("internal: unknown optimizer kind");
  if (a.mode != kUpdates && a.mode != kParams) return bad("internal: unknown mode");
  if (n_hp_dynamic != kNumHyperParams || a.hp_static.size() != kNumHyperParams)
    return bad("internal: expected " + std::to_string(kNumHyperParams) + " hyper-parameters");
  if (a.slot_bits.size() != kSlots * n_tensors || a.slot_stochastic.size() != kSlots * n_tensors ||
      a.slot_codebooks.size() != kSlots * n_tensors || a.rng_streams.size() != n_tensors)
    return bad("internal: expected " + std::to_string(kSlots) + " state slot descriptions per tensor");
  return ffi::Error::Success();
}

ffi::Error take_tensors(const ffi::AnyBuffer& scalars_in, ffi::AnyBuffer scalars_out, const ffi::RemainingArgs& in,
                        const ffi::RemainingRets& res, const Attrs& a, Tensors& out) {
  const std::size_t n_tensors = a.block_sizes.size();
  out.steps.assign(n_tensors, octopt::StepTensor{});
  out.params_in.assign(n_tensors, nullptr);
  out.copies.clear();
  const std::size_t n_scalars = n_tensors * octopt::tensor_scalar_defs(octopt::OptimKind(a.kind)).size();
  if (scalars_in.element_type() != ffi::DataType::F32 || scalars_in.element_count() != n_scalars ||
      scalars_out.element_type() != ffi::DataType::F32 || scalars_out.element_count() != n_scalars)
    return bad("internal: 'tensor_scalars' must hold " + std::to_string(n_scalars) +
               " float32 values (the per-tensor scalar state of every tensor)");
  copy_into(scalars_in, scalars_out, out.copies);
  out.scalars = static_cast<float*>(scalars_out.untyped_data());
  Buffers bufs(in, res);
  for (std::size_t t = 0; t < n_tensors; ++t) {
    ffi::Error e = take_tensor(bufs, a, t, out.steps[t], &out.params_in[t], out.copies);
    if (!e.success()) return e;
  }
  if (!bufs.all_used()) return bad("internal: more buffers than the tensors' descriptions use");
  return ffi::Error::Success();
}

octopt::StepOptions step_options(const Attrs& a) {
  octopt::StepOptions o;
  o.seed = std::uint64_t(a.seed);
  o.stochastic_state = (a.flags & octopt::kHpStochasticState) != 0;
  o.stochastic_bf16 = (a.flags & octopt::kHpStochasticBf16) != 0;
  return o;
}

}  // namespace octopt_ffi
