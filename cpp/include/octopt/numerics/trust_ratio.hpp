#pragma once
// The LAMB/LARS trust ratio of a tensor, from two sums of squares accumulated in double in the
// fixed order of chunking.hpp: within a block element by element (block_sum_squares), within a
// chunk block by block, then chunk by chunk (add_pair_sums). Every backend adds the same doubles in
// the same order, so the ratio is the same float everywhere, whatever the threads or the device.
#include <math.h>

#include <cstdint>

#include "../config.hpp"

namespace octopt {

// Optimizers whose update needs a per-tensor trust ratio (a norms pass before the update).
OCTOPT_HD constexpr bool optim_uses_trust_ratio(OptimKind kind) {
  return kind == OptimKind::lamb || kind == OptimKind::lars;
}

// Sum of v[i]^2 over one block, in double, in element order.
OCTOPT_HD double block_sum_squares(const float* v, int len) {
  double acc = 0.0;
  for (int i = 0; i < len; ++i) acc += double(v[i]) * double(v[i]);
  return acc;
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
  if (kind == OptimKind::lamb) {
    if (pn > 0.0 && xn > 0.0) trust = pn / xn;
  } else if (pn > 0.0 && xn > 0.0) {
    trust = double(eta) * pn / (xn + double(weight_decay) * pn);
  }
  return float(trust);
}

}  // namespace octopt
