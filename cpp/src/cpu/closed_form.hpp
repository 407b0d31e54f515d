#pragma once
// The nearest code of a map made of evenly spaced runs, from a formula instead of a search.
//
// A dynamic map is a few "decades" of evenly spaced values (plus 0 and 1.0). The float's exponent
// says which pair of octaves |r| lies in; such a bin holds at most one boundary between runs (the
// decades are 10x apart), so one exact compare against that boundary's true threshold gives the
// run; inside a run the codes are evenly spaced, so the code is trunc(|r| * A + B), clamped to the
// run's codes. x = |r| * A + B is monotone in |r|, so wherever x is more than `delta` away from an
// integer, where delta bounds |x - boundary integer| over every true threshold inside a run
// (measured when the tables are built), the formula's code is the search's code; at a run's ends
// the clamp and the exact compare decide. Lanes within delta of an integer (about 0.01% of random
// values), and non-finite ones, go to the search. bench/encoder_check.cpp compares every float in
// [-1, 1] against the search.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "octopt/numerics/codebook.hpp"

namespace octopt::cpu {

// Bin of |r|: clamp((biased exponent - kBinBias) / 2, 0, 15), plus 16 for r <= 0. Bin 0 holds
// [0, 2^-29), bin b [2^(2b-31), 2^(2b-29)), bin 15 everything from 0.5 up.
constexpr int kBins = 16;
constexpr int kBinBias = 96;
constexpr int kMaxRuns = 32;  // runs of both signs together

struct ClosedForm {
  alignas(64) float up[2 * kBins];          // the next run up (larger |r|) when |r| >= up[bin]
  alignas(64) std::int32_t run[2 * kBins];  // the run at the bin's low end
  alignas(64) float A[kMaxRuns];            // code = trunc(|r| * A[run] + B[run]), clamped to range
  alignas(64) float B[kMaxRuns];
  alignas(64) std::int32_t range[kMaxRuns];  // the run's smallest code | its largest << 16
  float delta = 0.0f;
  bool valid = false;
};

// Tables for `cb` (any map with an exact zero whose values fall into at most 32 evenly spaced runs,
// one boundary per bin); false, with cf.valid false, when the map has no such structure.
bool build_closed_form(const Codebook& cb, ClosedForm& cf);

inline int closed_form_bin(float a) {
  std::uint32_t bits;
  std::memcpy(&bits, &a, 4);
  const int e = int(bits >> 23) - kBinBias;
  return e < 0 ? 0 : (e / 2 > kBins - 1 ? kBins - 1 : e / 2);
}

// The code of r by the closed form, or -1 where the search must decide (r within delta of a
// boundary, or not finite). Every vector encoder computes exactly this, lane by lane.
inline int closed_form_code(const ClosedForm& cf, float r) {
  const float a = std::fabs(r);
  const int bin = closed_form_bin(a) + (r <= 0.0f ? kBins : 0);
  const int run = cf.run[bin] + int(a >= cf.up[bin]);
  const float x = a * cf.A[run] + cf.B[run];  // two roundings: this file is compiled without FMA contraction
  const float d = x - std::nearbyint(x);
  if (!(std::fabs(d) > cf.delta)) return -1;  // also NaN: r not finite
  const int lo = cf.range[run] & 0xffff, hi = cf.range[run] >> 16;
  const int c = int(x);
  return c < lo ? lo : (c > hi ? hi : c);
}

}  // namespace octopt::cpu
