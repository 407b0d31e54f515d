#pragma once
// Percentile scaling of a quantized state block: with a percentile q in (0, 100) the block scale
// is the q-th percentile of |x| instead of max |x|, and values beyond it are clipped to the map's
// range [-1, 1] before encoding (for outlier-heavy tensors).
//
// The scale is the element of rank k = ceil(q / 100 * len) - 1 (0-based, clamped to the block)
// among the magnitudes of the block in ascending order. Magnitudes are compared as their bit
// patterns (magnitude_key), which orders finite values as numbers and puts Inf and NaN above them:
// the selected value is unique whatever algorithm finds it. The CPU selects sequentially
// (select_magnitude); the CUDA kernel selects by a parallel radix select over the keys, one byte per
// pass (cuda/optim_kernels.cu), O(len) per pass instead of counting ranks, O(len^2).
#include <math.h>

#include <cstdint>

#include "../config.hpp"
#include "convert.hpp"

namespace octopt {

// Whether percentile q asks for percentile scaling (q = 0 and q = 100 mean max |x|).
OCTOPT_HD bool percentile_clips(float q) { return q > 0.0f && q < 100.0f; }

// The 0-based rank of the q-th percentile among len > 0 magnitudes.
OCTOPT_HD int percentile_rank(float q, int len) {
  const double want = ::ceil(double(q) / 100.0 * len) - 1.0;
  return want < 0.0 ? 0 : (want > double(len - 1) ? len - 1 : int(want));
}

// |x| as an ordered key: its bit pattern without the sign.
OCTOPT_HD std::uint32_t magnitude_key(float x) { return f32_bits(x) & 0x7fffffffu; }

// r clipped to the map's range; NaN passes through (as std::min(std::max(r, -1), 1)).
OCTOPT_HD float percentile_clip(float r) {
  r = (r < -1.0f) ? -1.0f : r;
  return (1.0f < r) ? 1.0f : r;
}

// An element whose key has `less` keys below it and `not_greater` keys at or below it in the block
// holds rank k. Equal keys share the ranks between the two counts, so any of them may answer.
OCTOPT_HD bool rank_holds(int less, int not_greater, int k) { return less <= k && k < not_greater; }

// The key of rank k among keys[0, len), by quickselect; reorders keys. Hoare partitions around the
// middle key stop on equal keys from both sides, so constant blocks split evenly.
OCTOPT_HD std::uint32_t select_magnitude(std::uint32_t* keys, int len, int k) {
  int lo = 0, hi = len - 1;
  while (lo < hi) {
    const std::uint32_t pivot = keys[lo + (hi - lo) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (keys[i] < pivot) ++i;
      while (pivot < keys[j]) --j;
      if (i <= j) {
        const std::uint32_t t = keys[i];
        keys[i] = keys[j];
        keys[j] = t;
        ++i;
        --j;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      return keys[k];  // between the partitions: equal to the pivot
  }
  return keys[k];
}

// The scale of a block under percentile q (percentile_clips(q), len > 1): the magnitude of rank
// percentile_rank(q, len). keys: scratch of len entries.
OCTOPT_HD float percentile_scale(const float* v, int len, float q, std::uint32_t* keys) {
  for (int i = 0; i < len; ++i) keys[i] = magnitude_key(v[i]);
  return bits_f32(select_magnitude(keys, len, percentile_rank(q, len)));
}

}  // namespace octopt
