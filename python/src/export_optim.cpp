// Binding of the fused optimizer step: a StepPlan holds raw views of the parameters and their
// state (keeping the Python objects alive); each step only hands over the gradients.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <memory>
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
    octopt::StepTensor slot;
    nb::ndarray<> p;
    if (!nb::try_cast(param, p)) throw nb::type_error("Optimizer: a parameter is not a writable array");
    const std::string parg = "params[" + std::to_string(slots_.size()) + "]";
    const ArrayRef pr = array_ref(p, fn, parg.c_str());
    if (pr.device_type != nb::device::cpu::value && !is_cuda(pr))
      throw std::invalid_argument(std::string(fn) + ": argument '" + parg + "' must be on the CPU or a CUDA device");
    const int dev = is_cuda(pr) ? pr.device_id : -1;
    if (!slots_.empty() && dev != device_)
      throw std::invalid_argument(std::string(fn) + ": argument '" + parg + "' is on " + where(dev) +
                                  " but the optimizer's earlier parameters are on " + where(device_));
    device_ = dev;
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
      const ArrayRef dr = array_ref(data, fn, "state");
      same_place(dr, dev, "state");
      st.data = dr.data;
      keep_.push_back(t[2]);
      if (!t[3].is_none()) {
        nb::ndarray<> am = nb::cast<nb::ndarray<>>(t[3]);
        const ArrayRef ar = array_ref(am, fn, "absmax");
        same_place(ar, dev, "absmax");
        st.absmax = static_cast<float*>(ar.data);
        keep_.push_back(t[3]);
      }
    }
    slots_.push_back(slot);
    groups_.push_back(group);
    cfg_.codebooks = codebooks_.data();
    cfg_.num_codebooks = int(codebooks_.size());
    octopt::validate_step(cfg_, &slots_.back(), 1, fn);
    dplan_stale_ = true;
  }

  // Returns the number of skipped blocks; -1 for CUDA parameters (the count stays on the device
  // until skipped_blocks() is asked for, so that a step never synchronizes).
  std::int64_t step(nb::sequence grads, HostI64 steps, std::vector<octopt::HyperParams> hparams, bool strict,
                    bool stochastic_state, bool stochastic_bf16, float percentile, std::uintptr_t stream) {
    constexpr const char* fn = "step";
    const std::size_t n = slots_.size();
    if (nb::len(grads) != n)
      throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(n) +
                                  " gradients (one per parameter), got " + std::to_string(nb::len(grads)));
    if (steps.size() != n) throw std::invalid_argument("step: internal: step counts do not match the parameters");
    if (device_ >= 0) return step_cuda(grads, hparams, strict, stochastic_state, stochastic_bf16, percentile, stream);
    Busy busy(busy_);
    std::vector<nb::object> hold;  // the gradients stay referenced while the GIL is released
    hold.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      octopt::StepTensor& s = slots_[i];
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
      check_grad_alias(fn, arg, gr.data, std::size_t(gr.size) * octopt::dtype_size(gd), s.param,
                       std::size_t(s.n) * octopt::dtype_size(s.param_dtype));
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

  std::vector<float> trust_ratios() {
    if (device_ >= 0) return dplan_ ? octopt::cuda::trust_ratios(*dplan_) : std::vector<float>(slots_.size(), 0.0f);
    std::vector<float> out;
    for (const auto& s : slots_) out.push_back(s.scalars.trust);
    return out;
  }

  std::int64_t global_step() {
    if (device_ >= 0 && dplan_) octopt::cuda::read_steps(*dplan_, nullptr, &global_step_);
    return global_step_;
  }
  void set_global_step(std::int64_t s) {
    global_step_ = s;
    if (device_ >= 0 && dplan_) {
      std::vector<std::int64_t> per(slots_.size());
      octopt::cuda::read_steps(*dplan_, per.data(), nullptr);
      octopt::cuda::write_steps(*dplan_, per.data(), s);
    }
  }

  int device() const { return device_; }

  // CUDA: per-tensor step counts as the device holds them (they advance in captured graphs too).
  std::vector<std::int64_t> device_steps() {
    std::vector<std::int64_t> per(slots_.size(), 0);
    if (device_ >= 0 && dplan_) octopt::cuda::read_steps(*dplan_, per.data(), nullptr);
    else per = pending_steps_;
    per.resize(slots_.size(), 0);
    return per;
  }
  void set_device_steps(std::vector<std::int64_t> per) {
    if (per.size() != slots_.size()) throw std::invalid_argument("set_device_steps: one step count per parameter");
    if (device_ >= 0 && dplan_) octopt::cuda::write_steps(*dplan_, per.data(), global_step());
    else pending_steps_ = per;
  }

  std::int64_t skipped_blocks(bool last) {
    if (device_ < 0 || !dplan_) return 0;
    return octopt::cuda::skipped_blocks(*dplan_, last);
  }

  // Uploads the gradients' addresses and hyper-parameters without stepping (CUDA graphs).
  void upload(nb::sequence grads, std::vector<octopt::HyperParams> hparams, bool stochastic_state,
              bool stochastic_bf16, float percentile, std::uintptr_t stream) {
    if (device_ < 0) throw std::invalid_argument("upload: only CUDA optimizers hold their arguments on the device");
    std::vector<nb::object> hold;
    CudaArgs a = cuda_args(grads, hparams, stochastic_state, stochastic_bf16, percentile, "upload", hold);
    nb::gil_scoped_release release;
    octopt::cuda::upload(*dplan_, a.args, as_stream(stream));
  }

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

  static std::string where(int dev) { return dev < 0 ? "cpu" : "cuda:" + std::to_string(dev); }

  void same_place(const ArrayRef& r, int dev, const char* what) const {
    const int d = is_cuda(r) ? r.device_id : (r.device_type == nb::device::cpu::value ? -1 : -2);
    if (d != dev)
      throw std::invalid_argument(std::string("Optimizer: ") + what + " buffer is on " + where(d) +
                                  " but its parameter is on " + where(dev));
  }

  struct CudaArgs {
    std::vector<const void*> ptrs;
    std::vector<octopt::DType> dtypes;
    std::vector<octopt::HyperParams> hps;
    octopt::cuda::StepArgs args;
  };

  // Checks the gradients of a CUDA plan (same device, dtype, size) and builds the step arguments;
  // (re)builds the device plan when tensors were added since the last build.
  CudaArgs cuda_args(nb::sequence grads, std::vector<octopt::HyperParams>& hparams, bool stochastic_state,
                     bool stochastic_bf16, float percentile, const char* fn, std::vector<nb::object>& hold) {
    const std::size_t n = slots_.size();
    if (nb::len(grads) != n)
      throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(n) +
                                  " gradients (one per parameter), got " + std::to_string(nb::len(grads)));
    CudaArgs a;
    a.ptrs.assign(n, nullptr);
    a.dtypes.assign(n, octopt::DType::f32);
    for (std::size_t i = 0; i < n; ++i) {
      nb::object g = grads[i];
      if (g.is_none()) continue;
      const std::string arg = "grads[" + std::to_string(i) + "]";
      nb::ndarray<nb::ro> ga;
      if (!nb::try_cast(g, ga))
        throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be an array (PyTorch or CuPy), got " +
                              nb::type_name(g.type()).c_str())
                                 .c_str());
      const ArrayRef gr = array_ref(ga, fn, arg.c_str());
      const int gdev = is_cuda(gr) ? gr.device_id : (gr.device_type == nb::device::cpu::value ? -1 : -2);
      if (gdev != device_)
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' is on " + where(gdev) +
                                    " but its parameter is on " + where(device_));
      octopt::DType gd;
      if (!is_float_dtype(gr, &gd) || (gd != slots_[i].param_dtype && gd != octopt::DType::f32))
        throw nb::type_error((std::string(fn) + ": argument '" + arg + "' must be float32 or the parameter's dtype (" +
                              octopt::dtype_name(slots_[i].param_dtype) + ")")
                                 .c_str());
      if (gr.size != slots_[i].n)
        throw std::invalid_argument(std::string(fn) + ": argument '" + arg + "' has " + std::to_string(gr.size) +
                                    " elements but parameter " + std::to_string(i) + " has " +
                                    std::to_string(slots_[i].n));
      check_grad_alias(fn, arg, gr.data, std::size_t(gr.size) * octopt::dtype_size(gd), slots_[i].param,
                       std::size_t(slots_[i].n) * octopt::dtype_size(slots_[i].param_dtype));
      a.ptrs[i] = gr.data;
      a.dtypes[i] = gd;
      hold.push_back(g);
    }
    int n_groups = 0;
    for (int gi : groups_) n_groups = std::max(n_groups, gi + 1);
    if (int(hparams.size()) < n_groups) throw std::invalid_argument(std::string(fn) + ": internal: bad group");
    a.hps = hparams;
    if (a.hps.empty()) a.hps.resize(1);
    if (!dplan_ || dplan_stale_) build_device_plan(int(a.hps.size()));
    a.args.grads = a.ptrs.data();
    a.args.grad_dtypes = a.dtypes.data();
    a.args.hparams = a.hps.data();
    a.args.stochastic_state = stochastic_state;
    a.args.stochastic_bf16 = stochastic_bf16;
    a.args.percentile = percentile;
    return a;
  }

  void build_device_plan(int n_groups) {
    std::vector<std::int64_t> per = device_steps();
    const std::int64_t g = global_step();
    cfg_.seed = seed_;
    dplan_.reset();
    dplan_ = std::make_unique<octopt::cuda::DevicePlan>(cfg_, slots_.data(), slots_.size(), groups_.data(), n_groups,
                                                         device_, "Optimizer");
    dplan_groups_ = n_groups;
    dplan_stale_ = false;
    per.resize(slots_.size(), 0);
    octopt::cuda::write_steps(*dplan_, per.data(), g);
  }

  std::int64_t step_cuda(nb::sequence grads, std::vector<octopt::HyperParams>& hparams, bool strict,
                         bool stochastic_state, bool stochastic_bf16, float percentile, std::uintptr_t stream) {
    if (strict)
      throw std::invalid_argument("step: strict=True is not supported for CUDA parameters (it would synchronize the "
                                  "stream); read skipped_blocks instead");
    Busy busy(busy_);
    std::vector<nb::object> hold;
    if (dplan_ && !dplan_stale_ && int(hparams.size()) != dplan_groups_) dplan_stale_ = true;
    CudaArgs a = cuda_args(grads, hparams, stochastic_state, stochastic_bf16, percentile, "step", hold);
    {
      nb::gil_scoped_release release;
      octopt::cuda::step(*dplan_, a.args, as_stream(stream));
    }
    return -1;
  }

  octopt::StepConfig cfg_;
  std::uint64_t seed_;
  std::int64_t global_step_ = 0;
  std::vector<octopt::Codebook> codebooks_;
  std::vector<octopt::StepTensor> slots_;
  std::vector<int> groups_;
  std::vector<nb::object> keep_;
  octopt::StepWorkspace ws_;
  int device_ = -1;  // CUDA device of every parameter, or -1 for the CPU
  std::unique_ptr<octopt::cuda::DevicePlan> dplan_;  // built at the first CUDA step
  bool dplan_stale_ = false;
  int dplan_groups_ = 0;
  std::vector<std::int64_t> pending_steps_;  // step counts set before the device plan exists
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
  // Test aids (tests/test_cuda_launches.py): count what a step records into a CUDA graph.
  m.def("_cuda_begin_capture", [](std::uintptr_t stream) { octopt::cuda::begin_capture(as_stream(stream)); },
        nb::arg("stream"));
  m.def("_cuda_end_capture_count_nodes",
        [](std::uintptr_t stream) { return octopt::cuda::end_capture_count_nodes(as_stream(stream)); },
        nb::arg("stream"));
  m.def("optim_num_states", [](const std::string& k) { return octopt::optim_num_states(octopt::parse_optim(k)); });
  nb::class_<StepPlan>(m, "StepPlan")
      .def(nb::init<const std::string&, std::uint64_t>(), nb::arg("kind"), nb::arg("seed"))
      .def("add_codebook", &StepPlan::add_codebook, nb::arg("values"), nb::arg("bits"), nb::arg("keep_nonzero"))
      .def("add_tensor", &StepPlan::add_tensor, nb::arg("param"), nb::arg("block_size"), nb::arg("group"),
           nb::arg("states"))
      .def("step", &StepPlan::step, nb::arg("grads"), nb::arg("steps"), nb::arg("hparams"), nb::arg("strict"),
           nb::arg("stochastic_state"), nb::arg("stochastic_bf16"), nb::arg("percentile"), nb::arg("stream") = 0)
      .def("upload", &StepPlan::upload, nb::arg("grads"), nb::arg("hparams"), nb::arg("stochastic_state"),
           nb::arg("stochastic_bf16"), nb::arg("percentile"), nb::arg("stream") = 0)
      .def("trust_ratios", &StepPlan::trust_ratios)
      .def("device_steps", &StepPlan::device_steps)
      .def("set_device_steps", &StepPlan::set_device_steps, nb::arg("steps"))
      .def("skipped_blocks", &StepPlan::skipped_blocks, nb::arg("last"))
      .def_prop_ro("device", &StepPlan::device)
      .def_prop_rw("global_step", &StepPlan::global_step, &StepPlan::set_global_step);
}
