// Codebook encoding: nearest_code against a brute-force search, stochastic_code's neighbours
// and rounding frequencies.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/numerics/codebook.hpp"
#include "octopt/qmap.hpp"
#include "reference.hpp"

using namespace octopt;
using octopt_test::brute_nearest;
using octopt_test::show;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct TestMap {
  std::string name;
  std::vector<float> values;
  int bits;
};

// Sorted random map: random signs, log-uniform magnitudes (so no zero), some entries duplicated.
std::vector<float> random_map(octopt_test::Rng& rng, int size) {
  std::vector<float> v(static_cast<std::size_t>(size));
  for (float& x : v) x = rng.log_uniform_pm1();
  for (int k = 0; k < size / 8; ++k) {
    const std::size_t i = std::size_t(rng.next() % std::uint64_t(size - 1));
    v[i + 1] = v[i];
  }
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<TestMap> test_maps() {
  std::vector<TestMap> maps = {
      {"dynamic_map(true)", dynamic_map(true), 8},
      {"dynamic_map(false)", dynamic_map(false), 8},
      {"dynamic_map(true, 3, 4)", dynamic_map(true, 3, 4), 4},
      {"linear_map(true, 8)", linear_map(true, 8), 8},
      {"linear_map_nozero(4)", linear_map_nozero(4), 4},
      {"fp8_map()", fp8_map(), 8},
      // no zero; small positive values are nearest to -0.05 and must not flip sign
      {"no zero, positive side",
       {-1.0f, -0.8f, -0.6f, -0.45f, -0.3f, -0.2f, -0.12f, -0.05f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f},
       4},
      // no zero; small negative values are nearest to 0.02; the closest non-positive entry is duplicated
      {"no zero, negative side",
       {-1.0f, -0.9f, -0.8f, -0.7f, -0.6f, -0.5f, -0.3f, -0.3f, 0.02f, 0.1f, 0.2f, 0.4f, 0.6f, 0.8f, 0.9f, 1.0f},
       4},
      // duplicates at both ends and around zero
      {"duplicates",
       {-1.0f, -1.0f, -0.5f, -0.25f, -0.125f, -0.0f, 0.0f, 0.0f, 0.1f, 0.1f, 0.1f, 0.3f, 0.6f, 0.9f, 1.0f, 1.0f},
       4},
  };
  octopt_test::Rng rng(2024);
  for (int k = 0; k < 3; ++k) maps.push_back({"random 256 #" + std::to_string(k), random_map(rng, 256), 8});
  for (int k = 0; k < 6; ++k) maps.push_back({"random 16 #" + std::to_string(k), random_map(rng, 16), 4});
  return maps;
}

// Entries, midpoints and the floats right next to them, and the ends of [-1, 1].
std::vector<float> edge_points(const std::vector<float>& v) {
  std::vector<float> pts = {
      0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()};
  auto around = [&](float x) {
    const float below = std::nextafter(x, -kInf), above = std::nextafter(x, kInf);
    for (float p : {below, x, above})
      if (p >= -1.0f && p <= 1.0f) pts.push_back(p);
  };
  for (std::size_t i = 0; i < v.size(); ++i) {
    around(v[i]);
    if (i + 1 < v.size()) {
      const double mid = (double(v[i]) + double(v[i + 1])) / 2.0;
      around(float(mid));  // the exact midpoint when representable, else its nearest float
      around(-float(mid));
    }
  }
  return pts;
}

}  // namespace

OCTOPT_TEST(nearest_code_matches_brute_force) {
  octopt_test::Rng rng(99);
  for (const TestMap& m : test_maps()) {
    const Codebook cb = make_codebook(m.values, m.bits);
    std::vector<float> pts = edge_points(m.values);
    const int n_random = m.bits == 8 ? 60000 : 30000;
    for (int k = 0; k < n_random; ++k) pts.push_back(rng.uniform_pm1());
    for (int k = 0; k < n_random / 2; ++k) pts.push_back(rng.log_uniform_pm1());
    for (float r : pts) CHECK_EQ_AT(nearest_code(cb, r), brute_nearest(m.values, r), m.name + ", r = " + show(r));
  }
  // The dynamic map gets a few hundred thousand more random inputs.
  const std::vector<float> dyn = dynamic_map(true);
  const Codebook cb = make_codebook(dyn, 8);
  for (int k = 0; k < 200000; ++k) {
    const float r = rng.uniform_pm1();
    CHECK_EQ_AT(nearest_code(cb, r), brute_nearest(dyn, r), "r = " + show(r));
  }
}

OCTOPT_TEST(nearest_code_never_flips_sign) {
  for (const TestMap& m : test_maps()) {
    const Codebook cb = make_codebook(m.values, m.bits);
    const bool has_nonneg = m.values.back() >= 0.0f, has_nonpos = m.values.front() <= 0.0f;
    for (float r : edge_points(m.values)) {
      const float v = m.values[std::size_t(nearest_code(cb, r))];
      if (r > 0.0f && has_nonneg) CHECK_AT(v >= 0.0f, m.name + ", r = " + show(r));
      if (r < 0.0f && has_nonpos) CHECK_AT(v <= 0.0f, m.name + ", r = " + show(r));
    }
  }
}

OCTOPT_TEST(stochastic_code_picks_a_bracketing_neighbour_by_proximity) {
  constexpr int kGrid = 1024;
  octopt_test::Rng rng(5);
  for (const TestMap& m : test_maps()) {
    const Codebook cb = make_codebook(m.values, m.bits);
    const std::vector<float>& v = m.values;
    std::vector<float> pts = edge_points(v);
    for (int k = 0; k < 300; ++k) pts.push_back(rng.uniform_pm1());
    for (int k = 0; k < 100; ++k) pts.push_back(rng.log_uniform_pm1());
    for (float r : pts) {
      const std::string at = m.name + ", r = " + show(r);
      // lo: the largest entry <= r, hi: the smallest entry > r (clamped at the ends of the map)
      const auto up = std::upper_bound(v.begin(), v.end(), r);
      const float lo = up == v.begin() ? v.front() : *(up - 1);
      const float hi = up == v.end() ? v.back() : *up;
      double p_up = (up == v.begin() || up == v.end()) ? 0.0 : (double(r) - lo) / (double(hi) - lo);
      if (up == v.begin()) p_up = 1.0;  // below the map: the first entry, which is "hi" here
      // sign rule: rounding toward the other sign is replaced by the own side's closest entry
      const bool no_flip_down = r > 0.0f && lo < 0.0f && v.back() >= 0.0f;
      const bool no_flip_up = r < 0.0f && hi > 0.0f && v.front() <= 0.0f;
      if (no_flip_down) p_up = 1.0;
      if (no_flip_up) p_up = 0.0;
      int ups = 0;
      bool neighbours = true;
      for (int j = 0; j < kGrid; ++j) {
        const float u = (float(j) + 0.5f) / float(kGrid);
        const float got = v[std::size_t(stochastic_code(cb, r, u))];
        neighbours = neighbours && (got == lo || got == hi);
        ups += got == hi && hi != lo;
      }
      CHECK_AT(neighbours, at);
      const double freq = lo == hi ? p_up : double(ups) / kGrid;
      CHECK_AT(std::fabs(freq - p_up) <= 1.0 / kGrid + 1e-6,
               "round-up frequency " + show(freq) + " vs " + show(p_up) + ", " + at);
      // r equal to an entry returns it, whatever u.
      if (r == lo) CHECK_EQ_AT(v[std::size_t(stochastic_code(cb, r, 0.999999f))], lo, at);
    }
  }
}
