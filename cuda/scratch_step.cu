// Device side of octopt.optax's CUDA XLA FFI handler (scratch_step.hpp): the tables of a call written
// into XLA's scratch memory, the device-computed hyper-parameters and step counters, the fused
// step kernel of the CUDA backend over them, and p_new - p in updates mode.
#include "scratch_step.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "check.cuh"
#include "octopt/numerics/convert.hpp"
#include "octopt/step_setup.hpp"
#include "optim_kernels.cuh"
#include "step_layout.cuh"

namespace octopt::cuda::xla {

using detail::check;

namespace {

// A piece of the host-built tables, passed by value as a kernel parameter: with the destination
// and the length the parameters stay under the classic 4 KB limit of every architecture.
constexpr unsigned kPieceBytes = 3968;
struct Piece {
  unsigned char bytes[kPieceBytes];
};
static_assert(sizeof(Piece) + sizeof(void*) + sizeof(unsigned) <= 4096, "kernel parameters over 4 KB");

__global__ void put_piece(unsigned char* dst, Piece piece, unsigned len) {
  for (unsigned i = threadIdx.x; i < len; i += blockDim.x) dst[i] = piece.bytes[i];
}

struct HpSource {
  double hp_static[kNumHyperParams];
  long long dynamic_mask;
  long long flags;
};

// One block: the call's HyperParams (group 0 of the argument blob) and step counters, from the
// device operands. A step that cannot be taken (a non-finite hyper-parameter, a step < 1, a NAdam
// mu_product outside [0, 1]: what validate_step refuses on the CPU) clears every gradient pointer,
// so that the fused kernel leaves every tensor (and its mu_product) as it is.
__global__ void prepare_step(HpSource src, const float* hp_dynamic, const std::int32_t* step, const float* mu_products,
                             unsigned char* args, std::int64_t* steps, detail::DevCounters* counters, int n_tensors) {
  __shared__ int ok;
  __shared__ long long taken;  // steps taken before this one
  int mu_ok = 1;
  if (mu_products)
    for (int i = int(threadIdx.x); i < n_tensors; i += int(blockDim.x))
      mu_ok = mu_ok && mu_products[i] >= 0.0f && mu_products[i] <= 1.0f;  // false for NaN
  mu_ok = __syncthreads_and(mu_ok);
  if (threadIdx.x == 0) {
    double hp[kNumHyperParams];
    bool finite = true;
    for (unsigned k = 0; k < kNumHyperParams; ++k) {
      hp[k] = (src.dynamic_mask >> k) & 1 ? double(hp_dynamic[k]) : src.hp_static[k];
      finite = finite && hp[k] - hp[k] == 0.0;  // false for NaN and +-Inf
    }
    const long long s = *step;
    ok = finite && s >= 1 && mu_ok;
    taken = ok ? s - 1 : 0;
    *reinterpret_cast<HyperParams*>(args + sizeof(detail::DevHeader) +
                                    sizeof(detail::DevGrad) * std::size_t(n_tensors)) =
        hparams_from_array(hp, src.flags);
    counters->global_step = static_cast<unsigned long long>(taken);
  }
  __syncthreads();
  detail::DevGrad* grads = reinterpret_cast<detail::DevGrad*>(args + sizeof(detail::DevHeader));
  for (int i = int(threadIdx.x); i < n_tensors; i += int(blockDim.x)) {
    steps[i] = taken;
    if (!ok) grads[i].ptr = nullptr;
  }
}

struct SubTensor {
  void* out;       // p_new on entry, p_new - p on exit
  const void* in;  // p
  std::int64_t n;
  std::int32_t dtype;
  std::int32_t pad;
};

// updates = p_new - p (numerics/convert.hpp's update_from_params, as the CPU handler's
// octopt::params_to_updates); blockIdx.y picks the tensor.
__global__ void subtract_kernel(const SubTensor* tensors, int first) {
  const SubTensor s = tensors[first + int(blockIdx.y)];
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < s.n; i += stride) {
    switch (DType(s.dtype)) {
      case DType::f32:
        update_from_params<DType::f32>(s.out, s.in, i);
        break;
      case DType::f16:
        update_from_params<DType::f16>(s.out, s.in, i);
        break;
      case DType::bf16:
        update_from_params<DType::bf16>(s.out, s.in, i);
        break;
    }
  }
}

std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

}  // namespace

struct Launch::Impl {
  detail::StepLayout layout;
  std::size_t o_step = 0;  // the step tables' offset in scratch (after the subtract table)
  std::size_t total = 0;
  std::vector<unsigned char> image;  // scratch [0, image.size()): subtract table, then the step tables
  HpSource hp{};
  const float* hp_dynamic = nullptr;
  const std::int32_t* step = nullptr;
  float* mu_products = nullptr;  // NAdam: the call's tensor_scalars result, the kernels' mu_product table
  std::size_t n = 0;
  bool updates = false;
  std::int64_t max_n = 0;
};

