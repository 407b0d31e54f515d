#pragma once
// The LAMB/LARS trust ratio of a tensor, from two sums of squares accumulated in double in the
// fixed order of chunking.hpp: within a block by a fixed tree (block_sum_squares), within a
// chunk block by block, then chunk by chunk (add_pair_sums). Every backend adds the same doubles in
// the same order, so the ratio is the same float everywhere, whatever the threads or the device.
#include <math.h>

#include <cstdint>

#include "../config.hpp"
#include "state_slots.hpp"

namespace octopt {

// Optimizers whose update needs a per-tensor trust ratio (a norms pass before the update).
OCTOPT_HD constexpr bool optim_uses_trust_ratio(OptimKind kind) { return optim_trust_ratio(kind) != TrustRatio::none; }

// The fixed summation tree of a block's sum of squares, in double: lane l (of kSumLanes) adds the
// squares of elements l, l + kSumLanes, l + 2 kSumLanes, ... in order; each group of kSumWarp lanes
// folds in halves (lane j += lane j + h for h = 16, 8, 4, 2, 1: a warp's shuffle-down tree); the
// groups' results are added in group order. The CUDA kernel computes exactly this with one thread per
// lane (a parallel reduction with the CPU's bits); the CPU's lanes vectorize. Both must keep this
// order: it defines the bits of the LAMB/LARS trust ratios.
inline constexpr int kSumLanes = 256;
inline constexpr int kSumWarp = 32;

// Folds one group of kSumWarp lane sums as a warp's shuffle-down tree; returns the group's sum.
OCTOPT_HD double fold_sum_group(double* lane) {
  for (int h = kSumWarp / 2; h > 0; h /= 2)
    for (int j = 0; j < h; ++j) lane[j] += lane[j + h];
  return lane[0];
}

// Sum of v[i]^2 over one block (len <= any block size), in the tree order above.
inline double block_sum_squares(const float* v, int len) {
  double lane[kSumLanes] = {};
  for (int base = 0; base < len; base += kSumLanes) {
    const int m = len - base < kSumLanes ? len - base : kSumLanes;
    for (int l = 0; l < m; ++l) lane[l] += double(v[base + l]) * double(v[base + l]);
  }
  double total = 0.0;
  for (int g = 0; g < kSumLanes / kSumWarp; ++g) total += fold_sum_group(lane + g * kSumWarp);
  return total;
}

// a += pairs[2 i], b += pairs[2 i + 1] for i = first .. last - 1, in order: partial sums of
// (parameter, direction) squares, per block into a chunk or per chunk into a tensor.
OCTOPT_HD void add_pair_sums(const double* pairs, std::int64_t first, std::int64_t last, double& a, double& b) {
  for (std::int64_t i = first; i < last; ++i) {
    a += pairs[2 * i];
    b += pairs[2 * i + 1];
  }
}

// The trust ratio from the sum of squares of the parameter (sq_param) and of the update direction
// (sq_dir: LAMB's Adam direction plus decay, LARS's gradient). LAMB (You et al. 2020, Alg. 2):
// ||w|| / ||u||; LARS (You et al. 2017, Alg. 1): eta ||w|| / (||g|| + wd ||w||). 1 when either norm
// is 0. eta and weight_decay: the tensor's float32 step scalars.
OCTOPT_HD float trust_ratio(OptimKind kind, double sq_param, double sq_dir, float eta, float weight_decay) {
  const double pn = ::sqrt(sq_param), xn = ::sqrt(sq_dir);
  double trust = 1.0;
  if (optim_trust_ratio(kind) == TrustRatio::lamb) {
    if (pn > 0.0 && xn > 0.0) trust = pn / xn;
  } else if (pn > 0.0 && xn > 0.0) {
    trust = double(eta) * pn / (xn + double(weight_decay) * pn);
  }
  return float(trust);
}

}  // namespace octopt
