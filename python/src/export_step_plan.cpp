// Binding of the core's StepPlan (step_plan.hpp). It converts arrays and nothing else: layout, state,
// counters, scalars and files are the core's. State memory is allocated in the parameters' framework
// through a Python callable, so the state arrays Python hands out are the plan's own memory.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "array_ref.hpp"
#include "exports.hpp"
#include "octopt/state_convert.hpp"
#include "octopt/step_plan.hpp"
#include "slot_arrays.hpp"

namespace {

// Allocates state as arrays of the parameters' framework: `make(count, dtype_name, slot, buffer_name,
// page_offset)` returns a contiguous 1-d array on the parameters' device (buffer_name "values" or "absmax";
// page_offset the core's placement hint, -1 for none); the allocator keeps it alive until deallocate.
class FrameworkAllocator final : public octopt::StateAllocator {
 public:
  explicit FrameworkAllocator(nb::object make) : make_(std::move(make)) {}

  void* allocate(const octopt::StateRequest& req) override {
    const char* dtype = req.elem == octopt::StateElem::f32 ? "float32" : "uint8";
    const char* buffer = req.buffer == octopt::StateBufferKind::values ? "values" : "absmax";
    nb::object a = make_(req.count, dtype, req.slot, buffer, req.page_offset);
    nb::ndarray<> arr;
    if (!nb::try_cast(a, arr)) throw std::runtime_error("Optimizer: internal: the state allocator returned no array");
    const ArrayRef r = array_ref(arr, "Optimizer", "state");
    const bool ok_dtype =
        req.elem == octopt::StateElem::f32 ? r.dtype == nb::dtype<float>() : r.dtype == nb::dtype<std::uint8_t>();
    const int where = is_cuda(r) ? r.device_id : -1;
    if (!ok_dtype || std::size_t(r.size) != req.count || where != req.device)
      throw std::runtime_error("Optimizer: internal: the state allocator returned an array of the wrong kind");
    held_.emplace_back(r.data, std::move(a));
    return r.data;
  }

  void deallocate(void* p, const octopt::StateRequest&) noexcept override {
    for (auto it = held_.begin(); it != held_.end(); ++it)
      if (it->first == p) {
        held_.erase(it);
        return;
      }
  }

  // The array behind an allocation (the state arrays Python hands out are these objects).
  nb::object array(const void* p) const {
    for (const auto& [ptr, obj] : held_)
      if (ptr == p) return obj;
    return nb::none();
  }

 private:
  nb::object make_;
  std::vector<std::pair<void*, nb::object>> held_;
};

std::string where(int dev) { return dev < 0 ? "cpu" : "cuda:" + std::to_string(dev); }

// A shape as Python writes a tuple: (), (3,), (3, 4).
std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + (s.size() == 1 ? ",)" : ")");
}

int device_of(const ArrayRef& r) {
  if (is_cuda(r)) return r.device_id;
  return r.device_type == nb::device::cpu::value ? -1 : -2;
}

class PyStepPlan {
 public:
  // stochastic_rounding: None (4-bit states only), True or False.
  PyStepPlan(const std::string& kind, std::uint64_t seed, nb::object stochastic_rounding, bool stochastic_bf16,
             float percentile, bool strict, nb::object make_array, const std::string& fn, bool signed_maps) {
    octopt::PlanOptions o;
    o.seed = seed;
    o.stochastic_rounding = stochastic_rounding.is_none() ? -1 : (nb::cast<bool>(stochastic_rounding) ? 1 : 0);
    o.stochastic_bf16 = stochastic_bf16;
    o.percentile = percentile;
    o.strict = strict;
    o.signed_maps = signed_maps;
    alloc_ = std::make_shared<FrameworkAllocator>(std::move(make_array));
    plan_ = std::make_unique<octopt::StepPlan>(octopt::optim_def(kind).kind, o, alloc_, fn.c_str());
  }

  int add_group(const octopt::HyperParams& hp, const octopt::LayoutOptions& lo, const std::string& fn) {
    return plan_->add_group(hp, lo, fn.c_str());
  }