Launch::Launch(const Call& c, const char* fn) : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  // The per-tensor scalar state (NAdam's mu_product, one per tensor) is the call's tensor_scalars: the
  // kernels read and advance it there, in place of the table a DevicePlan keeps.
  const std::size_t n_scalars = tensor_scalar_defs(c.cfg.kind).size();
  if (n_scalars > 1)
    throw std::invalid_argument(std::string(fn) + ": internal: more than one per-tensor scalar per tensor");
  if (n_scalars == 1 && c.n > 0 && !c.tensor_scalars)
    throw std::invalid_argument(std::string(fn) + ": internal: the per-tensor scalar state is missing");
  I.mu_products = n_scalars == 1 ? c.tensor_scalars : nullptr;
  std::vector<int> groups(c.n, 0);
  I.layout = detail::layout_step(c.cfg, c.tensors, c.n, groups.data(), 1, fn);
  I.n = c.n;
  I.updates = c.params_in != nullptr;
  const std::size_t sub_bytes = I.updates ? align_up(sizeof(SubTensor) * c.n, 256) : 0;
  I.o_step = sub_bytes;
  I.total = sub_bytes + I.layout.total;
  const std::vector<unsigned char> tables = I.layout.image(c.cfg);
  I.image.assign(sub_bytes + tables.size(), 0);
  std::memcpy(I.image.data() + sub_bytes, tables.data(), tables.size());
  // The argument blob: header and gradients (the HyperParams are written by prepare_step).
  unsigned char* args = I.image.data() + sub_bytes + I.layout.o_args;
  detail::DevHeader hdr{};
  hdr.seed = c.cfg.seed;
  hdr.stochastic_state = c.cfg.stochastic_state ? 1u : 0u;
  hdr.stochastic_bf16 = c.cfg.stochastic_bf16 ? 1u : 0u;
  hdr.percentile = 0.0f;
  std::memcpy(args, &hdr, sizeof hdr);
  for (std::size_t i = 0; i < c.n; ++i) {
    detail::DevGrad g{};
    g.ptr = c.tensors[i].grad;
    g.dtype = std::int32_t(c.tensors[i].grad_dtype);
    std::memcpy(args + sizeof(detail::DevHeader) + sizeof(detail::DevGrad) * i, &g, sizeof g);
    I.max_n = std::max(I.max_n, c.tensors[i].n);
    if (!I.updates) continue;
    SubTensor s{};
    s.out = c.tensors[i].param;
    s.in = c.params_in[i];
    s.n = c.tensors[i].n;
    s.dtype = std::int32_t(c.tensors[i].param_dtype);
    std::memcpy(I.image.data() + sizeof(SubTensor) * i, &s, sizeof s);
  }
  std::memcpy(I.hp.hp_static, c.hp_static, sizeof I.hp.hp_static);
  I.hp.dynamic_mask = c.dynamic_mask;
  I.hp.flags = c.flags;
  I.hp_dynamic = c.hp_dynamic;
  I.step = c.step;
}

Launch::~Launch() = default;

std::size_t Launch::scratch_bytes() const { return impl_->total; }

void Launch::enqueue(void* scratch, cudaStream_t stream) const {
  const Impl& I = *impl_;
  const detail::StepLayout& L = I.layout;
  auto* base = static_cast<unsigned char*>(scratch);
  // 1. The tables, piece by piece; then zero steps, counters, trust and tile counters (the
  //    partials are written before they are read).
  for (std::size_t off = 0; off < I.image.size(); off += kPieceBytes) {
    const unsigned len = unsigned(std::min<std::size_t>(kPieceBytes, I.image.size() - off));
    Piece piece;
    std::memcpy(piece.bytes, I.image.data() + off, len);
    put_piece<<<1, 256, 0, stream>>>(base + off, piece, len);
    detail::check_launch("octopt.optax: table upload kernel (CUDA)");
  }
  unsigned char* step_base = base + I.o_step;
  check(cudaMemsetAsync(step_base + L.o_steps, 0, L.o_block_partials - L.o_steps, stream),
        "octopt.optax: cudaMemsetAsync(counters)");
  // 2. Hyper-parameters and step counters from the device operands.
  detail::Tables tb = L.bind(step_base);
  if (I.mu_products) tb.mu_product = I.mu_products;
  prepare_step<<<1, 256, 0, stream>>>(I.hp, I.hp_dynamic, I.step, I.mu_products, step_base + L.o_args, tb.steps,
                                      tb.counters, int(I.n));
  detail::check_launch("octopt.optax: step preparation kernel (CUDA)");
  // 3. The fused step.
  detail::reserve_step_smem(L.smem);
  if (optim_uses_trust_ratio(tb.kind)) {
    detail::launch_step(tb, detail::kPhaseNorms, L.smem, stream);
    detail::launch_step(tb, detail::kPhaseApply, L.smem, stream);
  } else {
    detail::launch_step(tb, detail::kPhaseSingle, L.smem, stream);
  }
  // 4. updates = p_new - p.
  if (I.updates && I.max_n > 0) {
    const unsigned gx = unsigned(std::min<std::int64_t>((I.max_n + 255) / 256, 2048));
    for (std::size_t first = 0; first < I.n; first += 65535) {
      const unsigned gy = unsigned(std::min<std::size_t>(65535, I.n - first));
      subtract_kernel<<<dim3(gx, gy), 256, 0, stream>>>(reinterpret_cast<const SubTensor*>(base), int(first));
      detail::check_launch("octopt.optax: updates kernel (CUDA)");
    }
  }
}

}  // namespace octopt::cuda::xla
