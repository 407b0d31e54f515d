// CUDA fused optimizer step: the DevicePlan (device tables built once) and the per-step host
// work (upload of changed arguments from pinned memory, kernel launches on the caller's stream).
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.cuh"
#include "device_scope.cuh"
#include "octopt/optim.hpp"
#include "optim_kernels.cuh"
#include "step_layout.cuh"

namespace octopt::cuda {

using detail::check;

namespace {

constexpr int kRing = 8;  // pinned staging buffers in flight before the host waits for the oldest copy

// Plans may live on any GPU: every entry point runs on the plan's (device_scope.cuh).
using DeviceGuard = detail::DeviceScope;

// HyperParams has bool members (and so padding): it is written field by field into a zeroed
// blob so that comparing blobs byte by byte is meaningful.
void put_hparams(unsigned char* dst, const HyperParams& h) {
  HyperParams* d = reinterpret_cast<HyperParams*>(dst);
  d->lr = h.lr;
  d->beta1 = h.beta1;
  d->beta2 = h.beta2;
  d->beta3 = h.beta3;
  d->eps = h.eps;
  d->weight_decay = h.weight_decay;
  d->momentum = h.momentum;
  d->dampening = h.dampening;
  d->nesterov = h.nesterov;
  d->alpha = h.alpha;
  d->centered = h.centered;
  d->lr_decay = h.lr_decay;
  d->eta = h.eta;
  d->t_alpha = h.t_alpha;
  d->t_beta3 = h.t_beta3;
  d->bias_correction = h.bias_correction;
  d->maximize = h.maximize;
  d->decoupled_weight_decay = h.decoupled_weight_decay;
  d->momentum_decay = h.momentum_decay;
  d->eps_in_sqrt = h.eps_in_sqrt;
}

}  // namespace

struct DevicePlan::Impl {
  int device = 0;
  OptimKind kind = OptimKind::adam;
  std::uint64_t seed = 0;
  int n = 0, n_groups = 0;
  std::vector<DType> param_dtypes;
  std::vector<std::int64_t> sizes;
  detail::Tables tables{};
  std::int64_t tiles = 0;
  std::size_t smem = 0;
  void* dev = nullptr;  // one device allocation holds every table
  unsigned char* dev_args = nullptr;
  std::size_t args_bytes = 0;
  std::vector<unsigned char> last_args;  // what the device holds (valid when uploaded)
  bool uploaded = false;
  unsigned char* pinned = nullptr;  // kRing staging buffers
  cudaEvent_t ring_events[kRing] = {};
  bool ring_used[kRing] = {};
  int ring_next = 0;
  cudaEvent_t done = nullptr;  // recorded after each eager step
  cudaStream_t last_stream = nullptr;
  bool has_last = false;

  ~Impl() {
    // Destructors must not throw; a failure here only leaks.
    DeviceGuard guard(device, /*nothrow=*/true);
    if (!guard.ok()) return;
    (void)cudaDeviceSynchronize();  // kernels of this plan may still be running
    for (auto& e : ring_events)
      if (e) (void)cudaEventDestroy(e);
    if (done) (void)cudaEventDestroy(done);
    if (pinned) (void)cudaFreeHost(pinned);
    if (dev) (void)cudaFree(dev);
  }

