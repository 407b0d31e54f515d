// CUDA fused optimizer step: the DevicePlan (device tables built once) and the per-step host
// work (upload of changed arguments from pinned memory, kernel launches on the caller's stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.cuh"
#include "octopt/blockwise.hpp"
#include "octopt/optim.hpp"
#include "optim_kernels.cuh"

namespace octopt::cuda {

using detail::check;

namespace {

constexpr int kRing = 8;  // pinned staging buffers in flight before the host waits for the oldest copy

std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

// Makes `device` current for the scope (plans may live on any GPU), restoring the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != prev_) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
};

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
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    (void)cudaSetDevice(device);
    (void)cudaDeviceSynchronize();  // kernels of this plan may still be running
    for (auto& e : ring_events)
      if (e) (void)cudaEventDestroy(e);
    if (done) (void)cudaEventDestroy(done);
    if (pinned) (void)cudaFreeHost(pinned);
    if (dev) (void)cudaFree(dev);
    if (have_prev) (void)cudaSetDevice(prev);
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
    check(cudaMemcpyAsync(dev_args, src, args_bytes, cudaMemcpyHostToDevice, stream), "step: cudaMemcpyAsync(arguments)");
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

DevicePlan::DevicePlan(const StepConfig& cfg, const ParamSlot* slots, std::size_t n_slots, const int* groups,
                       int n_groups, int device, const char* fn)
    : impl_(new Impl()) {
  Impl& I = *impl_;
  const std::string f(fn);
  validate_step(cfg, slots, n_slots, fn);
  if (n_slots > std::size_t(1) << 30) throw std::invalid_argument(f + ": too many tensors");
  if (n_groups < 1 && n_slots > 0) throw std::invalid_argument(f + ": no parameter groups");
  I.device = device;
  I.kind = cfg.kind;
  I.seed = cfg.seed;
  I.n = int(n_slots);
  I.n_groups = n_groups;
  const bool norms = cfg.kind == OptimKind::lamb || cfg.kind == OptimKind::lars;
  const int nstates = optim_num_states(cfg.kind);

  std::vector<detail::DevTensor> tensors(n_slots);
  std::vector<std::int64_t> tile_offsets(n_slots + 1, 0);
  std::int64_t blocks = 0, chunks = 0;
  int max_block = 32;
  for (std::size_t i = 0; i < n_slots; ++i) {
    const ParamSlot& s = slots[i];
    if (groups[i] < 0 || groups[i] >= n_groups)
      throw std::invalid_argument(f + ": tensor " + std::to_string(i) + ": group index out of range");
    detail::DevTensor& t = tensors[i];
    std::memset(&t, 0, sizeof t);
    t.param = s.param;
    t.n = s.n;
    t.block_size = s.block_size;
    t.blocks_per_tile = int(std::max<std::int64_t>(1, detail::kTileElems / s.block_size));
    t.blocks_per_chunk = int(std::max<std::int64_t>(1, detail::kChunkElems / s.block_size));
    t.group = groups[i];
    t.param_dtype = std::int32_t(s.param_dtype);
    t.rng_stream = s.rng_stream;
    const std::int64_t nb = num_blocks(s.n, s.block_size);
    t.block_begin = blocks;
    t.chunk_begin = chunks;
    t.n_chunks = (nb + t.blocks_per_chunk - 1) / t.blocks_per_chunk;
    blocks += nb;
    chunks += t.n_chunks;
    for (int k = 0; k < 3; ++k) {
      t.state[k].data = s.state[k].data;
      t.state[k].absmax = s.state[k].absmax;
      t.state[k].bits = s.state[k].bits;
      t.state[k].codebook = s.state[k].codebook;
      t.state[k].stochastic = s.state[k].stochastic ? 1 : 0;
    }
    tile_offsets[i + 1] = tile_offsets[i] + (nb + t.blocks_per_tile - 1) / t.blocks_per_tile;
    max_block = std::max(max_block, s.block_size);
    I.param_dtypes.push_back(s.param_dtype);
    I.sizes.push_back(s.n);
  }
  I.tiles = tile_offsets[n_slots];
  if (I.tiles > 0x7fffffff) throw std::invalid_argument(f + ": too many blocks for one launch");
  I.sizes.shrink_to_fit();

  const int n_stage = norms ? std::max(nstates, 2) : nstates;
  const std::size_t dyn = sizeof(Codebook) * std::size_t(nstates) + sizeof(float) * std::size_t(max_block) * std::size_t(1 + n_stage);
  I.args_bytes = detail::args_bytes(I.n, n_groups);

  // One allocation: tensors | tile offsets | codebooks | args | steps | counters | trust |
  // tile counters | partials. Zeroed once: every counter is zero between steps.
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t at = off;
    off = align_up(off + bytes, 256);
    return at;
  };
  const std::size_t o_tensors = take(sizeof(detail::DevTensor) * n_slots);
  const std::size_t o_tiles = take(sizeof(std::int64_t) * (n_slots + 1));
  const std::size_t o_cb = take(sizeof(Codebook) * std::size_t(std::max(cfg.num_codebooks, 0)));
  const std::size_t o_args = take(I.args_bytes);
  const std::size_t o_steps = take(sizeof(std::int64_t) * n_slots);
  const std::size_t o_counters = take(sizeof(detail::DevCounters));
  const std::size_t o_trust = take(sizeof(float) * n_slots);
  const std::size_t o_tile_counters = take(norms ? sizeof(unsigned int) * n_slots : 0);
  const std::size_t o_block_partials = take(norms ? sizeof(double) * 2 * std::size_t(blocks) : 0);
  const std::size_t o_chunk_partials = take(norms ? sizeof(double) * 2 * std::size_t(chunks) : 0);
  const std::size_t total = off;

