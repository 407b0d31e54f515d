// Quantization maps: shapes, golden values, validation errors.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "octopt/qmap.hpp"
#include "reference.hpp"

using namespace octopt;
using octopt_test::bits_of;

namespace {

struct NamedMap {
  const char* name;
  std::vector<float> values;
  int bits;
  bool strictly_ascending;
};

std::vector<NamedMap> library_maps() {
  octopt_test::Rng rng(7);
  std::vector<float> data(10000);
  for (float& x : data) x = rng.uniform_pm1() * rng.uniform_pm1();  // a peaked, signed distribution
  return {
      {"dynamic_map(true)", dynamic_map(true), 8, true},
      {"dynamic_map(false)", dynamic_map(false), 8, true},
      {"dynamic_map(true, 3, 4)", dynamic_map(true, 3, 4), 4, true},
      {"linear_map(true, 8)", linear_map(true, 8), 8, true},
      {"linear_map(false, 8)", linear_map(false, 8), 8, true},
      {"linear_map(true, 4)", linear_map(true, 4), 4, true},
      {"linear_map(false, 4)", linear_map(false, 4), 4, true},
      {"linear_map_nozero(4)", linear_map_nozero(4), 4, true},
      {"linear_map_nozero(8)", linear_map_nozero(8), 8, true},
      {"fp8_map()", fp8_map(), 8, false},  // holds +0 and -0
      {"quantile_map(8)", quantile_map(data.data(), std::int64_t(data.size()), 8), 8, false},
      {"quantile_map(4)", quantile_map(data.data(), std::int64_t(data.size()), 4), 4, false},
  };
}

void check_spots(const std::vector<float>& map, const std::vector<std::pair<int, std::uint32_t>>& spots) {
  for (const auto& [index, want] : spots)
    CHECK_EQ_AT(bits_of(map.at(std::size_t(index))), want, "index " + std::to_string(index));
}

}  // namespace

OCTOPT_TEST(maps_have_size_order_and_range) {
  for (const NamedMap& m : library_maps()) {
    const std::string at = m.name;
    CHECK_EQ_AT(m.values.size(), std::size_t(1) << m.bits, at);
    for (std::size_t i = 0; i < m.values.size(); ++i) {
      const float v = m.values[i];
      CHECK_AT(std::isfinite(v) && v >= -1.0f && v <= 1.0f, at + " entry " + std::to_string(i));
      if (i > 0) {
        const bool ordered = m.strictly_ascending ? m.values[i - 1] < v : m.values[i - 1] <= v;
        CHECK_AT(ordered, at + " entries " + std::to_string(i - 1) + ", " + std::to_string(i));
      }
    }
    // Every map the library builds is accepted as a codebook.
    bool accepted = true;
    try {
      (void)make_codebook(m.values, m.bits);
    } catch (const std::exception&) {
      accepted = false;
    }
    CHECK_AT(accepted, at);
  }
}

// Golden values from bitsandbytes' create_dynamic_map, printed by gen_map_golden.py.
OCTOPT_TEST(dynamic_map_matches_bitsandbytes) {
  check_spots(dynamic_map(true), {{0, 0xbf7e3333u},
                                  {1, 0xbf7a999au},
                                  {2, 0xbf770000u},
                                  {37, 0xbef20000u},
                                  {100, 0xbbf4bc6au},
                                  {126, 0xb513a3b7u},
                                  {127, 0x00000000u},
                                  {128, 0x3513a3b7u},
                                  {129, 0x365a1a94u},
                                  {200, 0x3e6f3333u},
                                  {253, 0x3f7a999au},
                                  {254, 0x3f7e3333u},
                                  {255, 0x3f800000u}});
  check_spots(dynamic_map(false), {{0, 0x00000000u},
                                   {1, 0x34ae7baau},
                                   {2, 0x35500998u},
                                   {64, 0x3c466667u},
                                   {127, 0x3dd40000u},
                                   {128, 0x3de26666u},
                                   {191, 0x3f0db334u},
                                   {254, 0x3f7f199au},
                                   {255, 0x3f800000u}});
  check_spots(dynamic_map(true, 3, 4), {{0, 0xbf633333u},
                                        {1, 0xbf29999au},
                                        {2, 0xbee00000u},
                                        {3, 0xbe599999u},
                                        {4, 0xbd9eb852u},
                                        {5, 0xbd051eb9u},
                                        {6, 0xbbb43958u},
                                        {7, 0x00000000u},
                                        {8, 0x3bb43958u},
                                        {9, 0x3d051eb9u},
                                        {10, 0x3d9eb852u},
                                        {11, 0x3e599999u},
                                        {12, 0x3ee00000u},
                                        {13, 0x3f29999au},
                                        {14, 0x3f633333u},
                                        {15, 0x3f800000u}});
  // The signed map mirrors its negative half: entries 0..254 are symmetric about zero, 255 is 1.
  const std::vector<float> s = dynamic_map(true);
  for (int i = 0; i < 255; ++i) CHECK_EQ_AT(s[std::size_t(i)], -s[std::size_t(254 - i)], "index " + std::to_string(i));
}