  std::vector<unsigned char> make_blob(const StepArgs& a, const char* fn) const {
    std::vector<unsigned char> blob(args_bytes, 0);
    auto* hdr = reinterpret_cast<detail::DevHeader*>(blob.data());
    hdr->seed = seed;
    hdr->stochastic_state = a.stochastic_state ? 1u : 0u;
    hdr->stochastic_bf16 = a.stochastic_bf16 ? 1u : 0u;
    if (!(a.percentile >= 0.0f && a.percentile <= 100.0f))
      throw std::invalid_argument(std::string(fn) + ": argument 'percentile' must be in [0, 100], got " +
                                  std::to_string(a.percentile));
    hdr->percentile = a.percentile;
    auto* grads = reinterpret_cast<detail::DevGrad*>(blob.data() + sizeof(detail::DevHeader));
    for (int i = 0; i < n; ++i) {
      const void* g = a.grads ? a.grads[i] : nullptr;
      grads[i].ptr = g;
      if (!g) continue;
      const DType gd = a.grad_dtypes[i];
      if (gd != param_dtypes[std::size_t(i)] && gd != DType::f32)
        throw std::invalid_argument(std::string(fn) + ": argument 'grads[" + std::to_string(i) + "]' has dtype " +
                                    dtype_name(gd) + "; it must be float32 or the parameter's dtype (" +
                                    dtype_name(param_dtypes[std::size_t(i)]) + ")");
      grads[i].dtype = std::int32_t(gd);
    }
    unsigned char* hp = blob.data() + sizeof(detail::DevHeader) + sizeof(detail::DevGrad) * std::size_t(n);
    for (int g = 0; g < n_groups; ++g) put_hparams(hp + sizeof(HyperParams) * std::size_t(g), a.hparams[g]);
    return blob;
  }

  // Names the first difference between a blob and what the device holds (for capture errors).
  std::string what_changed(const std::vector<unsigned char>& blob) const {
    if (!uploaded) return "no eager step or upload() has run yet";
    const std::size_t g0 = sizeof(detail::DevHeader), h0 = g0 + sizeof(detail::DevGrad) * std::size_t(n);
    if (std::memcmp(blob.data(), last_args.data(), g0) != 0) return "stochastic rounding or percentile options changed";
    for (int i = 0; i < n; ++i)
      if (std::memcmp(blob.data() + g0 + 16 * std::size_t(i), last_args.data() + g0 + 16 * std::size_t(i), 16) != 0)
        return "argument 'grads[" + std::to_string(i) + "]' changed (address, dtype or None)";
    for (int g = 0; g < n_groups; ++g)
      if (std::memcmp(blob.data() + h0 + sizeof(HyperParams) * std::size_t(g),
                      last_args.data() + h0 + sizeof(HyperParams) * std::size_t(g), sizeof(HyperParams)) != 0)
        return "hyper-parameters of param group " + std::to_string(g) + " changed";
    return "arguments changed";
  }

  void upload_blob(const std::vector<unsigned char>& blob, cudaStream_t stream) {
    const int slot = ring_next;
    ring_next = (ring_next + 1) % kRing;
    // The pinned buffer may still be read by a copy enqueued kRing uploads ago: wait for that
    // copy only (normally long finished), never for the stream or the device.
    if (ring_used[slot]) check(cudaEventSynchronize(ring_events[slot]), "step: cudaEventSynchronize(staging)");
    unsigned char* src = pinned + std::size_t(slot) * args_bytes;
    std::memcpy(src, blob.data(), args_bytes);
    check(cudaMemcpyAsync(dev_args, src, args_bytes, cudaMemcpyHostToDevice, stream),
          "step: cudaMemcpyAsync(arguments)");
    check(cudaEventRecord(ring_events[slot], stream), "step: cudaEventRecord(staging)");
    ring_used[slot] = true;
    last_args = blob;
    uploaded = true;
  }

  bool capturing(cudaStream_t stream) const {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream, &st), "step: cudaStreamIsCapturing");
    return st != cudaStreamCaptureStatusNone;
  }
};