  DeviceGuard guard(device);
  check(cudaMalloc(&I.dev, total), (f + ": cudaMalloc of the device step tables").c_str());
  auto* base = static_cast<unsigned char*>(I.dev);
  check(cudaMemset(I.dev, 0, total), (f + ": cudaMemset").c_str());
  check(cudaMemcpy(base + o_tensors, tensors.data(), sizeof(detail::DevTensor) * n_slots, cudaMemcpyHostToDevice),
        (f + ": cudaMemcpy(tensors)").c_str());
  check(cudaMemcpy(base + o_tiles, tile_offsets.data(), sizeof(std::int64_t) * (n_slots + 1), cudaMemcpyHostToDevice),
        (f + ": cudaMemcpy(tiles)").c_str());
  if (cfg.num_codebooks > 0)
    check(cudaMemcpy(base + o_cb, cfg.codebooks, sizeof(Codebook) * std::size_t(cfg.num_codebooks),
                     cudaMemcpyHostToDevice),
          (f + ": cudaMemcpy(codebooks)").c_str());
  check(cudaMallocHost(reinterpret_cast<void**>(&I.pinned), I.args_bytes * kRing),
        (f + ": cudaMallocHost of the staging buffers").c_str());
  for (auto& e : I.ring_events) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&I.done, cudaEventDisableTiming), "cudaEventCreate");

  detail::Tables& tb = I.tables;
  tb.kind = cfg.kind;
  tb.n_tensors = I.n;
  tb.n_stage = n_stage;
  tb.n_codebooks_smem = nstates;
  tb.max_block = max_block;
  tb.tensors = reinterpret_cast<const detail::DevTensor*>(base + o_tensors);
  tb.tile_offsets = reinterpret_cast<const std::int64_t*>(base + o_tiles);
  tb.codebooks = reinterpret_cast<const Codebook*>(base + o_cb);
  tb.args = base + o_args;
  tb.steps = reinterpret_cast<std::int64_t*>(base + o_steps);
  tb.counters = reinterpret_cast<detail::DevCounters*>(base + o_counters);
  tb.n_tiles = I.tiles;
  tb.trust = reinterpret_cast<float*>(base + o_trust);
  tb.tile_counters = norms ? reinterpret_cast<unsigned int*>(base + o_tile_counters) : nullptr;
  tb.block_partials = norms ? reinterpret_cast<double*>(base + o_block_partials) : nullptr;
  tb.chunk_partials = norms ? reinterpret_cast<double*>(base + o_chunk_partials) : nullptr;
  I.dev_args = base + o_args;

  I.smem = dyn;
  if (dyn + detail::step_kernel_static_smem() > 48 * 1024) detail::set_step_kernel_smem(dyn);
}

DevicePlan::~DevicePlan() = default;
int DevicePlan::device() const { return impl_->device; }
std::size_t DevicePlan::size() const { return std::size_t(impl_->n); }

void upload(DevicePlan& plan, const StepArgs& args, cudaStream_t stream) {
  DevicePlan::Impl& I = plan.impl();
  DeviceGuard guard(I.device);
  const std::vector<unsigned char> blob = I.make_blob(args, "upload");
  if (I.capturing(stream))
    throw std::invalid_argument("upload: argument 'stream' is being captured into a CUDA graph; upload before capture "
                                "or between replays");
  I.upload_blob(blob, stream);
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
      throw std::invalid_argument("step: during CUDA graph capture the arguments must equal those of the last eager "
                                  "step or upload(): " + I.what_changed(blob));
  } else {
    // Steps on different streams stay ordered (they share the state buffers and the tables).
    if (I.has_last && I.last_stream != stream) check(cudaStreamWaitEvent(stream, I.done, 0), "step: cudaStreamWaitEvent");
    if (changed) I.upload_blob(blob, stream);
  }
  const detail::Tables& tb = I.tables;
  // One launch (LAMB/LARS: two, because every tile of the update needs its tensor's trust ratio,
  // which needs all of that tensor's norms). The last tile of the final launch advances the step
  // counters, so nothing else is enqueued.
  if (I.kind == OptimKind::lamb || I.kind == OptimKind::lars) {
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