  // bf16_bits: `param` is the uint16 view of a NumPy (ml_dtypes) bfloat16 array, which NumPy exports
  // neither through DLPack nor through the buffer protocol; its gradients then come as such views too.
  std::size_t add_tensor(int group, nb::object param, const std::string& fn, bool bf16_bits) {
    nb::ndarray<> p;
    const std::string arg = "params[" + std::to_string(plan_->num_tensors()) + "]";
    if (!nb::try_cast(param, p))
      throw nb::type_error((fn + ": argument '" + arg + "' is not a writable array").c_str());
    const ArrayRef r = array_ref(p, fn.c_str(), arg.c_str());
    if (bf16_bits)
      require_dtype(r, nb::dtype<std::uint16_t>(), "uint16 (the bits of a bfloat16 array)", fn.c_str(), arg.c_str());
    const int dev = device_of(r);
    if (dev == -2) throw std::invalid_argument(fn + ": argument '" + arg + "' must be on the CPU or a CUDA device");
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0; d < p.ndim(); ++d) shape.push_back(std::int64_t(p.shape(d)));
    const std::size_t i = plan_->add_tensor(
        group, r.data, bf16_bits ? octopt::DType::bf16 : float_dtype(r, fn.c_str(), "params"), shape, dev, fn.c_str());
    params_.push_back(std::move(param));
    bf16_bits_.push_back(bf16_bits);
    numel_.push_back(r.size);
    return i;
  }

  // Per used slot: (slot index, name, signed, bits, block size, state map ("dynamic"/"fp8"), stochastic, data,
  // absmax or None).
  nb::list tensor_state(std::size_t i) const {
    nb::list out;
    for (const octopt::StateBuffers& b : plan_->tensor_state(i)) {
      const octopt::SlotLayout& s = b.slot;
      out.append(nb::make_tuple(s.index, s.name, s.is_signed, s.bits, s.block_size, octopt::state_map_key(s.map),
                                s.stochastic, alloc_->array(b.data),
                                s.bits == 32 ? nb::none() : alloc_->array(b.absmax)));
    }
    return out;
  }

  // grads: one array or None per parameter. CPU: the skipped-block count; CUDA: -1 (enqueued).
  std::int64_t step(nb::handle grads, std::uintptr_t stream) {
    std::vector<nb::object> hold;
    convert(grads, "step", hold);
    nb::gil_scoped_release release;
    return plan_->step(ptrs_.data(), dtypes_.data(), as_stream(stream), "step");
  }

  // The torch adapter's hot path: gradient addresses (0: None) and dtype codes (DType values) that the
  // caller has already checked against the parameters (dtype, shape, device, contiguity); only the
  // aliasing of a gradient with its own parameter is checked here.
  std::int64_t step_addresses(const std::vector<std::uintptr_t>& addresses, const std::vector<int>& dtypes,
                              std::uintptr_t stream) {
    const std::size_t n = plan_->num_tensors();
    if (addresses.size() != n || dtypes.size() != n)
      throw std::invalid_argument("step: expected " + std::to_string(n) + " gradient addresses and dtypes");
    ptrs_.assign(n, nullptr);
    dtypes_.assign(n, octopt::DType::f32);
    for (std::size_t i = 0; i < n; ++i) {
      if (!addresses[i]) continue;
      if (dtypes[i] < 0 || dtypes[i] > 2) throw std::invalid_argument("step: internal: bad dtype code");
      const auto gd = octopt::DType(dtypes[i]);
      const void* g = reinterpret_cast<const void*>(addresses[i]);
      const std::size_t n_i = std::size_t(numel_[i]);
      check_grad_alias("step", i, g, n_i * octopt::dtype_size(gd), plan_->tensor_data(i),
                       n_i * octopt::dtype_size(plan_->tensor_dtype(i)));
      ptrs_[i] = g;
      dtypes_[i] = gd;
    }
    nb::gil_scoped_release release;
    return plan_->step(ptrs_.data(), dtypes_.data(), as_stream(stream), "step");
  }

  void upload(nb::handle grads, std::uintptr_t stream) {
    std::vector<nb::object> hold;
    convert(grads, "upload", hold);
    nb::gil_scoped_release release;
    plan_->upload(ptrs_.data(), dtypes_.data(), as_stream(stream), "upload");
  }

  octopt::StepPlan& plan() { return *plan_; }

 private:
  // Checks each gradient against its parameter and gathers the addresses; `hold` keeps them alive.
  void convert(nb::handle grads, const char* fn, std::vector<nb::object>& hold) {
    const std::size_t n = plan_->num_tensors();
    if (!nb::isinstance<nb::list>(grads) && !nb::isinstance<nb::tuple>(grads))
      throw nb::type_error(
          (std::string(fn) + ": argument 'grads' must be a list of arrays, one per parameter").c_str());
    const std::size_t len = nb::len(grads);
    if (len != n)
      throw std::invalid_argument(std::string(fn) + ": expected " + std::to_string(n) +
                                  " gradients (one per parameter), got " + std::to_string(len));
    ptrs_.assign(n, nullptr);
    dtypes_.assign(n, octopt::DType::f32);
    hold.reserve(n);
    const int dev = plan_->device();
    for (std::size_t i = 0; i < n; ++i) {
      nb::object g = grads[i];
      if (g.is_none()) continue;
      nb::ndarray<nb::ro> ga;
      if (!nb::try_cast(g, ga)) {
        const std::string arg = "grads[" + std::to_string(i) + "]";
        throw nb::type_error((std::string(fn) + ": argument '" + arg +
                              "' must be an array (NumPy, PyTorch, CuPy; a "
                              "torch tensor that requires grad must be detached), got " +
                              nb::type_name(g.type()).c_str())
                                 .c_str());
      }
      ArrayRef gr{};
      try {
        gr = array_ref(ga, fn, "grads");
      } catch (const std::invalid_argument&) {  // say which gradient (the name is built only for errors)
        gr = array_ref(ga, fn, ("grads[" + std::to_string(i) + "]").c_str());
      }
      octopt::DType gd;
      const octopt::DType pd = plan_->tensor_dtype(i);
      const bool bits_of_bf16 = bf16_bits_[i] && gr.dtype == nb::dtype<std::uint16_t>();
      if (bits_of_bf16)
        gd = octopt::DType::bf16;
      else if (!is_float_dtype(gr, &gd) || (gd != pd && gd != octopt::DType::f32))
        throw nb::type_error((std::string(fn) + ": argument 'grads[" + std::to_string(i) +
                              "]' must be float32 or the parameter's dtype (" + octopt::dtype_name(pd) + ")")
                                 .c_str());
      const std::vector<std::int64_t>& pshape = plan_->tensor_shape(i);
      bool same = ga.ndim() == pshape.size();
      for (std::size_t d = 0; same && d < pshape.size(); ++d) same = std::int64_t(ga.shape(d)) == pshape[d];
      if (!same) {
        std::vector<std::int64_t> gshape;
        for (std::size_t d = 0; d < ga.ndim(); ++d) gshape.push_back(std::int64_t(ga.shape(d)));
        const std::string sizes =
            gr.size != numel_[i] ? " (" + std::to_string(gr.size) + " vs " + std::to_string(numel_[i]) + " elements)"
                                 : "";
        throw std::invalid_argument(std::string(fn) + ": argument 'grads[" + std::to_string(i) + "]' has shape " +
                                    shape_str(gshape) + " but parameter " + std::to_string(i) + " has shape " +
                                    shape_str(pshape) + sizes);
      }
      const int gdev = device_of(gr);
      if (gdev != dev)
        throw std::invalid_argument(std::string(fn) + ": argument 'grads[" + std::to_string(i) + "]' is on " +
                                    where(gdev) + " but its parameter is on " + where(dev));
      check_grad_alias(fn, i, gr.data, std::size_t(gr.size) * octopt::dtype_size(gd), plan_->tensor_data(i),
                       std::size_t(numel_[i]) * octopt::dtype_size(pd));
      ptrs_[i] = gr.data;
      dtypes_[i] = gd;
      hold.push_back(std::move(g));
    }
  }

  std::shared_ptr<FrameworkAllocator> alloc_;
  std::unique_ptr<octopt::StepPlan> plan_;
  std::vector<nb::object> params_;  // the parameters stay alive while the plan steps them
  std::vector<std::int64_t> numel_;
  std::vector<bool> bf16_bits_;    // per tensor: added as the uint16 bits of a NumPy bfloat16 array
  std::vector<const void*> ptrs_;  // per step: the gradients' addresses and dtypes
  std::vector<octopt::DType> dtypes_;
};

}  // namespace

