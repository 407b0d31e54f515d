// Builds the closed-form encoder's tables (closed_form.hpp) from a prepared map.
#include "cpu/closed_form.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace octopt::cpu {
namespace {

// One side of the map (r > 0 or r <= 0), as the codes met when |r| grows from 0.
struct Side {
  std::vector<int> codes;  // codes[0] is the zero entry
  bool positive;
};

// The magnitude at which |r| moves from codes[i] to codes[i + 1]: r >= t on the positive side is
// |r| >= t; r < t (t < 0) on the negative side is |r| > -t, i.e. |r| >= the next float above -t.
struct Boundary {
  float magnitude;
};

Boundary boundary(const Codebook& cb, const Side& s, std::size_t i) {
  if (s.positive) return {cb.thresholds[s.codes[i]]};  // between codes[i] and codes[i] + 1
  const float t = cb.thresholds[s.codes[i + 1]];       // between codes[i] - 1 and codes[i]; negative
  return {std::nextafter(-t, std::numeric_limits<float>::infinity())};
}

// The formula, as the kernels evaluate it: one fused multiply-add (one rounding), monotone in a.
float x_at(float a, float A, float B) { return std::fma(a, A, B); }

// x - boundary integer at both sides of the boundary between positions i and i + 1 (the smallest
// magnitude taking the outer code, and the float below it), with run (A, B).
struct Spread {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
};

void add_boundary(const Codebook& cb, const Side& s, std::size_t i, float A, float B, Spread& sp) {
  const float m = boundary(cb, s, i).magnitude, below = std::nextafter(m, 0.0f);
  const int integer = std::max(s.codes[i], s.codes[i + 1]);
  for (float a : {m, below}) {
    const double e = double(x_at(a, A, B)) - integer;
    sp.lo = std::min(sp.lo, e);
    sp.hi = std::max(sp.hi, e);
  }
}

struct Run {
  std::size_t first, last;  // positions in Side::codes
  float A, B;
  float start = 0.0f;  // only for the side's top run: the magnitude where it starts (see add_top_run)
};

// A run from positions [first, last]: A, B put the values at code + 0.5.
Run fit(const Codebook& cb, const Side& s, std::size_t first, std::size_t last) {
  if (first == last) return {first, last, 0.0f, float(s.codes[first]) + 0.5f};
  const double v0 = std::fabs(double(cb.values[s.codes[first]])), v1 = std::fabs(double(cb.values[s.codes[last]]));
  const double A = double(s.codes[last] - s.codes[first]) / (v1 - v0);
  const double B = s.codes[first] + 0.5 - v0 * A;
  return {first, last, float(A), float(B)};
}

Spread run_spread(const Codebook& cb, const Side& s, const Run& r, float B) {
  Spread sp;
  for (std::size_t i = r.first; i < r.last; ++i) add_boundary(cb, s, i, r.A, B, sp);
  return sp;
}

// The largest |x - boundary integer| over the boundaries inside the run.
double run_error(const Codebook& cb, const Side& s, const Run& r) {
  const Spread sp = run_spread(cb, s, r, r.B);
  return r.first == r.last ? 0.0 : std::max(std::fabs(sp.lo), std::fabs(sp.hi));
}

// B moved up so that x >= the boundary integer on both sides of every boundary inside the run: then
// x lands in [integer, integer + width) there, and a lane with frac(x) >= width has its code in trunc(x).
float shifted_b(const Codebook& cb, const Side& s, const Run& r, double& width) {
  if (r.first == r.last) return r.B;
  float B = float(double(r.B) - run_spread(cb, s, r, r.B).lo);
  Spread sp = run_spread(cb, s, r, B);
  while (sp.lo < 0.0) sp = run_spread(cb, s, r, B = std::nextafter(B, std::numeric_limits<float>::infinity()));
  width = std::max(width, sp.hi);
  return B;
}

// Runs from the largest magnitude down (so a lone top entry such as 1.0 stays alone and each decade
// of a dynamic map is one run); the zero entry is always a run of its own.
std::vector<Run> split_runs(const Codebook& cb, const Side& s) {
  constexpr double kFitTolerance = 0.01;
  const auto mag = [&](std::size_t i) { return std::fabs(double(cb.values[s.codes[i]])); };
  std::vector<Run> runs;
  std::size_t last = s.codes.size() - 1;
  while (last >= 1) {
    // the longest stretch of equal gaps (cheap), then the exact check of its fit; where that fails
    // (nearly equal gaps that drift), the run shrinks until the fit holds
    std::size_t first = last;
    if (first > 1) {
      const double gap = mag(last) - mag(last - 1);
      --first;
      while (first > 1 && std::fabs((mag(first) - mag(first - 1)) / gap - 1.0) < 1e-3) --first;
    }
    Run r = fit(cb, s, first, last);
    while (first < last && !(run_error(cb, s, r) <= kFitTolerance)) r = fit(cb, s, ++first, last);
    runs.push_back(r);
    last = first - 1;
  }
  runs.push_back(fit(cb, s, 0, 0));
  std::reverse(runs.begin(), runs.end());
  return runs;
}

// Where the side's largest magnitude is below 1 (the largest |r| of absmax scaling), |r| = 1 from the
// block's absmax element would land at its run's end, x = the boundary integer, on every block whose
// absmax is on this side, and go to the search (~1.5% of a step's vectors); a constant run from that
// magnitude up gives the end code at once. Only where the top bin has no other boundary.
void add_top_run(const Codebook& cb, const Side& s, std::vector<Run>& runs) {
  const std::size_t last = s.codes.size() - 1;
  const float top = std::fabs(cb.values[s.codes[last]]);
  if (!(top < 1.0f) || runs.size() < 2) return;
  const float bin_lo = std::ldexp(1.0f, 2 * (kBins - 1) + kBinBias - 127);
  if (top < bin_lo || boundary(cb, s, runs[runs.size() - 2].last).magnitude >= bin_lo) return;
  Run r = fit(cb, s, last, last);
  r.start = top;
  runs.push_back(r);
}

// The magnitude where runs[k] (k >= 1) starts.
float run_start(const Codebook& cb, const Side& s, const std::vector<Run>& runs, std::size_t k) {
  return runs[k].start > 0.0f ? runs[k].start : boundary(cb, s, runs[k - 1].last).magnitude;
}

// The bin tables of one side (bins side * kBins ...); false when a bin holds two run boundaries.
bool fill_bins(const Codebook& cb, const Side& s, const std::vector<Run>& runs, int run0, float* up,
               std::int32_t* run_at) {
  for (int b = 0; b < kBins; ++b) {
    const float lo = b == 0 ? 0.0f : std::ldexp(1.0f, 2 * b + kBinBias - 127);
    const float hi = b == kBins - 1 ? std::numeric_limits<float>::infinity() : std::ldexp(1.0f, 2 * b + kBinBias - 125);
    int below = 0, inside = 0;
    float t = std::numeric_limits<float>::infinity();
    for (std::size_t k = 1; k < runs.size(); ++k) {
      const float m = run_start(cb, s, runs, k);
      if (m <= lo) {
        ++below;
      } else if (m < hi) {
        ++inside;
        t = m;
      }
    }
    if (inside > 1) return false;
    up[b] = t;
    run_at[b] = run0 + below;
  }
  return true;
}

// Whether the negative side is the positive side reflected (ClosedForm::mirror), and each bin's down[]. Inside a run
// the positive side's formula serves both signs: a negative boundary lies at the positive one or one float below it,
// and both of those floats fall in the positive formula's unsure band. A run boundary is decided by the compare, so
// its negative magnitude sets down[bin].
bool mirror_form(const Codebook& cb, const Side& pos, const Side& neg, ClosedForm& cf) {
  const int z = pos.codes[0];
  const std::size_t nneg = neg.codes.size() - 1, npos = pos.codes.size() - 1;
  if (nneg > npos || (cb.nonzero_floor >= 0 && nneg > 0)) return false;
  for (std::size_t k = 1; k <= nneg; ++k)
    if (!(cb.values[z - int(k)] == -cb.values[z + int(k)])) return false;
  for (int b = 0; b < kBins; ++b) {
    if (!(cf.up[b] <= std::numeric_limits<float>::max())) continue;  // no run boundary in this bin
    for (std::size_t i = 0; i < nneg; ++i) {
      if (boundary(cb, pos, i).magnitude != cf.up[b]) continue;
      std::uint32_t u, un;
      const float m = boundary(cb, neg, i).magnitude;
      std::memcpy(&u, &cf.up[b], 4);
      std::memcpy(&un, &m, 4);
      if (!(u == un || u == un + 1)) return false;
      cf.down[b] = std::uint8_t(u - un);
    }
    // a boundary past the negative side's last entry (or the start of a top run) needs no down: a negative r
    // there reflects below code 0 and takes 0
  }
  cf.zero = z;
  return true;
}

}  // namespace

