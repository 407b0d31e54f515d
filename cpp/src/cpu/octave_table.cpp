// Builds the octave-bucket encoder's entries (octave_table.hpp) from a prepared map, with the exact search.
#include "cpu/octave_table.hpp"

#include <algorithm>

#include "octopt/numerics/convert.hpp"

namespace octopt::cpu {
namespace {

constexpr std::uint32_t kOneBits = 0x3f800000u;  // 1.0f
constexpr std::uint32_t kExponentBits = 0x7f800000u;
constexpr std::int32_t kMaxBuckets = 16384;  // per side: 128 KiB of entries

int code_of(const Codebook& cb, std::uint32_t sign, std::uint32_t a) { return nearest_code(cb, bits_f32(sign | a)); }

// The first |r| bits in (a0, a1] whose code differs from the code at a0, or a1 + 1 if there is none (the code is
// monotone in |r|, so the ends decide whether it changes and bisection finds where).
std::uint32_t next_change(const Codebook& cb, std::uint32_t sign, std::uint32_t a0, std::uint32_t a1) {
  const int c0 = code_of(cb, sign, a0);
  if (code_of(cb, sign, a1) == c0) return a1 + 1;
  std::uint32_t lo = a0, hi = a1;  // code(lo) == c0 != code(hi)
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    (code_of(cb, sign, mid) == c0 ? lo : hi) = mid;
  }
  return hi;
}

// The octave where the buckets start: the one holding a side's second change (below it, [0, that octave) holds at
// most one change, the first bucket's entry), the lower of the two sides.
std::uint32_t low_octave(const Codebook& cb) {
  std::uint32_t low = kOneBits;
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    const std::uint32_t first = next_change(cb, sign, 0, kOneBits);
    if (first > kOneBits) continue;
    const std::uint32_t second = next_change(cb, sign, first, kOneBits);
    if (second <= kOneBits) low = std::min(low, second & kExponentBits);
  }
  return low;
}

// Entries with 2^m buckets per octave; false when a bucket holds two changes or there are too many buckets.
bool fill(const Codebook& cb, int m, std::uint32_t low_bits, OctaveTable& t) {
  t.shift = 23 - m;
  t.base = std::int32_t(low_bits >> t.shift) - 1;  // bucket 0 is [0, low_bits)
  t.buckets = std::int32_t((kOneBits >> t.shift) + 1) - t.base;
  if (t.buckets > kMaxBuckets) return false;
  t.entries.assign(std::size_t(2 * (t.buckets + 1)), std::uint64_t(kOctaveUnsure) << 32);
  for (int side = 0; side < 2; ++side) {
    const std::uint32_t sign = side ? 0x80000000u : 0u;
    std::uint64_t* e = t.entries.data() + side * (t.buckets + 1);
    for (std::int32_t q = 0; q < t.buckets; ++q) {
      if (t.base + q + 1 <= 0) continue;  // bucket 0 is empty when the buckets start at the denormals
      const std::uint32_t a0 = q == 0 ? 0u : std::uint32_t(t.base + q) << t.shift;
      const std::uint32_t a1 = (std::uint32_t(t.base + q + 1) << t.shift) - 1;
      const std::uint64_t c0 = std::uint64_t(code_of(cb, sign, a0));
      const std::uint32_t at = next_change(cb, sign, a0, a1);
      if (at > a1) {
        e[q] = (c0 | c0 << 8) << 32;  // change point 0: every |r| takes hi, which is lo
        continue;
      }
      if (next_change(cb, sign, at, a1) <= a1) return false;
      const std::uint64_t c1 = std::uint64_t(code_of(cb, sign, at));
      e[q] = (c0 | c1 << 8) << 32 | at;
    }
  }
  return true;
}

}  // namespace

bool build_octave_table(const Codebook& cb, OctaveTable& t) {
  t = OctaveTable();
  if (cb.size != 256) return false;
  const std::uint32_t low = low_octave(cb);
  for (int m = 7; m <= 9; ++m) {
    if (fill(cb, m, low, t)) {
      t.valid = true;
      return true;
    }
  }
  t = OctaveTable();
  return false;
}

}  // namespace octopt::cpu
