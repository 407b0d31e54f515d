// The portable encoder's octave table (cpu/octave_table.hpp): its entries against the exact search, and which
// maps get one. bench/encoder_check.cpp checks the kernels over every float in [-1, 1] for the state maps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/octave_table.hpp"
#include "harness.hpp"
#include "octopt/numerics/codebook.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/qmap.hpp"
#include "reference.hpp"

using namespace octopt;
using octopt::cpu::OctaveTable;
using octopt_test::show;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The code the table gives r, or -1 where it hands r to the search.
int table_code(const OctaveTable& t, float r) {
  const std::uint32_t u = f32_bits(r), a = u & 0x7fffffffu;
  const std::uint64_t e = cpu::octave_entry(t, a, (u >> 31) != 0);
  const std::uint32_t at = std::uint32_t(e), w = std::uint32_t(e >> 32);
  if (w & cpu::kOctaveUnsure) return -1;
  return int(a >= at ? (w >> 8) & 0xff : w & 0xff);
}

// Thresholds and the floats around them, each bucket's first and last float, zeros, denormals, and random values.
std::vector<float> probe_points(const Codebook& cb, const OctaveTable& t, octopt_test::Rng& rng) {
  std::vector<float> pts = {0.0f,
                            -0.0f,
                            1.0f,
                            -1.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::min()};
  for (int k = 0; k + 1 < cb.size; ++k)
    for (int d = -3; d <= 3; ++d) {
      const std::int64_t u = std::int64_t(f32_bits(std::fabs(cb.thresholds[k]))) + d;
      if (u >= 0 && u <= std::int64_t(f32_bits(1.0f))) {
        pts.push_back(bits_f32(std::uint32_t(u)));
        pts.push_back(-bits_f32(std::uint32_t(u)));
      }
    }
  for (std::int32_t q = 1; q < t.buckets; ++q) {
    const std::uint32_t first = std::uint32_t(t.base + q) << t.shift;
    for (std::uint32_t u : {first - 1, first}) {
      pts.push_back(bits_f32(u));
      pts.push_back(-bits_f32(u));
    }
  }
  for (int k = 0; k < 40000; ++k) pts.push_back(rng.uniform_pm1());
  for (int k = 0; k < 40000; ++k) pts.push_back(rng.log_uniform_pm1());
  return pts;
}

Codebook map_codebook(const std::vector<float>& values, bool floor) {
  Codebook cb = make_codebook(values, 8);
  if (floor) keep_nonzero(cb);
  return cb;
}

}  // namespace

OCTOPT_TEST(octave_table_gives_the_nearest_code_or_hands_over) {
  struct Map {
    std::string name;
    std::vector<float> values;
    bool must_be_valid;
  };
  octopt_test::Rng rng(7);
  std::vector<float> normal(20000);
  for (float& x : normal) x = float(rng.uniform_pm1() * rng.uniform_pm1() * rng.uniform_pm1());
  std::vector<Map> maps = {
      {"dynamic_map(true)", dynamic_map(true), true},
      {"dynamic_map(false)", dynamic_map(false), true},
      {"fp8_map()", fp8_map(), true},
      {"linear_map(true)", linear_map(true), true},
      {"linear_map(false)", linear_map(false), true},
      {"quantile_map", quantile_map(normal.data(), std::int64_t(normal.size()), 8), false},
  };
  // log-uniform magnitudes from 1e-9 with random signs: no zero, changes far below the dynamic maps' octaves
  std::vector<float> v(256);
  for (float& x : v) x = rng.log_uniform_pm1();
  std::sort(v.begin(), v.end());
  maps.push_back({"random log-uniform", v, false});
  int valid = 0;
  for (const Map& m : maps) {
    for (bool floor : {false, true}) {
      const Codebook cb = map_codebook(m.values, floor);
      OctaveTable t;
      const bool ok = cpu::build_octave_table(cb, t);
      const std::string name = m.name + (floor ? " + floor" : "");
      CHECK_EQ_AT(ok, t.valid, name);
      if (m.must_be_valid) CHECK_AT(ok, name + " has an octave table");
      if (!ok) continue;
      ++valid;
      for (float r : probe_points(cb, t, rng)) {
        const int c = table_code(t, r);
        // below the bucket of 1.0 the table decides every value
        CHECK_AT(c >= 0, name + ", r = " + show(r) + " handed to the search");
        if (c >= 0) CHECK_EQ_AT(c, nearest_code(cb, r), name + ", r = " + show(r));
      }
      // above 1.0, Inf and NaN: the search
      for (float r : {std::nextafter(1.0f, 2.0f) * 1.01f, 3.0f, kInf, -kInf, std::nanf("")})
        CHECK_EQ_AT(table_code(t, r), -1, name + ", r = " + show(r));
    }
  }
  CHECK_AT(valid >= 10, "at least the five state maps, with and without the floor, have tables");
}

OCTOPT_TEST(octave_table_refuses_a_map_with_changes_too_close_together) {
  // three entries 2^-13 apart from 0.75 up: two changes 2^-13 apart inside one bucket of [0.75, 0.75 + 2^-10),
  // the narrowest (2^9 buckets to the octave)
  std::vector<float> v = linear_map(true, 8);
  v[250] = 0.75f;
  v[251] = 0.75f + 0x1p-13f;
  v[252] = 0.75f + 0x1p-12f;
  std::sort(v.begin(), v.end());
  OctaveTable t;
  CHECK(!cpu::build_octave_table(map_codebook(v, false), t));
  CHECK(!t.valid);
  CHECK(t.entries.empty());
}
