#pragma once
// The nearest code of a map made of evenly spaced runs, from a formula instead of a search.
//
// A dynamic map is a few "decades" of evenly spaced values (plus 0 and 1.0). The float's exponent
// says which pair of octaves |r| lies in; such a bin holds at most one boundary between runs (the
// decades are 10x apart), so one exact compare against that boundary's true threshold gives the
// run; inside a run the codes are evenly spaced, so the code is trunc(|r| * A + B), clamped to the
// run's codes. x = fma(|r|, A, B) is monotone in |r|, and B is set (when the tables are built) so that
// on both sides of every true threshold inside a run x lies in [boundary integer, that + width):
// wherever frac(x) >= width the formula's code is the search's code; at a run's ends the clamp and
// the exact compare decide. Lanes with frac(x) < width (about 0.005% of random values), and
// non-finite ones, go to the search. A side whose largest value is below 1 gets a constant top run,
// so that |r| = 1 (every block's absmax element) is settled by the formula too.
// bench/encoder_check.cpp compares every float in [-1, 1] against the search.
#include <cstdint>

#include "octopt/numerics/codebook.hpp"

namespace octopt::cpu {

// Per lane r, |r| < 2 (cpu/encode.hpp, closed_form16): a = |r|; bin = max((biased exponent of a - kBinBias) / 2,
// 0) + (r <= 0 ? 16 : 0); run = run[bin] + (a >= up[bin]); x = fma(a, A[run], B[run]); if
// x - floor(x) < width (or x is NaN) the search decides, else the code is trunc(x) clamped to
// [lo[run], hi[run]]. Bin 0 holds [0, 2^-29), bin b [2^(2b-31), 2^(2b-29)), bin 15 everything from 0.5 up.
constexpr int kBins = 16;
constexpr int kBinBias = 96;
constexpr int kMaxRuns = 32;  // runs of both signs together

struct ClosedForm {
  alignas(64) float up[2 * kBins];          // the next run up (larger |r|) when |r| >= up[bin]
  alignas(64) std::int32_t run[2 * kBins];  // the run at the bin's low end
  alignas(64) float A[kMaxRuns];            // code = trunc(fma(|r|, A[run], B[run])), clamped to [lo, hi]
  alignas(64) float B[kMaxRuns];
  alignas(64) std::int32_t lo[kMaxRuns];  // the run's smallest code
  alignas(64) std::int32_t hi[kMaxRuns];  // and its largest
  float width = 0.0f;
  bool valid = false;
  // Mirror form (used by the AVX2 kernel, whose 32-entry lookups cost four lane-crossing permutes each): the
  // negative side is the positive one reflected (values[zero - k] == -values[zero + k] for every negative
  // entry), so a negative r takes max(2 zero - c, 0), c the positive side's code of |r| from the first
  // kBins entries of the tables, with each bin's run compare lowered by down[bin] (0 or 1 in the bit
  // pattern: where a midpoint is a float, the negative side's boundary is that float, the positive side's
  // the next one up). Also for a map with no negative entry (zero == 0): a negative r takes code 0.
  bool mirror = false;
  std::int32_t zero = 0;
  alignas(16) std::uint8_t down[kBins] = {};
  // The same tables as the byte-shuffle kernels read them (run, lo and hi as bytes; up[] of the positive side
  // as bit patterns less one), and whether every run a positive r reaches is among the first 16.
  alignas(16) std::uint8_t run8[kMaxRuns] = {}, lo8[kMaxRuns] = {}, hi8[kMaxRuns] = {};
  alignas(32) std::int32_t up_m1[kBins] = {};
  bool pos16 = false;
  // Whether the positive side has at most 8 runs besides its zero run (run 0): then A and B of runs 1..8 are
  // one 8-entry table each (A8, B8), and a lane of run 0 takes lo[0] without the formula.
  bool runs8 = false;
  alignas(32) float A8[8] = {}, B8[8] = {};
  // Whether at most 8 of the positive side's bins hold a run boundary and none without one lies above the highest
  // that does: then up[b] can be read as up8[slot8[b]] (a byte shuffle, then one 8-entry permute instead of two and
  // a blend), a bin without a boundary taking the next boundary above it, which no |r| of that bin reaches.
  bool bins8 = false;
  alignas(16) std::uint8_t slot8[kBins] = {};
  alignas(32) float up8[8] = {};
  alignas(32) std::int32_t up8_m1[8] = {};
};

// Tables for `cb` (any map with an exact zero whose values fall into at most 32 evenly spaced runs,
// one boundary per bin); false, with cf.valid false, when the map has no such structure.
bool build_closed_form(const Codebook& cb, ClosedForm& cf);

}  // namespace octopt::cpu