OCTOPT_TEST(linear_and_fp8_maps) {
  for (int bits : {4, 8}) {
    const int n = 1 << bits;
    const std::vector<float> u = linear_map(false, bits), s = linear_map(true, bits), z = linear_map_nozero(bits);
    CHECK_EQ(u.front(), 0.0f);
    CHECK_EQ(u.back(), 1.0f);
    CHECK_EQ(s.front(), -1.0f);
    CHECK_EQ(s.back(), 1.0f);
    int zeros = 0;
    for (float v : s) zeros += v == 0.0f;
    CHECK_EQ(zeros, 1);
    for (int i = 0; i < n; ++i) CHECK_EQ(z[std::size_t(i)], float(i + 1) / float(n));
  }
  const std::vector<float> f = fp8_map();
  CHECK_EQ(f.back(), 1.0f);
  CHECK_EQ(f.front(), -1.0f);
  int zeros = 0;
  for (float v : f) zeros += v == 0.0f;
  CHECK_EQ(zeros, 2);
  for (int i = 0; i < 256; ++i) CHECK_EQ(f[std::size_t(i)], -f[std::size_t(255 - i)]);
  // bitsandbytes' e4m3 layout: the smallest positive value is the subnormal 2^-3 * 2^-8, the
  // largest (1 + 7/8) * 2^8 (checked against create_fp8_map(True, 4, 3, 8)).
  CHECK_EQ(f[129], std::ldexp(1.0f, -11) / 480.0f);
}

OCTOPT_TEST(quantile_map_from_data) {
  octopt_test::Rng rng(11);
  std::vector<float> x(5000);
  for (float& v : x) v = 3.0f * rng.uniform_pm1();
  for (int bits : {4, 8}) {
    const std::vector<float> q = quantile_map(x.data(), std::int64_t(x.size()), bits);
    float amax = 0.0f;
    int zeros = 0;
    for (float v : q) amax = std::max(amax, std::fabs(v)), zeros += v == 0.0f;
    CHECK_EQ(amax, 1.0f);
    CHECK(zeros >= 1);
    // Non-finite values are ignored.
    std::vector<float> y = x;
    y.push_back(std::numeric_limits<float>::quiet_NaN());
    y.push_back(std::numeric_limits<float>::infinity());
    y.insert(y.begin(), -std::numeric_limits<float>::infinity());
    CHECK(quantile_map(y.data(), std::int64_t(y.size()), bits) == q);
  }
  const std::vector<float> zeros(64, 0.0f), nans(8, std::numeric_limits<float>::quiet_NaN());
  CHECK_THROWS(quantile_map(zeros.data(), 64, 8), std::invalid_argument, {"quantile_map", "'x'"});
  CHECK_THROWS(quantile_map(nans.data(), 8, 8), std::invalid_argument, {"quantile_map", "'x'"});
  CHECK_THROWS(quantile_map(x.data(), 100, 5), std::invalid_argument, {"quantile_map", "bits"});
}

