#pragma once
// Device-side layout of a DevicePlan: the tables the kernels read. Plain data, built on the host
// at plan build time and copied to the device once.
#include <cstdint>

#include "octopt/optim.hpp"

namespace octopt::cuda::detail {

constexpr int kStepThreads = 256;
// LAMB/LARS norms are summed per block, per chunk of whole blocks, then chunk by chunk, with the
// chunking of both backends (numerics/chunking.hpp), so they add the same doubles in the same order.
// A thread block steps a tile of whole quantization blocks of one tensor, so that loading the
// codebooks into shared memory is paid once per tile rather than once per block.
constexpr std::int64_t kTileElems = 4096;

struct DevState {
  void* data;     // float* (bits 32) or codes; null: slot unused
  float* absmax;  // per block, bits 8 / 4
  std::int32_t bits;
  std::int32_t codebook;
  std::int32_t stochastic;  // this state's codes round stochastically (StateBuffer::stochastic)
  std::int32_t pad;
};

struct DevTensor {
  void* param;
  std::int64_t n;
  std::int64_t block_begin;  // index of this tensor's first block among all blocks (LAMB/LARS scratch)
  std::int64_t chunk_begin;  // index of its first chunk among all chunks
  std::int64_t n_chunks;
  std::uint64_t rng_stream;
  std::int32_t block_size;
  std::int32_t blocks_per_tile;
  std::int32_t blocks_per_chunk;
  std::int32_t group;
  std::int32_t param_dtype;  // DType
  std::int32_t pad;
  DevState state[kMaxStateSlots];
};

// The per-step arguments, uploaded as one blob: header, then one DevGrad per tensor, then one
// HyperParams per group.
struct DevHeader {
  std::uint64_t seed;
  std::uint32_t stochastic_state;
  std::uint32_t stochastic_bf16;
  float percentile;
  std::uint32_t pad[3];
};
static_assert(sizeof(DevHeader) == 32, "DevHeader layout");

struct DevGrad {
  const void* ptr;  // null: the tensor is not stepped
  std::int32_t dtype;
  std::int32_t pad;
};
static_assert(sizeof(DevGrad) == 16, "DevGrad layout");

// Between steps every "in this step" field is zero: the last tile of a step's final launch moves
// skipped_step into the totals and resets it and tiles_done, so a replayed graph starts clean.
struct DevCounters {
  unsigned long long global_step;    // steps taken so far (keys stochastic rounding)
  unsigned long long skipped_total;  // blocks skipped for a non-finite gradient, all steps
  unsigned long long skipped_last;   // the same, last step only
  unsigned long long skipped_step;   // the same, accumulated during the step in flight
  unsigned int tiles_done;           // tiles of the step's final launch that have finished
  unsigned int pad[3];
};
static_assert(sizeof(DevCounters) == 48, "DevCounters layout");

enum Phase : int { kPhaseSingle = 0, kPhaseNorms = 1, kPhaseApply = 2 };

// Everything a kernel needs, passed by value: only device pointers that never change after the
// plan is built, so a captured graph keeps working.
struct Tables {
  OptimKind kind;
  std::int32_t n_tensors;
  std::int32_t n_stage;           // float arrays of max_block elements staged per state (>= states used)
  std::int32_t n_codebooks_smem;  // codebook slots in shared memory (= states of the optimizer)
  std::int32_t max_block;         // largest block size of the plan
  std::int64_t n_tiles;           // tiles of all tensors (= tile_offsets[n_tensors])
  const DevTensor* tensors;
  const std::int64_t* tile_offsets;  // n_tensors + 1 prefix sums of tiles
  const Codebook* codebooks;
  const unsigned char* args;  // the uploaded blob
  std::int64_t* steps;        // per tensor: steps taken
  float* mu_product;          // per tensor: NAdam's running product of mu (StepTensor::mu_product)
  DevCounters* counters;
  float* trust;                 // per tensor: trust ratio of its last step (1 for optimizers without one)
  unsigned int* tile_counters;  // LAMB/LARS: per tensor, tiles of the norms pass finished; 0 between launches
  double* block_partials;       // LAMB/LARS: 2 per block
  double* chunk_partials;       // LAMB/LARS: 2 per chunk
};

__host__ __device__ inline const DevHeader* args_header(const unsigned char* a) {
  return reinterpret_cast<const DevHeader*>(a);
}
__host__ __device__ inline const DevGrad* args_grads(const unsigned char* a) {
  return reinterpret_cast<const DevGrad*>(a + sizeof(DevHeader));
}
__host__ __device__ inline const HyperParams* args_hparams(const unsigned char* a, int n_tensors) {
  return reinterpret_cast<const HyperParams*>(a + sizeof(DevHeader) + sizeof(DevGrad) * std::size_t(n_tensors));
}
inline std::size_t args_bytes(int n_tensors, int n_groups) {
  return sizeof(DevHeader) + sizeof(DevGrad) * std::size_t(n_tensors) + sizeof(HyperParams) * std::size_t(n_groups);
}
static_assert(sizeof(DevGrad) % alignof(HyperParams) == 0, "HyperParams alignment in the blob");

}  // namespace octopt::cuda::detail
