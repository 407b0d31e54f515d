// CUDA kernels of the fused optimizer step. The per-element and per-block arithmetic (update rules,
// state slots, encoding and decoding, percentile ranks, chunking, trust ratios, RNG keys, step
// scalars) is the shared code of numerics/; this file holds only the block loop, loads/stores and
// reductions, in the same order as the CPU backend (cpu/kernels_impl.cpp), so that results are
// bit-identical with nearest rounding.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "check.cuh"
#include "octopt/numerics/codebook.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/numerics/hyper_params.hpp"
#include "octopt/numerics/percentile.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/numerics/schedules.hpp"
#include "octopt/numerics/state_slots.hpp"
#include "octopt/numerics/trust_ratio.hpp"
#include "octopt/numerics/update_rules.hpp"
#include "optim_kernels.cuh"
#include "step_finish.cuh"

namespace octopt::cuda::detail {
namespace {

constexpr int T = kStepThreads;
// One thread per lane of the block sums' fixed tree (numerics/trust_ratio.hpp), one per radix bin.
static_assert(T == kSumLanes && T % kSumWarp == 0, "the norms' summation tree needs one thread per lane");
constexpr int kRadixBins = 256;
static_assert(T == kRadixBins, "percentile selection: one thread per radix bin");

struct U3 {
  unsigned v[kMaxStateSlots];
};

struct MaxU {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

struct MaxU3 {
  __device__ U3 operator()(const U3& a, const U3& b) const {
    U3 r;
#pragma unroll
    for (int k = 0; k < kMaxStateSlots; ++k) r.v[k] = a.v[k] > b.v[k] ? a.v[k] : b.v[k];
    return r;
  }
};

__device__ __forceinline__ float load_state(const DevState& st, const Codebook& cb, float amax, std::int64_t k) {
  if (st.bits == 32) return static_cast<const float*>(st.data)[k];
  return decode_value(cb, code_at(static_cast<const std::uint8_t*>(st.data), k, st.bits), amax);
}

__device__ __forceinline__ unsigned encode(const Codebook& cb, float v, float div, bool clip, bool stochastic,
                                           std::uint64_t key, std::int64_t k) {
  return unsigned(encode_value(cb, v, div, clip, stochastic, key, k));
}

struct SharedScalars {
  unsigned grad_amax;
  float scale[kMaxStateSlots];
};

// The scalars of tensor `ti` for the step in flight: its step count (and NAdam's mu product) is
// advanced only when the whole step is done (finish_step), so every tile of every launch of the
// step derives the same scalars from steps[ti] + 1, with the host's double-precision code.
__device__ SlotScalars tile_scalars(const Tables& tb, const DevTensor& t, int ti, int phase) {
  const HyperParams* hp = args_hparams(tb.args, tb.n_tensors);
  SlotScalars s = scalars_for_step(tb.kind, hp[t.group], tb.steps[ti] + 1);
  if (optim_has_tensor_scalar(tb.kind)) advance_tensor_scalar(tb.kind, s, tb.mu_product[ti]);  // binds s
  if (phase == kPhaseApply) s.trust = tb.trust[ti];                                            // from the norms pass
  return s;
}

using ReduceU = cub::BlockReduce<unsigned, T>;
using ReduceU3 = cub::BlockReduce<U3, T>;
using ScanU = cub::BlockScan<unsigned, T>;

// The static shared memory of a tile, declared once in step_kernel: __shared__ variables declared in
// run_tile would exist once per instantiation (5), and the kernel would carry all of them.
struct TileShared {
  union {
    ReduceU::TempStorage u;
    ReduceU3::TempStorage u3;
    ScanU::TempStorage scan;
  } reduce;
  SharedScalars sh;
  union {
    double group_sums[2][T / kSumWarp];  // norms pass: per warp, its tree of the two block sums
    unsigned bins[kRadixBins];           // percentile selection: keys per digit
  } work;
  unsigned sel_prefix, sel_rank;  // percentile selection: the digits found so far, the rank left
};

// The magnitude of rank kq among v[0, len) (numerics/percentile.hpp; the CPU selects it by
// quickselect): a radix select over the 32-bit keys, one byte per pass from the top, each pass a
// histogram of the keys that share the digits found so far and a scan that finds the bin holding the
// rank. O(len) per pass; the value of a rank is unique, so any exact selection gives the CPU's bits.
// Call from every thread of the block. Out of line: the percentile path is optional, and inlined its
// state costs the per-element loops of every step registers.
__device__ __noinline__ float select_magnitude_rank(const float* v, int len, int kq, TileShared& S) {
  if (threadIdx.x == 0) {
    S.sel_prefix = 0u;
    S.sel_rank = unsigned(kq);
  }
  unsigned mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    S.work.bins[threadIdx.x] = 0u;
    __syncthreads();  // bins cleared; the digits and the rank of the previous pass visible
    const unsigned prefix = S.sel_prefix, rank = S.sel_rank;
    for (int i = threadIdx.x; i < len; i += T) {
      const unsigned key = magnitude_key(v[i]);
      if ((key & mask) == prefix) atomicAdd(&S.work.bins[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    const unsigned count = S.work.bins[threadIdx.x];
    unsigned before = 0u;
    ScanU(S.reduce.scan).ExclusiveSum(count, before);
    __syncthreads();  // every thread has read the digits and the rank, and the scan storage is free
    if (count > 0u && before <= rank && rank < before + count) {
      S.sel_prefix = prefix | (unsigned(threadIdx.x) << shift);
      S.sel_rank = rank - before;
    }
    mask |= 0xffu << shift;
  }
  __syncthreads();
  return bits_f32(S.sel_prefix);
}

// The block's sums of squares of p and u into out[0], out[1], in double, in the fixed tree of
// numerics/trust_ratio.hpp that the CPU's block_sum_squares also follows: thread t is lane t (its
// elements in order), each warp folds its lanes by shuffles in the tree's order, thread 0 adds the
// warps' sums in order. Call from every thread; returns after a barrier. Out of line, as
// select_magnitude_rank (only LAMB/LARS take this path).
__device__ __noinline__ void block_sums_tree(const float* p, const float* u, int len, TileShared& S, double* out) {
  double a = 0.0, x = 0.0;
  for (int i = threadIdx.x; i < len; i += T) {
    const double pv = p[i], uv = u[i];
    a += pv * pv;
    x += uv * uv;
  }
#pragma unroll
  for (int h = kSumWarp / 2; h > 0; h /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, h);
    x += __shfl_down_sync(0xffffffffu, x, h);
  }
  if (threadIdx.x % kSumWarp == 0) {
    S.work.group_sums[0][threadIdx.x / kSumWarp] = a;
    S.work.group_sums[1][threadIdx.x / kSumWarp] = x;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double pp = 0.0, uu = 0.0;
    for (int w = 0; w < T / kSumWarp; ++w) {
      pp += S.work.group_sums[0][w];
      uu += S.work.group_sums[1][w];
    }
    out[0] = pp;
    out[1] = uu;
  }
  __syncthreads();
}

// `hs`: shared memory for the tile's scalars (step_kernel's, also read by finish_norms); `S`: the
// tile's other static shared memory.
template <DType P, DType G>
__device__ void run_tile(const Tables& tb, const DevTensor& t, int ti, const DevGrad& grad, std::int64_t tile,
                         int phase, unsigned char* smem, SlotScalars& hs, TileShared& S) {
  const OptimKind kind = tb.kind;
  const int nstates = optim_state_slots(kind);
  Codebook* cbs = reinterpret_cast<Codebook*>(smem);
  float* sg = reinterpret_cast<float*>(smem + sizeof(Codebook) * std::size_t(tb.n_codebooks_smem));
  float* stage = sg + tb.max_block;  // tb.n_stage arrays of max_block floats

  if (threadIdx.x == 0) hs = tile_scalars(tb, t, ti, phase);  // while the other threads load codebooks
// Codebooks of the quantized states, once per tile.
#pragma unroll
  for (int k = 0; k < kMaxStateSlots; ++k)
    if (k < nstates) {
      const DevState& st = t.state[k];
      if (!st.data || st.bits == 32) continue;
      const int* src = reinterpret_cast<const int*>(tb.codebooks + st.codebook);
      int* dst = reinterpret_cast<int*>(cbs + k);
      for (int i = threadIdx.x; i < int(sizeof(Codebook) / sizeof(int)); i += T) dst[i] = src[i];
    }
  __syncthreads();  // codebooks and scalars ready

  const DevHeader hdr = *args_header(tb.args);
  const std::uint64_t gstep = tb.counters->global_step + 1;  // this step's number (advanced by finish_step)
  const SlotScalars h = hs;
  const bool stochastic = hdr.stochastic_state != 0;
  const bool clip = percentile_clips(hdr.percentile);
  const int bs = t.block_size;
  const std::int64_t nb = (t.n + bs - 1) / bs;
  const std::int64_t b0 = tile * t.blocks_per_tile;
  const std::int64_t b1 = min(b0 + std::int64_t(t.blocks_per_tile), nb);

  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t i0 = b * bs;
    const int len = int(min(std::int64_t(bs), t.n - i0));

    // 1. Non-finite gradient check over the block (max of the magnitude bit patterns: exact,
    //    and NaN/Inf give a pattern >= 0x7f800000).
    unsigned gm = 0;
    for (int i = threadIdx.x; i < len; i += T) {
      const float gv = load_f32<G>(grad.ptr, i0 + i);
      sg[i] = gv;
      const unsigned a = magnitude_key(gv);
      gm = a > gm ? a : gm;
    }
    gm = ReduceU(S.reduce.u).Reduce(gm, MaxU());
    if (threadIdx.x == 0) S.sh.grad_amax = gm;
    __syncthreads();
    if (!is_finite_abs(bits_f32(S.sh.grad_amax))) {
      if (threadIdx.x == 0) {
        if (phase == kPhaseNorms) {
          tb.block_partials[2 * (t.block_begin + b)] = 0.0;
          tb.block_partials[2 * (t.block_begin + b) + 1] = 0.0;
        } else {
          atomicAdd(&tb.counters->skipped_step, 1ull);
        }
      }
      __syncthreads();
      continue;
    }

    // 2. Per element: dequantize with the old absmax, update, store the parameter; stage the new
    //    state values of quantized slots and their block maxima.
    float old_amax[kMaxStateSlots];
#pragma unroll
    for (int k = 0; k < kMaxStateSlots; ++k) {
      const DevState& st = t.state[k];
      old_amax[k] = (k < nstates && st.data && st.bits != 32) ? st.absmax[b] : 0.0f;
    }
    U3 am{{0u, 0u, 0u}};
    const bool lars_norms = phase == kPhaseNorms && optim_trust_ratio(kind) == TrustRatio::lars;
    for (int i = threadIdx.x; i < len; i += T) {
      const std::int64_t k_el = i0 + i;
      const float g = sg[i];
      const float p = load_f32<P>(t.param, k_el);
      if (lars_norms) {
        stage[i] = p;
        stage[tb.max_block + i] = g;
        continue;
      }
      float s[kMaxStateSlots] = {};
#pragma unroll
      for (int k = 0; k < kMaxStateSlots; ++k)
        if (k < nstates)
          if (t.state[k].data) s[k] = load_state(t.state[k], cbs[k], old_amax[k], k_el);
      if (phase == kPhaseNorms) {  // LAMB: the update direction, states left as they were
        float u = 0.0f;
        update_element_any(kind, h, p, g, s, &u);
        stage[i] = p;
        stage[tb.max_block + i] = u;
        continue;
      }
      const float np = update_element_any(kind, h, p, g, s, nullptr);
      if (P == DType::bf16 && hdr.stochastic_bf16) {
        const std::uint64_t key = step_stream_key(hdr.seed, t.rng_stream, gstep, kParamStream);
        static_cast<std::uint16_t*>(t.param)[k_el] = f32_to_bf16_stochastic(np, random16(key, std::uint64_t(k_el)));
      } else {
        store_f32<P>(t.param, k_el, np);
      }
#pragma unroll
      for (int k = 0; k < kMaxStateSlots; ++k)
        if (k < nstates) {
          const DevState& st = t.state[k];
          if (!st.data) continue;
          if (st.bits == 32) {
            static_cast<float*>(st.data)[k_el] = s[k];
          } else {
            stage[std::int64_t(k) * tb.max_block + i] = s[k];
            const unsigned a = magnitude_key(s[k]);
            am.v[k] = a > am.v[k] ? a : am.v[k];
          }
        }
    }

    if (phase == kPhaseNorms) {
      __syncthreads();  // the staged values of every thread
      block_sums_tree(stage, stage + tb.max_block, len, S, tb.block_partials + 2 * (t.block_begin + b));
      continue;
    }

    // 3. New block scales of the quantized states: max |x|, or a percentile of |x|.
    am = ReduceU3(S.reduce.u3).Reduce(am, MaxU3());
    if (threadIdx.x == 0)
#pragma unroll
      for (int k = 0; k < kMaxStateSlots; ++k) S.sh.scale[k] = bits_f32(am.v[k]);
    __syncthreads();
    if (clip && len > 1) {
      // The magnitude of rank kq: select_magnitude_rank.
      const int kq = percentile_rank(hdr.percentile, len);
#pragma unroll
      for (int k = 0; k < kMaxStateSlots; ++k)
        if (k < nstates) {
          const DevState& st = t.state[k];
          if (!st.data || st.bits == 32) continue;
          const float scale = select_magnitude_rank(stage + std::int64_t(k) * tb.max_block, len, kq, S);
          if (threadIdx.x == 0) S.sh.scale[k] = scale;
        }
      __syncthreads();
    }

// 4. Requantize with the new scales.
#pragma unroll
    for (int k = 0; k < kMaxStateSlots; ++k)
      if (k < nstates) {
        const DevState& st = t.state[k];
        if (!st.data || st.bits == 32) continue;
        const float scale = S.sh.scale[k];
        if (threadIdx.x == 0) st.absmax[b] = scale;
        const float div = scale > 0.0f ? scale : 1.0f;
        const bool sr = stochastic || st.stochastic != 0;
        const std::uint64_t key = sr ? step_stream_key(hdr.seed, t.rng_stream, gstep, slot_stream(k)) : 0;
        const float* v = stage + std::int64_t(k) * tb.max_block;
        std::uint8_t* codes = static_cast<std::uint8_t*>(st.data);
        if (st.bits == 8) {
          for (int i = threadIdx.x; i < len; i += T)
            codes[i0 + i] = std::uint8_t(encode(cbs[k], v[i], div, clip, sr, key, i0 + i));
        } else {
          for (int q = threadIdx.x; 2 * q < len; q += T) {
            const unsigned lo = encode(cbs[k], v[2 * q], div, clip, sr, key, i0 + 2 * q);
            const unsigned hi =
                (2 * q + 1 < len) ? encode(cbs[k], v[2 * q + 1], div, clip, sr, key, i0 + 2 * q + 1) : 0u;
            codes[(i0 >> 1) + q] = std::uint8_t(lo | (hi << 4));
          }
        }
      }
    __syncthreads();  // the staging buffers and shared scalars are reused by the next block
  }
}

// One launch steps every tile of every tensor (LAMB/LARS: the norms pass, then the apply pass).
// Tiles of tensors without a gradient only count their arrival; with no tile at all the grid is
// one block that does only the step's bookkeeping.
__global__ void __launch_bounds__(T) step_kernel(Tables tb, int phase) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ SlotScalars scalars;
  __shared__ TileShared shared;
  const std::int64_t tile = blockIdx.x;
  int ti = -1;  // the tensor owning this tile
  if (tile < tb.n_tiles) {
    // The last index whose prefix is <= tile (empty tensors have equal prefixes and are passed over).
    int lo = 0, hi = tb.n_tensors;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (tb.tile_offsets[mid] <= tile)
        lo = mid;
      else
        hi = mid;
    }
    ti = lo;
  }
  const DevGrad grad = ti >= 0 ? args_grads(tb.args)[ti] : DevGrad{nullptr, 0, 0};
  if (grad.ptr) {  // uniform over the block
    const DevTensor t = tb.tensors[ti];
    const std::int64_t local = tile - tb.tile_offsets[ti];
    const bool g32 = DType(grad.dtype) == DType::f32;
    switch (DType(t.param_dtype)) {
      case DType::f32:
        run_tile<DType::f32, DType::f32>(tb, t, ti, grad, local, phase, smem, scalars, shared);
        break;
      case DType::f16:
        if (g32)
          run_tile<DType::f16, DType::f32>(tb, t, ti, grad, local, phase, smem, scalars, shared);
        else
          run_tile<DType::f16, DType::f16>(tb, t, ti, grad, local, phase, smem, scalars, shared);
        break;
      case DType::bf16:
        if (g32)
          run_tile<DType::bf16, DType::f32>(tb, t, ti, grad, local, phase, smem, scalars, shared);
        else
          run_tile<DType::bf16, DType::bf16>(tb, t, ti, grad, local, phase, smem, scalars, shared);
        break;
    }
    if (phase == kPhaseNorms) {
      const unsigned int tiles = unsigned(tb.tile_offsets[ti + 1] - tb.tile_offsets[ti]);
      if (arrive_last(&tb.tile_counters[ti], tiles)) finish_norms(tb, ti, scalars);
    }
  }
  if (phase != kPhaseNorms && arrive_last(&tb.counters->tiles_done, gridDim.x)) finish_step(tb);
}

}  // namespace

std::size_t step_kernel_static_smem() {
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, step_kernel), "cudaFuncGetAttributes(step_kernel)");
  return attr.sharedSizeBytes;
}

void set_step_kernel_smem(std::size_t dynamic_bytes) {
  check(cudaFuncSetAttribute(step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_bytes)),
        "cudaFuncSetAttribute(step_kernel, MaxDynamicSharedMemorySize)");
}

void launch_step(const Tables& tb, int phase, std::size_t smem, cudaStream_t stream) {
  // The step's final launch always runs (its last tile advances the counters); the norms pass
  // only when there is a tile.
  const std::int64_t grid = phase == kPhaseNorms ? tb.n_tiles : (tb.n_tiles > 0 ? tb.n_tiles : 1);
  if (grid == 0) return;
  step_kernel<<<unsigned(grid), T, smem, stream>>>(tb, phase);
  check_launch("step: fused step kernel (CUDA)");
}

}  // namespace octopt::cuda::detail