OCTOPT_TEST(map_constructors_reject_bad_parameters) {
  CHECK_THROWS(dynamic_map(true, 0, 8), std::invalid_argument, {"dynamic_map", "max_exponent_bits"});
  CHECK_THROWS(dynamic_map(true, 8, 8), std::invalid_argument, {"dynamic_map", "max_exponent_bits"});
  CHECK_THROWS(dynamic_map(true, 3, 9), std::invalid_argument, {"dynamic_map", "total_bits"});
  CHECK_THROWS(linear_map(true, 5), std::invalid_argument, {"linear_map", "bits", "5"});
  CHECK_THROWS(linear_map_nozero(3), std::invalid_argument, {"linear_map_nozero", "bits", "3"});
}

OCTOPT_TEST(validate_qmap_names_function_argument_and_value) {
  const std::vector<float> good = dynamic_map(true);
  validate_qmap(good.data(), 256, 8, "f", "a");  // accepted: no throw
  CHECK_THROWS(validate_qmap(good.data(), 255, 8, "myfn", "mymap"), std::invalid_argument, {"myfn", "'mymap'", "255"});
  CHECK_THROWS(validate_qmap(good.data(), 256, 4, "myfn", "mymap"), std::invalid_argument, {"myfn", "'mymap'", "256"});
  CHECK_THROWS(validate_qmap(good.data(), 256, 7, "myfn", "mymap"), std::invalid_argument, {"myfn", "bits", "7"});

  auto with = [&](int i, float v) {
    std::vector<float> m = good;
    m[std::size_t(i)] = v;
    return m;
  };
  const std::vector<float> nan = with(40, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> inf = with(255, std::numeric_limits<float>::infinity());
  const std::vector<float> big = with(255, 1.5f);
  const std::vector<float> low = with(0, -2.0f);
  std::vector<float> unsorted = good;
  std::swap(unsorted[10], unsorted[11]);
  CHECK_THROWS(validate_qmap(nan.data(), 256, 8, "myfn", "mymap"), std::invalid_argument,
               {"myfn", "'mymap'", "nan", "40"});
  CHECK_THROWS(validate_qmap(inf.data(), 256, 8, "myfn", "mymap"), std::invalid_argument, {"myfn", "'mymap'", "inf"});
  CHECK_THROWS(validate_qmap(big.data(), 256, 8, "myfn", "mymap"), std::invalid_argument, {"myfn", "'mymap'", "1.5"});
  CHECK_THROWS(validate_qmap(low.data(), 256, 8, "myfn", "mymap"), std::invalid_argument, {"myfn", "'mymap'", "-2"});
  CHECK_THROWS(validate_qmap(unsorted.data(), 256, 8, "myfn", "mymap"), std::invalid_argument,
               {"myfn", "'mymap'", "11"});

  // make_codebook validates the same way, with its own names by default or the caller's.
  CHECK_THROWS(make_codebook(unsorted, 8), std::invalid_argument, {"make_codebook", "'qmap'"});
  CHECK_THROWS(make_codebook(nan, 8), std::invalid_argument, {"make_codebook", "'qmap'", "nan"});
  CHECK_THROWS(make_codebook(big, 8), std::invalid_argument, {"make_codebook", "'qmap'", "1.5"});
  CHECK_THROWS(make_codebook(good, 4), std::invalid_argument, {"make_codebook", "'qmap'", "256"});
  CHECK_THROWS(make_codebook(good.data(), 100, 8, "adam", "code1"), std::invalid_argument, {"adam", "'code1'", "100"});
}

OCTOPT_TEST(make_codebook_keeps_the_map) {
  for (const NamedMap& m : library_maps()) {
    const Codebook cb = make_codebook(m.values, m.bits);
    CHECK_EQ_AT(cb.size, std::int32_t(m.values.size()), m.name);
    bool same = true;
    for (std::size_t i = 0; i < m.values.size(); ++i) same = same && bits_of(cb.values[i]) == bits_of(m.values[i]);
    CHECK_AT(same, m.name);
  }
}
