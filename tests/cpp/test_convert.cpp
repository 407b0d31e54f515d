// float32 <-> float16 / bfloat16 conversions against a reference that decodes every 16-bit
// pattern by the format's definition and rounds by comparing distances in double.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/numerics/convert.hpp"
#include "reference.hpp"

using namespace octopt;
using octopt_test::show;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string hex16(std::uint16_t h) {
  const char* d = "0123456789abcdef";
  return std::string("0x") + d[h >> 12] + d[(h >> 8) & 15] + d[(h >> 4) & 15] + d[h & 15];
}

bool is_nan16(std::uint16_t h, int exp_shift, unsigned exp_mask) {
  return ((h >> exp_shift) & exp_mask) == exp_mask && (h & ((1u << exp_shift) - 1)) != 0;
}

// Inputs near every rounding boundary of a 16-bit format: each representable value and each
// midpoint between neighbours (both exact in float32), the floats up to 2 ulps either side, and
// their negations; plus random bit patterns and hand-picked extremes.
template <class Decode>
std::vector<float> boundary_inputs(std::uint16_t inf_bits, Decode decode) {
  std::vector<float> in;
  auto around = [&](float x) {
    float lo = x, hi = x;
    in.push_back(x);
    for (int k = 0; k < 2; ++k) {
      lo = std::nextafter(lo, -kInf), hi = std::nextafter(hi, kInf);
      in.push_back(lo), in.push_back(hi);
    }
  };
  for (std::uint32_t h = 0; h < inf_bits; ++h) {
    const double v = decode(std::uint16_t(h));
    const double next = h + 1 < inf_bits ? decode(std::uint16_t(h + 1)) : 2.0 * v - decode(std::uint16_t(h - 1));
    around(float(v));
    around(float((v + next) / 2.0));
  }
  const std::size_t positive = in.size();
  for (std::size_t i = 0; i < positive; ++i) in.push_back(-in[i]);
  octopt_test::Rng rng(1234);
  for (int k = 0; k < 300000; ++k) {
    const std::uint32_t u = std::uint32_t(rng.next());
    float f;
    std::memcpy(&f, &u, sizeof f);
    if (!std::isnan(f)) in.push_back(f);
  }
  for (float f : {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(), 65504.0f, 65519.996f,
                  65520.0f, 65536.0f, 1e-8f, 2.980232239e-08f /* 2^-25 */})
    in.push_back(f);
  return in;
}

std::vector<float> nan_inputs() {
  std::vector<float> out;
  for (std::uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu, 0x7f801fffu,
                          0x7fa00000u, 0x7f800100u}) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    out.push_back(f);
  }
  return out;
}

}  // namespace

OCTOPT_TEST(half_bit_patterns_round_trip) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const std::uint16_t x = std::uint16_t(h);
    const float f = f16_to_f32(x);
    const double want = octopt_test::half_value(x);
    if (std::isnan(want)) {
      CHECK_AT(std::isnan(f), hex16(x));
      const std::uint16_t back = f32_to_f16(f);
      CHECK_AT(is_nan16(back, 10, 0x1f), hex16(x) + " -> " + hex16(back));
      CHECK_EQ_AT(back, kCanonicalNanF16, hex16(x));  // whatever the sign and payload (DESIGN.md)
    } else {
      CHECK_EQ_AT(double(f), want, hex16(x));
      CHECK_EQ_AT(std::signbit(f), bool(x & 0x8000), hex16(x));
      CHECK_EQ_AT(f32_to_f16(f), x, hex16(x));
    }
  }
}

OCTOPT_TEST(bf16_bit_patterns_round_trip) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const std::uint16_t x = std::uint16_t(h);
    const float f = bf16_to_f32(x);
    const double want = octopt_test::bf16_value(x);
    if (std::isnan(want)) {
      CHECK_AT(std::isnan(f), hex16(x));
      CHECK_AT(is_nan16(f32_to_bf16(f), 7, 0xff), hex16(x));
      CHECK_EQ_AT(f32_to_bf16(f), kCanonicalNanBF16, hex16(x));
    } else {
      CHECK_EQ_AT(double(f), want, hex16(x));
      CHECK_EQ_AT(std::signbit(f), bool(x & 0x8000), hex16(x));
      CHECK_EQ_AT(f32_to_bf16(f), x, hex16(x));
    }
  }
}

