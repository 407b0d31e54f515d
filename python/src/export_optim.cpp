// Binding of the fused optimizer step: a StepPlan holds raw views of the parameters and their
// state (keeping the Python objects alive); each step only hands over the gradients.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <string>
#include <vector>

#include "array_ref.hpp"
#include "exports.hpp"
#include "octopt/optim.hpp"
#include "octopt/qmap.hpp"

namespace {

using HostF32 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using HostI64 = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

class StepPlan {
 public:
  StepPlan(const std::string& kind, std::uint64_t seed) : seed_(seed) { cfg_.kind = octopt::parse_optim(kind); }

  int add_codebook(HostF32 values, int bits, bool keep_nonzero) {
    codebooks_.push_back(octopt::make_codebook(values.data(), std::int64_t(values.size()), bits, "Optimizer", "qmap"));
    if (keep_nonzero) octopt::keep_nonzero(codebooks_.back());
    return int(codebooks_.size() - 1);
  }

  // states: one entry per state slot: None, or (bits, codebook, data, absmax-or-None).
  void add_tensor(nb::object param, int block_size, int group, std::vector<nb::object> states) {
    constexpr const char* fn = "Optimizer";
    octopt::ParamSlot slot;
    nb::ndarray<> p;
    if (!nb::try_cast(param, p)) throw nb::type_error("Optimizer: a parameter is not a writable array");
    const ArrayRef pr = array_ref(p, fn, "params");
    if (is_cuda(pr)) throw std::invalid_argument("Optimizer: CUDA parameters are not supported by this build's step");
    slot.param = pr.data;
    slot.param_dtype = float_dtype(pr, fn, "params");
    slot.n = pr.size;
    slot.block_size = block_size;
    slot.rng_stream = slots_.size();
    keep_.push_back(param);
    if (states.size() > 3) throw std::invalid_argument("Optimizer: at most 3 state slots");
    for (std::size_t k = 0; k < states.size(); ++k) {
      if (states[k].is_none()) continue;
      auto t = nb::cast<nb::tuple>(states[k]);
      octopt::StateBuffer& st = slot.state[k];
      st.bits = nb::cast<int>(t[0]);
      st.codebook = nb::cast<int>(t[1]);
      st.stochastic = t.size() > 4 && nb::cast<bool>(t[4]);
      nb::ndarray<> data = nb::cast<nb::ndarray<>>(t[2]);
      st.data = array_ref(data, fn, "state").data;
      keep_.push_back(t[2]);
      if (!t[3].is_none()) {
        nb::ndarray<> am = nb::cast<nb::ndarray<>>(t[3]);
        st.absmax = static_cast<float*>(array_ref(am, fn, "absmax").data);
        keep_.push_back(t[3]);
      }
    }
    slots_.push_back(slot);
    groups_.push_back(group);
    cfg_.codebooks = codebooks_.data();
    cfg_.num_codebooks = int(codebooks_.size());
    octopt::validate_step(cfg_, &slots_.back(), 1, fn);
  }