DevicePlan::DevicePlan(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const int* groups,
                       int n_groups, int device, const char* fn)
    : impl_(new Impl()) {
  Impl& I = *impl_;
  const std::string f(fn);
  const detail::StepLayout L = detail::layout_step(cfg, tensors, n_tensors, groups, n_groups, fn);
  I.device = device;
  I.kind = cfg.kind;
  I.seed = cfg.seed;
  I.n = int(n_tensors);
  I.n_groups = n_groups;
  for (std::size_t i = 0; i < n_tensors; ++i) {
    I.param_dtypes.push_back(tensors[i].param_dtype);
    I.sizes.push_back(tensors[i].n);
  }
  I.tiles = L.tables.n_tiles;
  I.args_bytes = L.args_bytes;

  // One allocation holds every table, zeroed once: every counter is zero between steps.
  DeviceGuard guard(device);
  check(cudaMalloc(&I.dev, L.total), (f + ": cudaMalloc of the device step tables").c_str());
  check(cudaMemset(I.dev, 0, L.total), (f + ": cudaMemset").c_str());
  const std::vector<unsigned char> image = L.image(cfg);
  check(cudaMemcpy(I.dev, image.data(), image.size(), cudaMemcpyHostToDevice), (f + ": cudaMemcpy(tables)").c_str());
  // Landed before the first step, which may run on a non-blocking stream (see write_steps).
  check(cudaDeviceSynchronize(), (f + ": cudaDeviceSynchronize").c_str());
  check(cudaMallocHost(reinterpret_cast<void**>(&I.pinned), I.args_bytes * kRing),
        (f + ": cudaMallocHost of the staging buffers").c_str());
  for (auto& e : I.ring_events) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&I.done, cudaEventDisableTiming), "cudaEventCreate");

  I.tables = L.bind(I.dev);
  I.dev_args = static_cast<unsigned char*>(I.dev) + L.o_args;
  I.smem = L.smem;
  detail::reserve_step_smem(L.smem);
}

DevicePlan::~DevicePlan() = default;
int DevicePlan::device() const { return impl_->device; }
std::size_t DevicePlan::size() const { return std::size_t(impl_->n); }

void upload(DevicePlan& plan, const StepArgs& args, cudaStream_t stream) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  const std::vector<unsigned char> blob = I.make_blob(args, "upload");
  if (I.capturing(stream))
    throw std::invalid_argument(
        "upload: argument 'stream' is being captured into a CUDA graph; upload before capture "
        "or between replays");
  // Ordered like a step: after the last step on another stream (it may still read the arguments a
  // kernel has not yet loaded), and before the next step on any stream (which waits for `done`).
  if (I.has_last && I.last_stream != stream)
    check(cudaStreamWaitEvent(stream, I.done, 0), "upload: cudaStreamWaitEvent");
  I.upload_blob(blob, stream);
  check(cudaEventRecord(I.done, stream), "upload: cudaEventRecord");
  I.last_stream = stream;
  I.has_last = true;
}

void step(DevicePlan& plan, const StepArgs& args, cudaStream_t stream) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  const std::vector<unsigned char> blob = I.make_blob(args, "step");
  const bool capturing = I.capturing(stream);
  const bool changed = !I.uploaded || blob != I.last_args;
  if (capturing) {
    // Under capture nothing but kernels may be recorded: the graph replays reading the device
    // tables, so the arguments must already be there.
    if (changed)
      throw std::invalid_argument(
          "step: during CUDA graph capture the arguments must equal those of the last eager "
          "step or upload(): " +
          I.what_changed(blob));
  } else {
    // Steps on different streams stay ordered (they share the state buffers and the tables).
    if (I.has_last && I.last_stream != stream)
      check(cudaStreamWaitEvent(stream, I.done, 0), "step: cudaStreamWaitEvent");
    if (changed) I.upload_blob(blob, stream);
  }
  const detail::Tables& tb = I.tables;
  // One launch (LAMB/LARS: two, because every tile of the update needs its tensor's trust ratio,
  // which needs all of that tensor's norms). The last tile of the final launch advances the step
  // counters, so nothing else is enqueued.
  if (optim_uses_trust_ratio(I.kind)) {
    detail::launch_step(tb, detail::kPhaseNorms, I.smem, stream);
    detail::launch_step(tb, detail::kPhaseApply, I.smem, stream);
  } else {
    detail::launch_step(tb, detail::kPhaseSingle, I.smem, stream);
  }
  if (!capturing) {
    check(cudaEventRecord(I.done, stream), "step: cudaEventRecord");
    I.last_stream = stream;
    I.has_last = true;
  }
}

