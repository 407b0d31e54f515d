#pragma once
// Independent reference implementations the tests compare the library against: plain loops in
// double precision, written from the documented contract rather than from the library's code.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace octopt_test {

// Index of the map value nearest to r (distances in double, ties to the lower index); then the
// sign rule of codebook.hpp: a nonzero r never gets an entry of the opposite sign when an entry
// of its own sign (or zero) exists; it gets the closest of those instead.
inline int brute_nearest(const float* v, int size, float r) {
  auto best_among = [&](bool (*allowed)(float)) {
    int best = -1;
    double best_d = std::numeric_limits<double>::infinity();
    for (int i = 0; i < size; ++i) {
      if (!allowed(v[i])) continue;
      const double d = std::fabs(double(r) - double(v[i]));
      if (d < best_d) best_d = d, best = i;
    }
    return best;
  };
  const int c = best_among([](float) { return true; });
  if (r > 0.0f && v[c] < 0.0f) {
    const int own = best_among([](float x) { return x >= 0.0f; });
    if (own >= 0) return own;
  }
  if (r < 0.0f && v[c] > 0.0f) {
    const int own = best_among([](float x) { return x <= 0.0f; });
    if (own >= 0) return own;
  }
  return c;
}

inline int brute_nearest(const std::vector<float>& v, float r) { return brute_nearest(v.data(), int(v.size()), r); }

// Round-to-nearest-even of x to the format whose non-negative finite values are `grid` (ascending,
// indexed by their bit pattern), with grid.back() standing for the first value past the largest
// finite one (the encoding of infinity). Returns the bit pattern of |x|'s rounding; x is finite.
inline std::uint32_t rne_on_grid(const std::vector<double>& grid, double ax) {
  if (ax >= grid.back()) return std::uint32_t(grid.size() - 1);
  std::size_t lo = 0, hi = grid.size() - 1;  // invariant: grid[lo] <= ax < grid[hi]
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    if (grid[mid] <= ax)
      lo = mid;
    else
      hi = mid;
  }
  const double dlo = ax - grid[lo], dhi = grid[hi] - ax;
  if (dlo < dhi) return std::uint32_t(lo);
  if (dhi < dlo) return std::uint32_t(hi);
  return std::uint32_t((lo % 2 == 0) ? lo : hi);
}

// Decoded IEEE half: value of a bit pattern, by the definition of the format.
inline double half_value(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(double(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(1.0 + double(mant) / 1024.0, exp - 15);
  return sign ? -v : v;
}

// Decoded bfloat16: sign, 8 exponent bits (bias 127), 7 mantissa bits.
inline double bf16_value(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 7) & 0xff, mant = h & 0x7f;
  double v;
  if (exp == 0)
    v = std::ldexp(double(mant), -133);
  else if (exp == 255)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(1.0 + double(mant) / 128.0, exp - 127);
  return sign ? -v : v;
}

// The non-negative finite values of a 16-bit format in bit-pattern order, followed by the value
// the pattern of +infinity would have if the exponent range went on (its rounding threshold).
template <class Decode>
std::vector<double> positive_grid(std::uint16_t inf_bits, Decode decode) {
  std::vector<double> g;
  for (std::uint32_t h = 0; h < inf_bits; ++h) g.push_back(decode(std::uint16_t(h)));
  g.push_back(2.0 * decode(std::uint16_t(inf_bits - 1)) - decode(std::uint16_t(inf_bits - 2)));
  return g;
}

// Reference float -> 16-bit conversion with round to nearest even; NaN handled by the caller.
inline std::uint16_t reference_round(const std::vector<double>& grid, float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isinf(x)) return std::uint16_t(sign | (grid.size() - 1));
  return std::uint16_t(sign | rne_on_grid(grid, std::fabs(double(x))));
}

// Deterministic 64-bit generator for test inputs (SplitMix64).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float uniform_pm1() { return float(2.0 * uniform() - 1.0); }   // [-1, 1]
  // Magnitude log-uniform in [1e-9, 1], random sign: exercises the dense small entries of the maps.
  float log_uniform_pm1() {
    const float m = float(std::pow(10.0, -9.0 * uniform()));
    return (next() & 1) ? -m : m;
  }
};

}  // namespace octopt_test
