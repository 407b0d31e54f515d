#pragma once
// Counter-based random numbers: the value for an element depends only on (key, element index),
// never on which thread or GPU block computes it. Keys come from the SplitMix64 finalizer applied to
// a Weyl sequence (the SplitMix64 generator evaluated at an arbitrary position); the per-element draws
// of stochastic rounding from a keyed 32-bit hash (below).
#include <cstdint>

#include "../config.hpp"

namespace octopt {

constexpr std::uint64_t kGolden64 = 0x9E3779B97F4A7C15ull;

OCTOPT_HD std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One key per (seed, stream): stream separates e.g. optimizer steps or the m and v buffers.
OCTOPT_HD std::uint64_t rng_key(std::uint64_t seed, std::uint64_t stream) {
  return mix64(mix64(seed) ^ (stream * kGolden64 + 0x632BE59BD9B4E019ull));
}

// The uniform draws of stochastic rounding: a keyed 32-bit counter hash per element, so that every vector
// unit (AVX2, AVX-512, NEON, SSE2, a GPU) computes a lane with 32-bit multiplies. Elements are numbered
// in segments of 2^32; each segment of a key has two 32-bit words (its DrawKey, from one SplitMix64 step),
// the element's low 32 index bits go through two multiply-xorshift rounds (the constants of a low-bias
// 32-bit hash), the second key word entering between them. A block of a power-of-two size lies in one
// segment, so a vector encoder takes its DrawKey once per block.
struct DrawKey {
  std::uint32_t add;  // added to the element's index bits
  std::uint32_t mix;  // xored in between the two rounds
};

OCTOPT_HD DrawKey draw_key(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t z = mix64(key + ((index >> 32) + 1) * kGolden64);
  return {std::uint32_t(z), std::uint32_t(z >> 32)};
}

constexpr std::uint32_t kDrawMul1 = 0x21F0AAADu;
constexpr std::uint32_t kDrawMul2 = 0x735A2D97u;

OCTOPT_HD std::uint32_t draw32(DrawKey k, std::uint32_t index_lo) {
  std::uint32_t x = index_lo + k.add;
  x = (x ^ (x >> 16)) * kDrawMul1;
  x ^= k.mix;
  x = (x ^ (x >> 15)) * kDrawMul2;
  return x ^ (x >> 15);
}

// The draw as a float in [0, 1) with 24 random bits (every value exactly a float32).
OCTOPT_HD float draw_u01(DrawKey k, std::uint32_t index_lo) {
  return float(draw32(k, index_lo) >> 8) * 5.9604644775390625e-08f;
}

// Uniform in [0, 1) for element `index` of stream `key`.
OCTOPT_HD float uniform01(std::uint64_t key, std::uint64_t index) {
  return draw_u01(draw_key(key, index), std::uint32_t(index));
}

// Whether [index0, index0 + len) lies in one segment (one DrawKey); len >= 1.
OCTOPT_HD bool one_draw_segment(std::uint64_t index0, std::uint64_t len) {
  return (index0 >> 32) == ((index0 + len - 1) >> 32);
}

// The random streams of a tensor in one optimizer step: 0..2 the stochastic rounding of its first three state
// slots, kParamStream its stochastically rounded bf16 parameter writes, 4 and up the slots after the third
// (slot_stream). The numbers are part of the results (a seed's codes and bf16 bits): they do not move.
inline constexpr int kParamStream = 3;
inline constexpr int kStreamsPerStep = 4;

// The stream of state slot k: slots 0..2 keep streams 0..2, later slots (Adan's fourth) come after kParamStream.
OCTOPT_HD constexpr int slot_stream(int k) { return k < kParamStream ? k : k + 1; }

// The key of random stream `which` of a tensor in one optimizer step. `rng_stream` tells the tensors apart,
// `step` (the global step number) the steps.
// Streams 0..kStreamsPerStep-1 are those of every earlier release; stream kStreamsPerStep + j takes stream j's
// number in a key space of its own, so that no step's streams meet another step's.
OCTOPT_HD std::uint64_t step_stream_key(std::uint64_t seed, std::uint64_t rng_stream, std::uint64_t step, int which) {
  const std::uint64_t space = std::uint64_t(which / kStreamsPerStep);
  const std::uint64_t base = seed ^ mix64(rng_stream + 1) ^ (space ? mix64(~space) : 0);
  return rng_key(base, step * std::uint64_t(kStreamsPerStep) + std::uint64_t(which % kStreamsPerStep));
}

// 16 random bits for element `index` (stochastic rounding of a bf16 write).
OCTOPT_HD std::uint32_t random16(std::uint64_t key, std::uint64_t index) {
  return std::uint32_t(mix64(key + index * kGolden64) >> 48);
}

}  // namespace octopt
