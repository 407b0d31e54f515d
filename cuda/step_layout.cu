// Layout of a fused step's device tables (step_layout.cuh).
#include "step_layout.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "check.cuh"
#include "octopt/blockwise.hpp"
#include "optim_kernels.cuh"

namespace octopt::cuda::detail {

namespace {

std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }

template <class P>
P* at(void* base, std::size_t off) {
  return reinterpret_cast<P*>(static_cast<unsigned char*>(base) + off);
}

}  // namespace

StepLayout layout_step(const StepConfig& cfg, const StepTensor* tensors, std::size_t n_tensors, const int* groups,
                       int n_groups, const char* fn) {
  const std::string f(fn);
  validate_step(cfg, tensors, n_tensors, fn);
  if (n_tensors > std::size_t(1) << 30) throw std::invalid_argument(f + ": too many tensors");
  if (n_groups < 1 && n_tensors > 0) throw std::invalid_argument(f + ": no parameter groups");
  const bool norms = optim_uses_trust_ratio(cfg.kind);
  const int nstates = optim_num_states(cfg.kind);

  StepLayout L;
  L.tensors.resize(n_tensors);
  L.tile_offsets.assign(n_tensors + 1, 0);
  L.mu_products.resize(n_tensors);
  std::int64_t blocks = 0, chunks = 0;
  int max_block = 32;
  for (std::size_t i = 0; i < n_tensors; ++i) {
    const StepTensor& s = tensors[i];
    if (groups[i] < 0 || groups[i] >= n_groups)
      throw std::invalid_argument(f + ": tensor " + std::to_string(i) + ": group index out of range");
    DevTensor& t = L.tensors[i];
    std::memset(&t, 0, sizeof t);
    t.param = s.param;
    t.n = s.n;
    t.block_size = s.block_size;
    t.blocks_per_tile = int(std::max<std::int64_t>(1, kTileElems / s.block_size));
    t.blocks_per_chunk = int(chunk_blocks(s.block_size));
    t.group = groups[i];
    t.param_dtype = std::int32_t(s.param_dtype);
    t.rng_stream = s.rng_stream;
    L.mu_products[i] = s.mu_product;
    const std::int64_t nb = block_count(s.n, s.block_size);
    t.block_begin = blocks;
    t.chunk_begin = chunks;
    t.n_chunks = chunk_count(s.n, s.block_size);
    blocks += nb;
    chunks += t.n_chunks;
    for (int k = 0; k < kMaxStateSlots; ++k) {
      t.state[k].data = s.state[k].data;
      t.state[k].absmax = s.state[k].absmax;
      t.state[k].bits = s.state[k].bits;
      t.state[k].codebook = s.state[k].codebook;
      t.state[k].stochastic = s.state[k].stochastic ? 1 : 0;
    }
    L.tile_offsets[i + 1] = L.tile_offsets[i] + (nb + t.blocks_per_tile - 1) / t.blocks_per_tile;
    max_block = std::max(max_block, s.block_size);
  }
  const std::int64_t tiles = L.tile_offsets[n_tensors];
  if (tiles > 0x7fffffff) throw std::invalid_argument(f + ": too many blocks for one launch");

  const int n_stage = norms ? std::max(nstates, 2) : nstates;
  L.smem = sizeof(Codebook) * std::size_t(nstates) + sizeof(float) * std::size_t(max_block) * std::size_t(1 + n_stage);
  L.args_bytes = args_bytes(int(n_tensors), n_groups);

  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = off;
    off = align_up(off + bytes, 256);
    return here;
  };
  L.o_tensors = take(sizeof(DevTensor) * n_tensors);
  L.o_tiles = take(sizeof(std::int64_t) * (n_tensors + 1));
  L.o_cb = take(sizeof(Codebook) * std::size_t(std::max(cfg.num_codebooks, 0)));
  L.o_mu = take(sizeof(float) * n_tensors);
  L.o_args = take(L.args_bytes);
  L.o_steps = take(sizeof(std::int64_t) * n_tensors);
  L.o_counters = take(sizeof(DevCounters));
  L.o_trust = take(sizeof(float) * n_tensors);
  L.o_tile_counters = take(norms ? sizeof(unsigned int) * n_tensors : 0);
  L.o_block_partials = take(norms ? sizeof(double) * 2 * std::size_t(blocks) : 0);
  L.o_chunk_partials = take(norms ? sizeof(double) * 2 * std::size_t(chunks) : 0);
  L.total = off;

  Tables& tb = L.tables;
  tb.kind = cfg.kind;
  tb.n_tensors = int(n_tensors);
  tb.n_stage = n_stage;
  tb.n_codebooks_smem = nstates;
  tb.max_block = max_block;
  tb.n_tiles = tiles;
  return L;
}

std::vector<unsigned char> StepLayout::image(const StepConfig& cfg) const {
  std::vector<unsigned char> img(o_steps, 0);
  if (!tensors.empty()) std::memcpy(img.data() + o_tensors, tensors.data(), sizeof(DevTensor) * tensors.size());
  std::memcpy(img.data() + o_tiles, tile_offsets.data(), sizeof(std::int64_t) * tile_offsets.size());
  if (cfg.num_codebooks > 0)
    std::memcpy(img.data() + o_cb, cfg.codebooks, sizeof(Codebook) * std::size_t(cfg.num_codebooks));
  if (!mu_products.empty()) std::memcpy(img.data() + o_mu, mu_products.data(), sizeof(float) * mu_products.size());
  return img;
}

Tables StepLayout::bind(void* base) const {
  const bool norms = optim_uses_trust_ratio(tables.kind);
  Tables tb = tables;
  tb.tensors = at<const DevTensor>(base, o_tensors);
  tb.tile_offsets = at<const std::int64_t>(base, o_tiles);
  tb.codebooks = at<const Codebook>(base, o_cb);
  tb.args = at<const unsigned char>(base, o_args);
  tb.steps = at<std::int64_t>(base, o_steps);
  tb.mu_product = at<float>(base, o_mu);
  tb.counters = at<DevCounters>(base, o_counters);
  tb.trust = at<float>(base, o_trust);
  tb.tile_counters = norms ? at<unsigned int>(base, o_tile_counters) : nullptr;
  tb.block_partials = norms ? at<double>(base, o_block_partials) : nullptr;
  tb.chunk_partials = norms ? at<double>(base, o_chunk_partials) : nullptr;
  return tb;
}

// The limit is one setting per device and kernel, shared by every plan and XLA call on the device:
// setting it to what this plan needs would lower it under an earlier plan that needs more (an AdEMAMix
// plan at block size 4096, 71,764 B, then an Adam plan, 53,304 B: the AdEMAMix step then fails at
// launch). So it is raised once to the most the device allows and never lowered; the limit does not
// change occupancy, which follows the shared memory a launch actually asks for.
void reserve_step_smem(std::size_t smem) {
  const std::size_t fixed = step_kernel_static_smem();
  if (smem + fixed <= 48 * 1024) return;
  int device = 0, optin = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  if (smem + fixed > std::size_t(optin))
    throw std::invalid_argument("step: the fused step needs " + std::to_string(smem + fixed) +
                                " bytes of shared memory per block at this block size and optimizer; device " +
                                std::to_string(device) + " allows " + std::to_string(optin) +
                                " (use a smaller block_size)");
  set_step_kernel_smem(std::size_t(optin) - fixed);
}

}  // namespace octopt::cuda::detail