void export_step_plan(nb::module_& m) {
  // Test aids (the CUDA launch tests): count what a step records into a CUDA graph.
  m.def(
      "_cuda_begin_capture", [](std::uintptr_t stream) { octopt::cuda::begin_capture(as_stream(stream)); },
      nb::arg("stream"));
  m.def(
      "_cuda_end_capture_count_nodes",
      [](std::uintptr_t stream) { return octopt::cuda::end_capture_count_nodes(as_stream(stream)); },
      nb::arg("stream"));
  nb::class_<PyStepPlan>(m, "StepPlan")
      .def(nb::init<const std::string&, std::uint64_t, nb::object, bool, float, bool, nb::object, const std::string&,
                    bool>(),
           nb::arg("kind"), nb::arg("seed"), nb::arg("stochastic_rounding").none(), nb::arg("stochastic_bf16"),
           nb::arg("percentile"), nb::arg("strict"), nb::arg("make_array"), nb::arg("fn"),
           nb::arg("signed_maps") = false)
      .def("add_group", &PyStepPlan::add_group, nb::arg("hparams"), nb::arg("layout"), nb::arg("fn"))
      .def(
          "set_hparams",
          [](PyStepPlan& p, int g, const octopt::HyperParams& hp, const std::string& fn) {
            p.plan().set_hparams(g, hp, fn.c_str());
          },
          nb::arg("group"), nb::arg("hparams"), nb::arg("fn"))
      .def(
          "hparams", [](PyStepPlan& p, int g) { return p.plan().hparams(g); }, nb::arg("group"))
      .def(
          "layout_options", [](PyStepPlan& p, int g) { return p.plan().layout_options(g); }, nb::arg("group"))
      .def("add_tensor", &PyStepPlan::add_tensor, nb::arg("group"), nb::arg("param"), nb::arg("fn"),
           nb::arg("bf16_bits") = false)
      .def("tensor_state", &PyStepPlan::tensor_state, nb::arg("i"))
      .def(
          "slot_form", [](PyStepPlan& p, std::size_t i, int slot) { return octopt::plan_slot_form(p.plan(), i, slot); },
          nb::arg("i"), nb::arg("slot"))
      .def(
          "export_slot",
          [](PyStepPlan& p, std::size_t i, int slot, const octopt::SlotForm& form, HostOut values,
             std::optional<HostOut> absmax, const std::string& where, const std::vector<std::string>& keys) {
            const octopt::SlotTarget t = slot_target(form, values, absmax, "export_slot");
            nb::gil_scoped_release release;
            octopt::export_slot(p.plan(), i, slot, form, t, names_of(where, keys));
          },
          nb::arg("i"), nb::arg("slot"), nb::arg("form"), nb::arg("out_values").noconvert(),
          nb::arg("out_absmax").noconvert().none(), nb::arg("where"), nb::arg("keys"))
      .def(
          "import_slot",
          [](PyStepPlan& p, std::size_t i, int slot, const octopt::SlotForm& form, HostIn values,
             std::optional<HostIn> absmax, const std::string& where, const std::vector<std::string>& keys) {
            SlotArrays held;
            const octopt::SlotSource s = slot_source(values, absmax, "import_slot", held);
            nb::gil_scoped_release release;
            octopt::import_slot(p.plan(), i, slot, form, s, names_of(where, keys));
          },
          nb::arg("i"), nb::arg("slot"), nb::arg("form"), nb::arg("values").noconvert(),
          nb::arg("absmax").noconvert().none(), nb::arg("where"), nb::arg("keys"))
      .def("tensor_block_size", [](PyStepPlan& p, std::size_t i) { return p.plan().tensor_block_size(i); })
      .def("step", &PyStepPlan::step, nb::arg("grads"), nb::arg("stream") = 0)
      .def("step_addresses", &PyStepPlan::step_addresses, nb::arg("addresses"), nb::arg("dtypes"),
           nb::arg("stream") = 0)
      .def("upload", &PyStepPlan::upload, nb::arg("grads"), nb::arg("stream") = 0)
      .def("tensor_steps", [](PyStepPlan& p) { return p.plan().tensor_steps(); })
      .def(
          "set_tensor_steps",
          [](PyStepPlan& p, const std::vector<std::int64_t>& s, const std::string& fn) {
            p.plan().set_tensor_steps(s, fn.c_str());
          },
          nb::arg("steps"), nb::arg("fn"))
      .def("tensor_mu_products", [](PyStepPlan& p) { return p.plan().tensor_mu_products(); })
      .def(
          "set_tensor_mu_products",
          [](PyStepPlan& p, const std::vector<float>& v, const std::string& fn) {
            p.plan().set_tensor_mu_products(v, fn.c_str());
          },
          nb::arg("values"), nb::arg("fn"))
      .def(
          "skipped_blocks", [](PyStepPlan& p, bool last) { return p.plan().skipped_blocks(last); }, nb::arg("last"))
      .def("trust_ratios", [](PyStepPlan& p) { return p.plan().trust_ratios(); })
      .def("state_bytes", [](PyStepPlan& p) { return p.plan().state_bytes(); })
      .def(
          "save",
          [](PyStepPlan& p, const std::string& path) {
            nb::gil_scoped_release release;
            p.plan().save(path);
          },
          nb::arg("path"))
      .def(
          "load",
          [](PyStepPlan& p, const std::string& path) {
            nb::gil_scoped_release release;
            p.plan().load(path);
          },
          nb::arg("path"))
      .def_prop_ro("device", [](PyStepPlan& p) { return p.plan().device(); })
      .def_prop_rw(
          "global_step", [](PyStepPlan& p) { return p.plan().global_step(); },
          [](PyStepPlan& p, std::int64_t s) { p.plan().set_global_step(s); });
}