OCTOPT_TEST(float_to_half_rounds_to_nearest_even) {
  const std::vector<double> grid = octopt_test::positive_grid(0x7c00, octopt_test::half_value);
  CHECK_EQ(grid.back(), 65536.0);
  for (float f : boundary_inputs(0x7c00, octopt_test::half_value))
    CHECK_EQ_AT(f32_to_f16(f), octopt_test::reference_round(grid, f), show(f));
  for (float f : nan_inputs()) {
    const std::uint16_t h = f32_to_f16(f);
    CHECK_AT(is_nan16(h, 10, 0x1f), show(f) + " -> " + hex16(h));
    CHECK_EQ_AT(h, kCanonicalNanF16, show(f));  // one NaN whatever the sign and payload (DESIGN.md)
  }
  // The overflow threshold: 65520 is the midpoint of 65504 and 2^16 and rounds (to even) to inf.
  CHECK_EQ(f32_to_f16(65520.0f), std::uint16_t(0x7c00));
  CHECK_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), std::uint16_t(0x7bff));
  CHECK_EQ(f32_to_f16(-65520.0f), std::uint16_t(0xfc00));
  // Subnormal results: 2^-25 ties to 0, 3 * 2^-25 ties to 2 * 2^-24.
  CHECK_EQ(f32_to_f16(std::ldexp(1.0f, -25)), std::uint16_t(0x0000));
  CHECK_EQ(f32_to_f16(std::ldexp(3.0f, -25)), std::uint16_t(0x0002));
  CHECK_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), std::uint16_t(0x8001));
}

OCTOPT_TEST(float_to_bf16_rounds_to_nearest_even) {
  const std::vector<double> grid = octopt_test::positive_grid(0x7f80, octopt_test::bf16_value);
  CHECK_EQ(grid.back(), std::ldexp(1.0, 128));
  for (float f : boundary_inputs(0x7f80, octopt_test::bf16_value))
    CHECK_EQ_AT(f32_to_bf16(f), octopt_test::reference_round(grid, f), show(f));
  for (float f : nan_inputs()) {
    const std::uint16_t h = f32_to_bf16(f);
    CHECK_AT(is_nan16(h, 7, 0xff), show(f) + " -> " + hex16(h));
    CHECK_EQ_AT(h, kCanonicalNanBF16, show(f));
    CHECK_EQ_AT(f32_bits(canonical_nan(f)), kCanonicalNanF32, show(f));
  }
  CHECK_EQ(f32_to_bf16(std::numeric_limits<float>::max()), std::uint16_t(0x7f80));
  CHECK_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), std::uint16_t(0x3f80));  // tie to even (down)
  CHECK_EQ(f32_to_bf16(1.0f + std::ldexp(3.0f, -8)), std::uint16_t(0x3f82));  // tie to even (up)
}

OCTOPT_TEST(load_and_store_use_the_conversions) {
  octopt_test::Rng rng(3);
  std::vector<float> x(1000);
  for (float& v : x) v = float(std::ldexp(rng.uniform_pm1(), int(rng.next() % 40) - 20));
  std::vector<std::uint16_t> h(x.size()), b(x.size());
  std::vector<float> f(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto idx = std::int64_t(i);
    store_f32<DType::f16>(h.data(), idx, x[i]);
    store_f32<DType::bf16>(b.data(), idx, x[i]);
    store_f32<DType::f32>(f.data(), idx, x[i]);
    CHECK_EQ(h[i], f32_to_f16(x[i]));
    CHECK_EQ(b[i], f32_to_bf16(x[i]));
    CHECK_BITS_EQ(f[i], x[i]);
    CHECK_BITS_EQ(load_f32<DType::f16>(h.data(), idx), f16_to_f32(h[i]));
    CHECK_BITS_EQ(load_f32<DType::bf16>(b.data(), idx), bf16_to_f32(b[i]));
    CHECK_BITS_EQ(load_f32<DType::f32>(f.data(), idx), x[i]);
  }
}