bool build_closed_form(const Codebook& cb, ClosedForm& cf) {
  cf = ClosedForm();
  if (cb.zero_lo != cb.zero_hi) return false;  // no zero, or a repeated one
  const int z = cb.zero_lo;
  Side pos{{}, true}, neg{{}, false};
  for (int c = z; c < cb.size; ++c) pos.codes.push_back(c);
  for (int c = z; c >= 0; --c) neg.codes.push_back(c);
  for (const Side* s : {&pos, &neg})
    for (std::size_t i = 1; i < s->codes.size(); ++i)
      if (!(std::fabs(cb.values[s->codes[i]]) > std::fabs(cb.values[s->codes[i - 1]]))) return false;
  std::vector<Run> rp = split_runs(cb, pos), rn = split_runs(cb, neg);
  add_top_run(cb, pos, rp);
  add_top_run(cb, neg, rn);
  if (rp.size() + rn.size() > std::size_t(kMaxRuns)) return false;
  double width = 0.0;
  int k = 0;
  for (const auto* runs : {&rp, &rn}) {
    const Side& s = runs == &rp ? pos : neg;
    for (const Run& r : *runs) {
      cf.A[k] = r.A;
      cf.B[k] = shifted_b(cb, s, r, width);
      const int c0 = s.codes[r.first], c1 = s.codes[r.last];
      cf.lo[k] = std::min(c0, c1);
      cf.hi[k] = std::max(c0, c1);
      ++k;
    }
  }
  // the positive zero run: a positive value below the first boundary takes the floor, if the map has one
  if (cb.nonzero_floor >= 0) {
    cf.B[0] = float(cb.nonzero_floor) + 0.5f;
    cf.lo[0] = cf.hi[0] = cb.nonzero_floor;
  }
  if (!fill_bins(cb, pos, rp, 0, cf.up, cf.run)) return false;
  if (!fill_bins(cb, neg, rn, int(rp.size()), cf.up + kBins, cf.run + kBins)) return false;
  if (!(width < 0.25)) return false;
  int top = 0;
  for (int b = 0; b < kBins; ++b) top = std::max(top, cf.run[b] + (cf.up[b] <= 3.0e38f ? 1 : 0));
  cf.pos16 = top < 16;
  cf.runs8 = top <= 8;
  for (int k = 1; k <= 8 && k < kMaxRuns; ++k) {
    cf.A8[k - 1] = cf.A[k];
    cf.B8[k - 1] = cf.B[k];
  }
  for (int k = 0; k < kMaxRuns; ++k) {
    cf.run8[k] = std::uint8_t(cf.run[k]);
    cf.lo8[k] = std::uint8_t(cf.lo[k]);
    cf.hi8[k] = std::uint8_t(cf.hi[k]);
  }
  for (int b = 0; b < kBins; ++b) {
    std::memcpy(&cf.up_m1[b], &cf.up[b], 4);
    cf.up_m1[b] -= 1;
  }
  // the positive side's boundary bins as an 8-entry table (ClosedForm::bins8)
  {
    int slots = 0, next = -1;
    bool ok = true;
    for (int b = kBins - 1; b >= 0; --b) {
      if (cf.up[b] <= std::numeric_limits<float>::max()) {
        if (slots == 8) {
          ok = false;
          break;
        }
        next = slots++;
        cf.up8[next] = cf.up[b];
        cf.up8_m1[next] = cf.up_m1[b];
      } else if (next < 0) {
        ok = false;  // no boundary above this bin: nothing to borrow
        break;
      }
      cf.slot8[b] = std::uint8_t(next);
    }
    cf.bins8 = ok;
  }
  cf.mirror = mirror_form(cb, pos, neg, cf);
  // a little above the measured worst case, so that no lane sits exactly on the margin
  cf.width = float(width) * 1.0001f + 1e-7f;
  cf.valid = true;
  return true;
}

}  // namespace octopt::cpu
