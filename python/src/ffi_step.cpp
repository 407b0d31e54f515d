// XLA FFI handler: one optimizer step of every tensor of a call in one octopt::step (one parallel
// region), built against the headers jaxlib ships (jax.ffi.include_dir()); nothing links against
// jaxlib.
//
// Operands: hp_dynamic (f32[kNumHyperParams]), step (s32[], the step being taken, 1-based), then per
// tensor: param, grad, and per used state slot its data (f32 values or u8 codes) and, when quantized,
// its absmax. Results per tensor: the param-dtype tensor (updates p_new - p, or p_new), then its new
// state in operand order. Results may alias their operands (input_output_aliases); when they do not,
// the operands are copied first, so the handler never writes an operand.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "ffi_step.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/optim.hpp"
#include "octopt/qmap.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr const char* kFn = "octopt.optax";

// The codebooks octopt.Optimizer registers, in _layout.CODEBOOKS order: (8, signed), (8, unsigned),
// (4, signed), (4, unsigned); unsigned ones never round a positive value to zero.
const std::vector<octopt::Codebook>& codebooks() {
  static const std::vector<octopt::Codebook> books = [] {
    std::vector<octopt::Codebook> b;
    b.push_back(octopt::make_codebook(octopt::dynamic_map(true, 7, 8), 8));
    b.push_back(octopt::make_codebook(octopt::dynamic_map(false, 7, 8), 8));
    b.push_back(octopt::make_codebook(octopt::dynamic_map(true, 3, 4), 4));
    b.push_back(octopt::make_codebook(octopt::log2_map_nozero(4, 0.8), 4));
    octopt::keep_nonzero(b[1]);
    octopt::keep_nonzero(b[3]);
    return b;
  }();
  return books;
}

int codebook_index(int bits, bool is_signed) { return (bits == 8 ? 0 : 2) + (is_signed ? 0 : 1); }

bool float_dtype(ffi::DataType t, octopt::DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = octopt::DType::f32; return true;
    case ffi::DataType::F16: *out = octopt::DType::f16; return true;
    case ffi::DataType::BF16: *out = octopt::DType::bf16; return true;
    default: return false;
  }
}

ffi::Error bad(const std::string& what) { return ffi::Error::InvalidArgument(std::string(kFn) + ": " + what); }

// Copies an operand into its result unless XLA aliased the two.
void copy_into(const ffi::AnyBuffer& src, ffi::AnyBuffer& dst) {
  if (src.untyped_data() != dst.untyped_data()) std::memcpy(dst.untyped_data(), src.untyped_data(), src.size_bytes());
}