std::int64_t skipped_blocks(DevicePlan& plan, bool last_step_only) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  check(cudaDeviceSynchronize(), "skipped_blocks: cudaDeviceSynchronize");
  detail::DevCounters c{};
  check(cudaMemcpy(&c, I.tables.counters, sizeof c, cudaMemcpyDeviceToHost), "skipped_blocks: cudaMemcpy");
  return std::int64_t(last_step_only ? c.skipped_last : c.skipped_total);
}

void read_steps(DevicePlan& plan, std::int64_t* per_tensor, std::int64_t* global_step) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  check(cudaDeviceSynchronize(), "read_steps: cudaDeviceSynchronize");
  if (per_tensor && I.n > 0)
    check(cudaMemcpy(per_tensor, I.tables.steps, sizeof(std::int64_t) * std::size_t(I.n), cudaMemcpyDeviceToHost),
          "read_steps: cudaMemcpy");
  if (global_step) {
    detail::DevCounters c{};
    check(cudaMemcpy(&c, I.tables.counters, sizeof c, cudaMemcpyDeviceToHost), "read_steps: cudaMemcpy");
    *global_step = std::int64_t(c.global_step);
  }
}

void write_steps(DevicePlan& plan, const std::int64_t* per_tensor, std::int64_t global_step) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  if (global_step < 0) throw std::invalid_argument("write_steps: argument 'global_step' must be >= 0");
  for (int i = 0; i < I.n; ++i)
    if (per_tensor[i] < 0) throw std::invalid_argument("write_steps: step counts must be >= 0");
  check(cudaDeviceSynchronize(), "write_steps: cudaDeviceSynchronize");
  if (I.n > 0)
    check(cudaMemcpy(I.tables.steps, per_tensor, sizeof(std::int64_t) * std::size_t(I.n), cudaMemcpyHostToDevice),
          "write_steps: cudaMemcpy");
  const unsigned long long g = static_cast<unsigned long long>(global_step);
  check(cudaMemcpy(&I.tables.counters->global_step, &g, sizeof g, cudaMemcpyHostToDevice), "write_steps: cudaMemcpy");
  // The copies ran on the legacy default stream, which a non-blocking stream of the caller does not
  // wait for, and a copy from pageable memory may return before it lands: the next step must see them.
  check(cudaDeviceSynchronize(), "write_steps: cudaDeviceSynchronize");
}

void read_mu_products(DevicePlan& plan, float* per_tensor) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  check(cudaDeviceSynchronize(), "read_mu_products: cudaDeviceSynchronize");
  if (I.n > 0)
    check(cudaMemcpy(per_tensor, I.tables.mu_product, sizeof(float) * std::size_t(I.n), cudaMemcpyDeviceToHost),
          "read_mu_products: cudaMemcpy");
}

void write_mu_products(DevicePlan& plan, const float* per_tensor) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  for (int i = 0; i < I.n; ++i)
    if (!(per_tensor[i] >= 0.0f && per_tensor[i] <= 1.0f))
      throw std::invalid_argument("write_mu_products: mu_product of tensor " + std::to_string(i) +
                                  " must be in [0, 1], got " + std::to_string(per_tensor[i]));
  check(cudaDeviceSynchronize(), "write_mu_products: cudaDeviceSynchronize");
  if (I.n > 0)
    check(cudaMemcpy(I.tables.mu_product, per_tensor, sizeof(float) * std::size_t(I.n), cudaMemcpyHostToDevice),
          "write_mu_products: cudaMemcpy");
  check(cudaDeviceSynchronize(), "write_mu_products: cudaDeviceSynchronize");  // as write_steps
}

std::vector<float> trust_ratios(DevicePlan& plan) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  check(cudaDeviceSynchronize(), "trust_ratios: cudaDeviceSynchronize");
  std::vector<float> out(std::size_t(I.n));
  if (I.n > 0)
    check(cudaMemcpy(out.data(), I.tables.trust, sizeof(float) * out.size(), cudaMemcpyDeviceToHost),
          "trust_ratios: cudaMemcpy");
  return out;
}

}  // namespace octopt::cuda