  std::int64_t step(nb::sequence grads, HostI64 steps, std::vector<octopt::HyperParams> hparams, bool strict,
                    bool stochastic_state, bool stochastic_bf16, float percentile) {
    constexpr const char* fn = "step";
    const std::size_t n = slots_.size();
    if (nb::len(grads) != n)
      throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(n) +
                                  " gradients (one per parameter), got " + std::to_string(nb::len(grads)));
    if (steps.size() != n) throw std::invalid_argument("step: internal: step counts do not match the parameters");
    Busy busy(busy_);
    std::vector<nb::object> hold;  // the gradients stay referenced while the GIL is released
    hold.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      octopt::ParamSlot& s = slots_[i];
      nb::object g = grads[i];
      s.grad = nullptr;
      if (g.is_none()) continue;
      const std::string arg = "grads[" + std::to_string(i) + "]";
      nb::ndarray<nb::ro> ga;
      if (!nb::try_cast(g, ga))
        throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be an array (NumPy, PyTorch, CuPy; a "
                              "torch tensor that requires grad must be detached), got " +
                              nb::type_name(g.type()).c_str())
                                 .c_str());
      const ArrayRef gr = array_ref(ga, fn, arg.c_str());
      octopt::DType gd;
      if (!is_float_dtype(gr, &gd) || (gd != s.param_dtype && gd != octopt::DType::f32))
        throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be float32 or the parameter's dtype (" +
                              octopt::dtype_name(s.param_dtype) + ")")
                                 .c_str());
      if (gr.size != s.n)
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' has " + std::to_string(gr.size) +
                                    " elements but parameter " + std::to_string(i) + " has " + std::to_string(s.n));
      if (is_cuda(gr)) throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is on a CUDA device but its parameter is on the CPU");
      if (gr.data == s.param && s.n > 0)
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is the parameter itself (aliased memory)");
      const std::int64_t g_id = groups_[i];
      if (g_id < 0 || std::size_t(g_id) >= hparams.size()) throw std::invalid_argument("step: internal: bad group");
      s.grad = gr.data;
      s.grad_dtype = gd;
      s.scalars = octopt::compute_scalars(cfg_.kind, hparams[std::size_t(g_id)], steps.data()[i]);
      hold.push_back(g);
    }
    cfg_.seed = seed_;
    cfg_.step = ++global_step_;
    cfg_.stochastic_state = stochastic_state;
    cfg_.stochastic_bf16 = stochastic_bf16;
    cfg_.percentile = percentile;
    octopt::StepResult r;
    {
      nb::gil_scoped_release release;
      if (strict) {
        const std::int64_t bad = octopt::count_nonfinite_blocks(slots_.data(), n);
        if (bad) {
          --global_step_;
          throw std::invalid_argument("step: " + std::to_string(bad) +
                                      " block(s) of the gradients hold NaN or Inf (strict=True); nothing was changed");
        }
      }
      r = octopt::step(cfg_, slots_.data(), n, ws_);
    }
    for (auto& s : slots_) s.grad = nullptr;
    return r.skipped_blocks;
  }

  std::vector<float> trust_ratios() const {
    std::vector<float> out;
    for (const auto& s : slots_) out.push_back(s.scalars.trust);
    return out;
  }

  std::int64_t global_step() const { return global_step_; }
  void set_global_step(std::int64_t s) { global_step_ = s; }

 private:
  // Two threads stepping one optimizer would race on its state: refuse the second.
  struct Busy {
    explicit Busy(std::atomic<bool>& f) : flag(f) {
      if (flag.exchange(true))
        throw std::runtime_error("step: this optimizer is already being stepped by another thread");
    }
    ~Busy() { flag.store(false); }
    std::atomic<bool>& flag;
  };

  octopt::StepConfig cfg_;
  std::uint64_t seed_;
  std::int64_t global_step_ = 0;
  std::vector<octopt::Codebook> codebooks_;
  std::vector<octopt::ParamSlot> slots_;
  std::vector<int> groups_;
  std::vector<nb::object> keep_;
  octopt::StepWorkspace ws_;
  std::atomic<bool> busy_{false};
};

}  // namespace

void export_optim(nb::module_& m) {
  nb::class_<octopt::HyperParams>(m, "HyperParams")
      .def(nb::init<>())
      .def_rw("lr", &octopt::HyperParams::lr)
      .def_rw("beta1", &octopt::HyperParams::beta1)
      .def_rw("beta2", &octopt::HyperParams::beta2)
      .def_rw("beta3", &octopt::HyperParams::beta3)
      .def_rw("eps", &octopt::HyperParams::eps)
      .def_rw("weight_decay", &octopt::HyperParams::weight_decay)
      .def_rw("momentum", &octopt::HyperParams::momentum)
      .def_rw("dampening", &octopt::HyperParams::dampening)
      .def_rw("nesterov", &octopt::HyperParams::nesterov)
      .def_rw("alpha", &octopt::HyperParams::alpha)
      .def_rw("centered", &octopt::HyperParams::centered)
      .def_rw("lr_decay", &octopt::HyperParams::lr_decay)
      .def_rw("eta", &octopt::HyperParams::eta)
      .def_rw("t_alpha", &octopt::HyperParams::t_alpha)
      .def_rw("t_beta3", &octopt::HyperParams::t_beta3)
      .def_rw("bias_correction", &octopt::HyperParams::bias_correction)
      .def_rw("maximize", &octopt::HyperParams::maximize);
  m.def("optim_num_states", [](const std::string& k) { return octopt::optim_num_states(octopt::parse_optim(k)); });
  nb::class_<StepPlan>(m, "StepPlan")
      .def(nb::init<const std::string&, std::uint64_t>(), nb::arg("kind"), nb::arg("seed"))
      .def("add_codebook", &StepPlan::add_codebook, nb::arg("values"), nb::arg("bits"), nb::arg("keep_nonzero"))
      .def("add_tensor", &StepPlan::add_tensor, nb::arg("param"), nb::arg("block_size"), nb::arg("group"),
           nb::arg("states"))
      .def("step", &StepPlan::step, nb::arg("grads"), nb::arg("steps"), nb::arg("hparams"), nb::arg("strict"),
           nb::arg("stochastic_state"), nb::arg("stochastic_bf16"), nb::arg("percentile"))
      .def("trust_ratios", &StepPlan::trust_ratios)
      .def_prop_rw("global_step", &StepPlan::global_step, &StepPlan::set_global_step);
}