// updates = p_new - p, evaluated in float32 and rounded once to the parameter's dtype: exact
// whenever p_new and p are within a factor of two of each other (Sterbenz), see docs/jax.md.
template <octopt::DType D>
void subtract(void* out, const void* p, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    octopt::store_f32<D>(out, i, octopt::load_f32<D>(out, i) - octopt::load_f32<D>(p, i));
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

struct Attrs {
  std::int64_t kind, mode;
  ffi::Span<const double> hp_static;
  std::int64_t dynamic_mask, flags, seed;
  ffi::Span<const std::int64_t> block_sizes, slot_bits, slot_stochastic, slot_signed, rng_streams;
};

std::string tensor(std::size_t t) { return "tensor " + std::to_string(t) + ": "; }

// Fills one slot from the next buffers (copying operands into unaliased results); `param_in` and
// `param_out` receive the parameter's operand and result addresses.
ffi::Error take_tensor(Buffers& bufs, const Attrs& a, std::size_t t, octopt::ParamSlot& slot, const void** param_in,
                       void** param_out) {
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
  const std::int64_t blocks = block_size > 0 ? (n + block_size - 1) / block_size : 0;
  for (std::size_t k = 0; k < 3; ++k) {
    const int bits = int(a.slot_bits[3 * t + k]);
    if (bits == 0) continue;
    if (bits != 32 && bits != 8 && bits != 4) return bad("internal: state bits must be 32, 8 or 4");
    auto din = bufs.operand();
    auto dout = bufs.result();
    if (!din || !dout) return bad("internal: missing state buffer");
    const std::size_t want = bits == 32 ? std::size_t(n) * 4 : (bits == 8 ? std::size_t(n) : std::size_t(n + 1) / 2);
    const ffi::DataType wt = bits == 32 ? ffi::DataType::F32 : ffi::DataType::U8;
    if (din->element_type() != wt || din->size_bytes() != want || dout->size_bytes() != want)
      return bad(tensor(t) + "state slot " + std::to_string(k) + " does not match the parameter (expected " +
                 std::to_string(want) + " bytes of " + (bits == 32 ? "float32" : "uint8") + ")");
    copy_into(*din, *dout);
    octopt::StateBuffer& st = slot.state[k];
    st.bits = bits;
    st.data = dout->untyped_data();
    st.stochastic = a.slot_stochastic[3 * t + k] != 0;
    if (bits == 32) continue;
    st.codebook = codebook_index(bits, a.slot_signed[3 * t + k] != 0);
    auto ain = bufs.operand();
    auto aout = bufs.result();
    if (!ain || !aout) return bad("internal: missing absmax buffer");
    if (ain->element_type() != ffi::DataType::F32 || std::int64_t(ain->element_count()) != blocks ||
        std::int64_t(aout->element_count()) != blocks)
      return bad(tensor(t) + "the absmax of state slot " + std::to_string(k) + " must hold " + std::to_string(blocks) +
                 " float32 values (one per block of " + std::to_string(block_size) + ")");
    copy_into(*ain, *aout);
    st.absmax = static_cast<float*>(aout->untyped_data());
  }
  copy_into(*param, *out);
  *param_in = param->untyped_data();
  *param_out = out->untyped_data();
  return ffi::Error::Success();
}

ffi::Error StepImpl(ffi::Buffer<ffi::F32> hp_dynamic, ffi::Buffer<ffi::S32> step_buf, ffi::RemainingArgs in,
                    ffi::RemainingRets out, std::int64_t kind, std::int64_t mode, ffi::Span<const double> hp_static,
                    std::int64_t dynamic_mask, std::int64_t flags, std::int64_t seed,
                    ffi::Span<const std::int64_t> block_sizes, ffi::Span<const std::int64_t> slot_bits,
                    ffi::Span<const std::int64_t> slot_stochastic, ffi::Span<const std::int64_t> slot_signed,
                    ffi::Span<const std::int64_t> rng_streams) {
  using octopt_ffi::kNumHyperParams;
  const Attrs a{kind, mode, hp_static, dynamic_mask, flags, seed, block_sizes, slot_bits, slot_stochastic,
                slot_signed, rng_streams};
  const std::size_t n_tensors = block_sizes.size();
  if (kind < 0 || kind > int(octopt::OptimKind::lars)) return bad("internal: unknown optimizer kind");
  if (mode != octopt_ffi::kUpdates && mode != octopt_ffi::kParams) return bad("internal: unknown mode");
  if (hp_dynamic.element_count() != kNumHyperParams || hp_static.size() != kNumHyperParams)
    return bad("internal: expected " + std::to_string(kNumHyperParams) + " hyper-parameters");
  if (slot_bits.size() != 3 * n_tensors || slot_stochastic.size() != 3 * n_tensors ||
      slot_signed.size() != 3 * n_tensors || rng_streams.size() != n_tensors)
    return bad("internal: expected 3 state slot descriptions per tensor");
  if (step_buf.element_count() != 1) return bad("internal: the step must be a scalar");
  const std::int64_t step = step_buf.typed_data()[0];
  if (step < 1) return bad("the step count must be >= 1, got " + std::to_string(step));

  double hp[kNumHyperParams];
  for (std::size_t k = 0; k < kNumHyperParams; ++k) {
    hp[k] = (dynamic_mask >> k) & 1 ? double(hp_dynamic.typed_data()[k]) : hp_static[k];
    if (!std::isfinite(hp[k]))
      return bad(std::string("hyper-parameter '") + octopt_ffi::kHyperParamNames[k] + "' must be finite, got " +
                 std::to_string(hp[k]));
  }
  octopt::HyperParams h;
  h.lr = hp[0], h.beta1 = hp[1], h.beta2 = hp[2], h.beta3 = hp[3], h.eps = hp[4], h.weight_decay = hp[5];
  h.momentum = hp[6], h.dampening = hp[7], h.alpha = hp[8], h.lr_decay = hp[9], h.eta = hp[10];
  h.t_alpha = hp[11], h.t_beta3 = hp[12];
  h.nesterov = flags & octopt_ffi::kNesterov;
  h.centered = flags & octopt_ffi::kCentered;
  h.bias_correction = flags & octopt_ffi::kBiasCorrection;
  h.maximize = flags & octopt_ffi::kMaximize;

  try {
    const auto kindv = octopt::OptimKind(kind);
    const octopt::SlotScalars scalars = octopt::compute_scalars(kindv, h, step);
    // XLA may run independent custom calls on several threads: per-thread scratch
    thread_local std::vector<octopt::ParamSlot> slots;
    thread_local std::vector<const void*> params;  // for updates = p_new - p
    thread_local std::vector<void*> outs;
    thread_local octopt::StepWorkspace ws;
    slots.assign(n_tensors, octopt::ParamSlot{});
    params.assign(n_tensors, nullptr);
    outs.assign(n_tensors, nullptr);
    Buffers bufs(in, out);
    for (std::size_t t = 0; t < n_tensors; ++t) {
      ffi::Error e = take_tensor(bufs, a, t, slots[t], &params[t], &outs[t]);
      if (!e.success()) return e;
      slots[t].scalars = scalars;
    }
    if (!bufs.all_used()) return bad("internal: more buffers than the tensors' descriptions use");

    octopt::StepConfig cfg;
    cfg.kind = kindv;
    cfg.codebooks = codebooks().data();
    cfg.num_codebooks = int(codebooks().size());
    cfg.seed = std::uint64_t(seed);
    cfg.step = step;
    cfg.stochastic_state = flags & octopt_ffi::kStochasticState;
    cfg.stochastic_bf16 = flags & octopt_ffi::kStochasticBf16;
    octopt::validate_step(cfg, slots.data(), n_tensors, kFn);
    octopt::step(cfg, slots.data(), n_tensors, ws);
    if (mode == octopt_ffi::kUpdates) {
      for (std::size_t t = 0; t < n_tensors; ++t) {
        void* o = outs[t];
        const void* p = params[t];
        switch (slots[t].param_dtype) {
          case octopt::DType::f32: subtract<octopt::DType::f32>(o, p, slots[t].n); break;
          case octopt::DType::f16: subtract<octopt::DType::f16>(o, p, slots[t].n); break;
          case octopt::DType::bf16: subtract<octopt::DType::bf16>(o, p, slots[t].n); break;
        }
      }
    }
  } catch (const std::exception& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (...) {
    return ffi::Error::Internal(std::string(kFn) + ": unknown error in the optimizer step");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(OctoptStepCpu, StepImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // hp_dynamic
                                  .Arg<ffi::Buffer<ffi::S32>>()  // step
                                  .RemainingArgs()               // per tensor: param, grad, state
                                  .RemainingRets()               // per tensor: updates or new param, state
                                  .Attr<std::int64_t>("kind")
                                  .Attr<std::int64_t>("mode")
                                  .Attr<ffi::Span<const double>>("hp_static")
                                  .Attr<std::int64_t>("dynamic_mask")
                                  .Attr<std::int64_t>("flags")
                                  .Attr<std::int64_t>("seed")
                                  .Attr<ffi::Span<const std::int64_t>>("block_sizes")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_bits")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_stochastic")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_signed")
                                  .Attr<ffi::Span<const std::int64_t>>("rng_streams"));

void* octopt_ffi::step_cpu_handler() { return reinterpret_cast<void*>(&OctoptStepCpu); }
