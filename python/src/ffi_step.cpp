// XLA FFI handler: one optimizer step of one tensor (the per-tensor unit of octopt.optax), built
// against the headers jaxlib ships (jax.ffi.include_dir()); nothing links against jaxlib.
//
// Operands: param, grad, hp_dynamic (f32[kNumHyperParams]), step (s32[], the step being taken,
// 1-based), then per used state slot its data (f32 values or u8 codes) and, when quantized, its
// absmax. Results: the param-dtype tensor (updates p_new - p, or p_new), then the new state in
// operand order. The state results may alias their operands (input_output_aliases); when they do
// not, the operands are copied first, so the handler never writes an operand.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
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

ffi::Error StepImpl(ffi::AnyBuffer param, ffi::AnyBuffer grad, ffi::Buffer<ffi::F32> hp_dynamic,
                    ffi::Buffer<ffi::S32> step_buf, ffi::RemainingArgs state_in, ffi::Result<ffi::AnyBuffer> out,
                    ffi::RemainingRets state_out, std::int64_t kind, std::int64_t mode, std::int64_t block_size,
                    ffi::Span<const std::int64_t> slot_bits, ffi::Span<const std::int64_t> slot_stochastic,
                    ffi::Span<const std::int64_t> slot_signed, ffi::Span<const double> hp_static,
                    std::int64_t dynamic_mask, std::int64_t flags, std::int64_t seed, std::int64_t rng_stream) {
  using octopt_ffi::kNumHyperParams;
  octopt::DType pd, gd;
  if (!float_dtype(param.element_type(), &pd)) return bad("the parameter must be float32, float16 or bfloat16");
  if (!float_dtype(grad.element_type(), &gd) || (gd != pd && gd != octopt::DType::f32))
    return bad("the gradient must be float32 or the parameter's dtype");
  const std::int64_t n = std::int64_t(param.element_count());
  if (std::int64_t(grad.element_count()) != n) return bad("the gradient and the parameter differ in size");
  if (out->element_type() != param.element_type() || std::int64_t(out->element_count()) != n)
    return bad("internal: the result does not match the parameter");
  if (kind < 0 || kind > int(octopt::OptimKind::lars)) return bad("internal: unknown optimizer kind");
  if (mode != octopt_ffi::kUpdates && mode != octopt_ffi::kParams) return bad("internal: unknown mode");
  if (hp_dynamic.element_count() != kNumHyperParams || hp_static.size() != kNumHyperParams)
    return bad("internal: expected " + std::to_string(kNumHyperParams) + " hyper-parameters");
  if (slot_bits.size() != 3 || slot_stochastic.size() != 3 || slot_signed.size() != 3)
    return bad("internal: expected 3 state slot descriptions");
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

  std::size_t expected = 0;
  for (std::size_t k = 0; k < 3; ++k) expected += slot_bits[k] == 0 ? 0 : (slot_bits[k] == 32 ? 1 : 2);
  if (state_in.size() != expected || state_out.size() != expected)
    return bad("internal: expected " + std::to_string(expected) + " state buffers");

  try {
    const auto kindv = octopt::OptimKind(kind);
    octopt::ParamSlot slot;
    slot.param = out->untyped_data();
    slot.param_dtype = pd;
    slot.grad = grad.untyped_data();
    slot.grad_dtype = gd;
    slot.n = n;
    slot.block_size = int(block_size);
    slot.rng_stream = std::uint64_t(rng_stream);
    const std::int64_t blocks = block_size > 0 ? (n + block_size - 1) / block_size : 0;
    std::size_t b = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      const int bits = int(slot_bits[k]);
      if (bits == 0) continue;
      if (bits != 32 && bits != 8 && bits != 4) return bad("internal: state bits must be 32, 8 or 4");
      auto din = state_in.get<ffi::AnyBuffer>(b);
      auto dout = state_out.get<ffi::AnyBuffer>(b);
      if (!din.has_value() || !dout.has_value()) return bad("internal: missing state buffer");
      const std::size_t want = bits == 32 ? std::size_t(n) * 4 : (bits == 8 ? std::size_t(n) : std::size_t(n + 1) / 2);
      const ffi::DataType wt = bits == 32 ? ffi::DataType::F32 : ffi::DataType::U8;
      if (din->element_type() != wt || din->size_bytes() != want || (*dout)->size_bytes() != want)
        return bad("state slot " + std::to_string(k) + " does not match the parameter (expected " +
                   std::to_string(want) + " bytes of " + (bits == 32 ? "float32" : "uint8") + ")");
      copy_into(*din, **dout);
      octopt::StateBuffer& st = slot.state[k];
      st.bits = bits;
      st.data = (*dout)->untyped_data();
      st.stochastic = slot_stochastic[k] != 0;
      ++b;
      if (bits == 32) continue;
      st.codebook = codebook_index(bits, slot_signed[k] != 0);
      auto ain = state_in.get<ffi::AnyBuffer>(b);
      auto aout = state_out.get<ffi::AnyBuffer>(b);
      if (!ain.has_value() || !aout.has_value()) return bad("internal: missing absmax buffer");
      if (ain->element_type() != ffi::DataType::F32 || std::int64_t(ain->element_count()) != blocks ||
          std::int64_t((*aout)->element_count()) != blocks)
        return bad("the absmax of state slot " + std::to_string(k) + " must hold " + std::to_string(blocks) +
                   " float32 values (one per block of " + std::to_string(block_size) + ")");
      copy_into(*ain, **aout);
      st.absmax = static_cast<float*>((*aout)->untyped_data());
      ++b;
    }
    copy_into(param, *out);
    slot.scalars = octopt::compute_scalars(kindv, h, step);

    octopt::StepConfig cfg;
    cfg.kind = kindv;
    cfg.codebooks = codebooks().data();
    cfg.num_codebooks = int(codebooks().size());
    cfg.seed = std::uint64_t(seed);
    cfg.step = step;
    cfg.stochastic_state = flags & octopt_ffi::kStochasticState;
    cfg.stochastic_bf16 = flags & octopt_ffi::kStochasticBf16;
    octopt::validate_step(cfg, &slot, 1, kFn);
    thread_local octopt::StepWorkspace ws;  // XLA may run independent custom calls on several threads
    octopt::step(cfg, &slot, 1, ws);
    if (mode == octopt_ffi::kUpdates) {
      switch (pd) {
        case octopt::DType::f32: subtract<octopt::DType::f32>(out->untyped_data(), param.untyped_data(), n); break;
        case octopt::DType::f16: subtract<octopt::DType::f16>(out->untyped_data(), param.untyped_data(), n); break;
        case octopt::DType::bf16: subtract<octopt::DType::bf16>(out->untyped_data(), param.untyped_data(), n); break;
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
                                  .Arg<ffi::AnyBuffer>()           // param
                                  .Arg<ffi::AnyBuffer>()           // grad
                                  .Arg<ffi::Buffer<ffi::F32>>()    // hp_dynamic
                                  .Arg<ffi::Buffer<ffi::S32>>()    // step
                                  .RemainingArgs()                 // state in
                                  .Ret<ffi::AnyBuffer>()           // updates or new param
                                  .RemainingRets()                 // state out
                                  .Attr<std::int64_t>("kind")
                                  .Attr<std::int64_t>("mode")
                                  .Attr<std::int64_t>("block_size")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_bits")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_stochastic")
                                  .Attr<ffi::Span<const std::int64_t>>("slot_signed")
                                  .Attr<ffi::Span<const double>>("hp_static")
                                  .Attr<std::int64_t>("dynamic_mask")
                                  .Attr<std::int64_t>("flags")
                                  .Attr<std::int64_t>("seed")
                                  .Attr<std::int64_t>("rng_stream"));

void* octopt_ffi::step_cpu_handler() { return reinterpret_cast<void*>(&OctoptStepCpu); }
