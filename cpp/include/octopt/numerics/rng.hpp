#pragma once
// Counter-based random numbers: the value for an element depends only on (key, element index),
// never on which thread or GPU block computes it. The mixer is the SplitMix64 finalizer applied
// to a Weyl sequence, i.e. the SplitMix64 generator evaluated at an arbitrary position.
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

// Uniform in [0, 1) with 24 random bits, so that every value is exactly a float32.
OCTOPT_HD float uniform01(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t z = mix64(key + (index + 1) * kGolden64);
  return float(std::uint32_t(z >> 40)) * 5.9604644775390625e-08f;
}

// The key of random stream `which` of a tensor in one optimizer step: 0..2 the stochastic rounding
// of its state slots, 3 its stochastically rounded bf16 parameter writes. `rng_stream` tells the
// tensors apart, `step` (the global step number) the steps.
OCTOPT_HD std::uint64_t step_stream_key(std::uint64_t seed, std::uint64_t rng_stream, std::uint64_t step, int which) {
  return rng_key(seed ^ mix64(rng_stream + 1), step * 4u + std::uint64_t(which));
}

// 16 random bits for element `index` (stochastic rounding of a bf16 write).
OCTOPT_HD std::uint32_t random16(std::uint64_t key, std::uint64_t index) {
  return std::uint32_t(mix64(key + index * kGolden64) >> 48);
}

}  // namespace octopt
