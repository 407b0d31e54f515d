#pragma once
// The end of a fused step without another launch. Every thread block (tile) of a launch counts its
// arrival once it is done with everything another block will change; the last one to arrive does
// the bookkeeping that used to need a kernel of its own: the LAMB/LARS trust ratio of a tensor
// (norms pass) and the step and skipped-block counters (the step's final launch).
#include <cuda/atomic>

#include "octopt/numerics/chunking.hpp"
#include "octopt/numerics/hyper_params.hpp"
#include "octopt/numerics/schedules.hpp"
#include "octopt/numerics/trust_ratio.hpp"
#include "optim_device.cuh"

namespace octopt::cuda::detail {

// Counts this thread block's arrival on `*counter` and tells every thread whether it was the last
// of `expected`. Call from all threads of the block (it holds two barriers), after the block's last
// access that the last block depends on. Ordering (PTX memory model): the first barrier puts every
// thread's earlier accesses before thread 0's device-scope release (the acq_rel fetch_add), so the
// block that sees the final count sees them; its acquire and the second barrier put all its later
// accesses after every other block's earlier ones. Blocks that are not last only arrive.
__device__ __forceinline__ bool arrive_last(unsigned int* counter, unsigned int expected) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<unsigned int, ::cuda::thread_scope_device> count(*counter);
    last = count.fetch_add(1u, ::cuda::std::memory_order_acq_rel) == expected - 1u;
  }
  __syncthreads();
  return last != 0;
}

// LAMB/LARS trust ratio of tensor `ti`, by the last of its tiles to finish the norms pass: chunk
// sums in parallel (each a sequential sum of its blocks' partials), then the chunks in order,
// exactly as the CPU adds them (numerics/trust_ratio.hpp). `h`: the tensor's scalars of this step
// (eta, weight decay). Leaves the tensor's tile counter at zero for the next step.
__device__ inline void finish_norms(const Tables& tb, int ti, const SlotScalars& h) {
  const DevTensor& t = tb.tensors[ti];
  for (std::int64_t c = threadIdx.x; c < t.n_chunks; c += blockDim.x) {
    const BlockRange r = chunk_block_range(c, t.n, t.block_size);
    double a = 0.0, x = 0.0;
    add_pair_sums(tb.block_partials, t.block_begin + r.begin, t.block_begin + r.end, a, x);
    tb.chunk_partials[2 * (t.chunk_begin + c)] = a;
    tb.chunk_partials[2 * (t.chunk_begin + c) + 1] = x;
  }
  __syncthreads();  // the chunk sums of every thread, for thread 0
  if (threadIdx.x != 0) return;
  double pp = 0.0, xx = 0.0;
  add_pair_sums(tb.chunk_partials, t.chunk_begin, t.chunk_begin + t.n_chunks, pp, xx);
  tb.trust[ti] = trust_ratio(tb.kind, pp, xx, h.eta, h.weight_decay);
  tb.tile_counters[ti] = 0u;
}

// The bookkeeping of a step, by the last tile of its final launch to finish (every other tile has
// read the step counts, NAdam's mu products and the global step it needed): advance the step count
// (and NAdam's mu product, as the tiles derived it) of every tensor that was stepped, publish the
// skipped-block count, and leave the per-step counters at zero.
__device__ inline void finish_step(const Tables& tb) {
  const DevGrad* grads = args_grads(tb.args);
  const bool norms = optim_uses_trust_ratio(tb.kind);
  for (int i = int(threadIdx.x); i < tb.n_tensors; i += int(blockDim.x)) {
    if (!grads[i].ptr) continue;
    if (optim_has_tensor_scalar(tb.kind)) {
      const HyperParams& hp = args_hparams(tb.args, tb.n_tensors)[tb.tensors[i].group];
      // the step just taken, with the scalars tile_scalars derived for it
      SlotScalars s = scalars_for_step(tb.kind, hp, tb.steps[i] + 1);
      tb.mu_product[i] = advance_tensor_scalar(tb.kind, s, tb.mu_product[i]);
    }
    tb.steps[i] += 1;
    // The norms pass wrote the trust of every stepped tensor that has a tile; an empty tensor's
    // norms are 0, so its trust is 1, as every optimizer without trust ratios reports.
    if (!norms || tb.tile_offsets[i + 1] == tb.tile_offsets[i]) tb.trust[i] = 1.0f;
  }
  if (threadIdx.x == 0) {
    DevCounters& c = *tb.counters;
    const unsigned long long skipped = atomicExch(&c.skipped_step, 0ull);
    c.skipped_last = skipped;
    c.skipped_total += skipped;
    c.global_step += 1;
    c.tiles_done = 0u;
  }
}

}  // namespace octopt::cuda::detail
