#pragma once
// The nearest code of a 256-entry map by one table lookup and one integer compare: the encoder of the portable
// kernels, where a vector unit has no byte shuffles to hold the closed form's tables (closed_form.hpp) in registers
// and every lookup is a scalar load.
//
// |r| is cut into buckets by its bit pattern: 2^m buckets per octave (the exponent and the top m mantissa bits),
// from the octave where the map's codes start to change up to 1.0. A bucket narrower than the map's spacing holds
// at most one point where the code changes, so its entry holds that point as a bit pattern and the codes on both
// sides: code = |r| bits >= point ? hi : lo, exact by construction (the entries are made by the exact search,
// nearest_code, at the bucket's ends and by bisection between them). Each side of zero has its own buckets. A bucket
// where the code changes twice, and |r| above the bucket of 1.0 (also Inf and NaN), are "unsure": those lanes take
// the search. The entries rely on nearest_code being monotone in |r| on each side, which holds for every Codebook
// (its thresholds are non-decreasing and keep_sign only moves codes towards the value's own side);
// bench/encoder_check.cpp compares every float in [-1, 1] with the search.
#include <cstdint>
#include <vector>

#include "octopt/numerics/codebook.hpp"

namespace octopt::cpu {

struct OctaveTable {
  // per side (r >= +0, then r <= -0), buckets + 1 entries: low 32 bits the change point (|r| bits >= it: hi), high
  // 32 bits lo | hi << 8 | unsure << 16. Entry q of a side is bucket q: |r| bits >> shift == base + q, bucket 0
  // also holding everything below, entry `buckets` everything above (unsure).
  std::vector<std::uint64_t> entries;
  int shift = 0;          // 23 - m
  std::int32_t base = 0;  // the lowest bucket's |r| bits >> shift
  std::int32_t buckets = 0;
  bool valid = false;
};

constexpr std::uint32_t kOctaveUnsure = 1u << 16;  // in an entry's high word

// The entry of |r| bits `a` on side `negative`: the lanes' formula one value at a time, as the tests check it.
inline std::uint64_t octave_entry(const OctaveTable& t, std::uint32_t a, bool negative) {
  std::int32_t q = std::int32_t(a >> t.shift) - t.base;
  q = q < 0 ? 0 : q;
  q = q > t.buckets ? t.buckets : q;
  return t.entries[std::size_t(q + (negative ? t.buckets + 1 : 0))];
}

// Tables for a 256-entry map; false, with t.valid false, when the map has changes closer together than
// 2^-9 of an octave or spread over more octaves than the size limit allows (then the search encodes).
bool build_octave_table(const Codebook& cb, OctaveTable& t);

}  // namespace octopt::cpu
