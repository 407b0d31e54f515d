// CPU block-wise quantize / dequantize against the documented contract.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "blockwise_util.hpp"
#include "harness.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/qmap.hpp"
#include "octopt/runtime.hpp"
#include "octopt/threading.hpp"
#include "reference.hpp"

using namespace octopt;
using namespace octopt_test;

namespace {

const int kBlockSizes[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};

// Values whose scale changes from block to block, with exact zeros and negative maxima.
std::vector<float> test_values(std::int64_t n, bool non_negative, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<std::size_t>(n), 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float scale = float(std::pow(10.0, 4.0 * (double((i / 32) % 7) / 6.0) - 2.0));  // 1e-2 .. 1e2
    const float v = (rng.next() % 17 == 0) ? 0.0f : scale * rng.uniform_pm1();
    x[i] = non_negative ? std::fabs(v) : v;
  }
  return x;
}

}  // namespace

OCTOPT_TEST(round_trip_all_dtypes_sizes_and_block_sizes) {
  const std::vector<float> signed8 = dynamic_map(true), signed4 = dynamic_map(true, 3, 4);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t n : {1, 255, 4097}) {
      const std::vector<float> x = test_values(n, false, std::uint64_t(n) * 31 + std::uint64_t(dt));
      for (int block : kBlockSizes) {
        check_round_trip(dt, x, signed8, 8, block);
        check_round_trip(dt, x, signed4, 4, block);
      }
    }
  }
}

OCTOPT_TEST(round_trip_other_maps) {
  struct M {
    std::vector<float> map;
    int bits;
    bool non_negative;
  };
  const std::vector<M> maps = {{dynamic_map(false), 8, true},
                               {linear_map_nozero(4), 4, true},
                               {fp8_map(), 8, false},
                               {linear_map(true, 8), 8, false},
                               {linear_map(false, 4), 4, true}};
  for (const M& m : maps) {
    const std::vector<float> x = test_values(4097, m.non_negative, 77);
    for (int block : {32, 256, 4096}) check_round_trip(DType::f32, x, m.map, m.bits, block);
  }
}

OCTOPT_TEST(all_zero_blocks_store_zero_absmax_and_decode_to_zeros) {
  const std::vector<float> map = dynamic_map(true);
  std::vector<float> x = test_values(4097, false, 5);
  for (std::int64_t i = 0; i < 256; ++i) x[std::size_t(i)] = 0.0f;             // block 0
  for (std::int64_t i = 5 * 256; i < 6 * 256; ++i) x[std::size_t(i)] = -0.0f;  // block 5, negative zeros
  x[4096] = 0.0f;                                                              // partial block 16
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int bits : {8, 4}) {
      const Quantized q = quantize(dt, x, bits == 8 ? map : dynamic_map(true, 3, 4), bits, 256);
      for (std::int64_t b : {0, 5, 16}) CHECK_BITS_EQ(q.absmax[std::size_t(b)], 0.0f);
      for (DType out_dt : {DType::f32, DType::f16, DType::bf16}) {
        const std::vector<float> out = dequantize(q, out_dt);
        for (std::int64_t b : {0, 5, 16})
          for (std::int64_t i = b * 256; i < std::min<std::int64_t>((b + 1) * 256, 4097); ++i)
            CHECK_EQ_AT(out[std::size_t(i)], 0.0f, "element " + std::to_string(i));
      }
      check_round_trip(dt, x, bits == 8 ? map : dynamic_map(true, 3, 4), bits, 256);
    }
}

OCTOPT_TEST(non_finite_blocks_are_counted) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = test_values(4097, false, 6);
  x[3] = nan;     // block 0
  x[1000] = inf;  // block 3
  x[1900] = nan;  // block 7 holds both
  x[1901] = -inf;
  x[4096] = -inf;  // the partial last block 16
  const std::vector<std::int64_t> bad_blocks = {0, 3, 7, 16};
  const int saved = get_num_threads();
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int bits : {8, 4})
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const std::vector<float> map = bits == 8 ? dynamic_map(true) : dynamic_map(true, 3, 4);
        const Quantized q = quantize(dt, x, map, bits, 256);
        CHECK_EQ(q.bad_blocks, std::int64_t(4));
        for (std::int64_t b = 0; b < 17; ++b) {
          const bool bad = std::find(bad_blocks.begin(), bad_blocks.end(), b) != bad_blocks.end();
          CHECK_EQ_AT(std::isfinite(q.absmax[std::size_t(b)]), !bad, "block " + std::to_string(b));
        }
        // The finite blocks are encoded as usual.
        std::vector<float> finite = x;
        for (std::int64_t b : bad_blocks)
          for (std::int64_t i = b * 256; i < std::min<std::int64_t>((b + 1) * 256, 4097); ++i)
            finite[std::size_t(i)] = 0.0f;
        const Quantized ref = quantize(dt, finite, map, bits, 256);
        for (std::int64_t b = 0; b < 17; ++b) {
          if (std::find(bad_blocks.begin(), bad_blocks.end(), b) != bad_blocks.end()) continue;
          CHECK_BITS_EQ(q.absmax[std::size_t(b)], ref.absmax[std::size_t(b)]);
          for (std::int64_t i = b * 256; i < std::min<std::int64_t>((b + 1) * 256, 4097); ++i)
            CHECK_EQ_AT(code_at(q, i), code_at(ref, i), "element " + std::to_string(i));
        }
      }
  set_num_threads(saved);
  std::vector<float> one_nan = {nan};
  CHECK_EQ(quantize(DType::f32, one_nan, dynamic_map(true), 8, 32).bad_blocks, std::int64_t(1));
}

OCTOPT_TEST(four_bit_codes_pack_low_nibble_first) {
  // Element i of a 16-entry map quantizes to code i: r = map[i] exactly when absmax is 1.
  const std::vector<float> map = dynamic_map(true, 3, 4);
  for (std::int64_t n : {31, 32, 33}) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = map[std::size_t((i * 7 + 3) % 16)];
    for (std::int64_t i = 0; i < n; i += 32) x[std::size_t(i)] = 1.0f;  // absmax 1 in every block
    const Quantized q = quantize(DType::f32, x, map, 4, 32);
    CHECK_EQ(q.codes.size(), std::size_t((n + 1) / 2));
    for (std::int64_t i = 0; i < n; ++i) {
      const int want = i % 32 == 0 ? 15 : int((i * 7 + 3) % 16);
      const int byte = q.codes[std::size_t(i / 2)];
      CHECK_EQ_AT((i % 2 == 0) ? (byte & 0x0f) : (byte >> 4), want, "element " + std::to_string(i));
    }
  }
}

OCTOPT_TEST(invalid_arguments_throw) {
  const Codebook cb8 = make_codebook(dynamic_map(true), 8);
  const Codebook cb4 = make_codebook(dynamic_map(true, 3, 4), 4);
  std::vector<float> x(100, 0.5f), out(100);
  std::vector<std::uint8_t> codes(100);
  std::vector<float> absmax(100);
  for (int bs : {0, 48, 16, 8192, -64, 33, 4095}) {
    const std::string v = std::to_string(bs);
    CHECK_THROWS(
        quantize_blockwise(x.data(), DType::f32, 100, cb8, bs, 8, Rounding::nearest, 0, codes.data(), absmax.data()),
        std::invalid_argument, {"quantize_blockwise", "block_size", v.c_str()});
    CHECK_THROWS(dequantize_blockwise(codes.data(), absmax.data(), 100, cb8, bs, 8, DType::f32, out.data()),
                 std::invalid_argument, {"dequantize_blockwise", "block_size", v.c_str()});
  }
  CHECK_THROWS(
      quantize_blockwise(x.data(), DType::f32, 100, cb8, 64, 4, Rounding::nearest, 0, codes.data(), absmax.data()),
      std::invalid_argument, {"quantize_blockwise", "qmap"});
  CHECK_THROWS(
      quantize_blockwise(x.data(), DType::f32, 100, cb4, 64, 8, Rounding::nearest, 0, codes.data(), absmax.data()),
      std::invalid_argument, {"quantize_blockwise", "qmap"});
  CHECK_THROWS(dequantize_blockwise(codes.data(), absmax.data(), 100, cb8, 64, 3, DType::f32, out.data()),
               std::invalid_argument, {"dequantize_blockwise", "bits", "3"});
  CHECK_THROWS(
      quantize_blockwise(x.data(), DType::f32, -1, cb8, 64, 8, Rounding::nearest, 0, codes.data(), absmax.data()),
      std::invalid_argument, {"quantize_blockwise"});
  // n = 0 is valid and touches nothing.
  codes.assign(codes.size(), 0xAB);
  CHECK_EQ(quantize_blockwise(x.data(), DType::f32, 0, cb8, 64, 8, Rounding::nearest, 0, codes.data(), absmax.data()),
           std::int64_t(0));
  CHECK_EQ(codes[0], std::uint8_t(0xAB));
}

OCTOPT_TEST(results_do_not_depend_on_thread_count) {
  const int saved = get_num_threads();
  std::vector<float> x = test_values(100003, false, 8);
  x[70000] = std::numeric_limits<float>::quiet_NaN();
  for (int bits : {8, 4})
    for (Rounding rounding : {Rounding::nearest, Rounding::stochastic})
      for (int block : {32, 256, 4096})
        for (DType dt : {DType::f32, DType::bf16}) {
          const std::vector<float> map = bits == 8 ? dynamic_map(true) : dynamic_map(true, 3, 4);
          set_num_threads(1);
          const Quantized a = quantize(dt, x, map, bits, block, rounding, 42);
          const std::vector<float> da = dequantize(a, dt);
          set_num_threads(2);
          const Quantized b = quantize(dt, x, map, bits, block, rounding, 42);
          const std::vector<float> db = dequantize(b, dt);
          const std::string at = "bits " + std::to_string(bits) + ", block " + std::to_string(block);
          CHECK_EQ_AT(a.bad_blocks, b.bad_blocks, at);
          CHECK_AT(a.codes == b.codes, at);
          CHECK_AT(same_bits(a.absmax, b.absmax), at);
          CHECK_AT(same_bits(da, db), at);
        }
  set_num_threads(saved);
}

OCTOPT_TEST(stochastic_rounding_is_reproducible_and_keyed_by_element) {
  const std::vector<float> map = dynamic_map(true);
  const std::vector<float> x = test_values(20000, false, 9);
  const Quantized a = quantize(DType::f32, x, map, 8, 256, Rounding::stochastic, 1);
  const Quantized again = quantize(DType::f32, x, map, 8, 256, Rounding::stochastic, 1);
  const Quantized other_seed = quantize(DType::f32, x, map, 8, 256, Rounding::stochastic, 2);
  CHECK(a.codes == again.codes);
  CHECK(a.codes != other_seed.codes);
  // Changing one block changes no other block's codes.
  std::vector<float> y = x;
  for (std::size_t i = 3 * 256; i < 4 * 256; ++i) y[i] *= 0.5f;
  const Quantized changed = quantize(DType::f32, y, map, 8, 256, Rounding::stochastic, 1);
  bool others_same = true;
  for (std::int64_t i = 0; i < 20000; ++i)
    if (i / 256 != 3) others_same = others_same && code_at(a, i) == code_at(changed, i);
  CHECK(others_same);
  // Each code is one of the two map entries that bracket x / absmax.
  for (std::int64_t i = 0; i < 20000; ++i) {
    const float amax = a.absmax[std::size_t(i / 256)];
    const float r = x[std::size_t(i)] / amax;
    const auto up = std::upper_bound(map.begin(), map.end(), r);
    const float lo = up == map.begin() ? map.front() : *(up - 1);
    const float hi = up == map.end() ? map.back() : *up;
    const float got = map[std::size_t(code_at(a, i))];
    CHECK_AT(got == lo || got == hi, "element " + std::to_string(i) + ", r = " + show(r));
  }
}

OCTOPT_TEST(stochastic_rounding_is_unbiased) {
  for (int bits : {8, 4}) {
    const std::vector<float> map = bits == 8 ? dynamic_map(true) : dynamic_map(true, 3, 4);
    const float r0 = 0.3f;  // absmax is 1, so r = r0 exactly
    const auto up = std::upper_bound(map.begin(), map.end(), r0);
    const double lo = *(up - 1), hi = *up, p = (r0 - lo) / (hi - lo);
    const std::int64_t n = 1 << 16;
    std::vector<float> x(static_cast<std::size_t>(n), r0);
    for (std::int64_t i = 0; i < n; i += 4096) x[std::size_t(i)] = 1.0f;
    const std::vector<float> nearest = dequantize(quantize(DType::f32, x, map, bits, 4096), DType::f32);
    const std::vector<float> out =
        dequantize(quantize(DType::f32, x, map, bits, 4096, Rounding::stochastic, 7), DType::f32);
    double sum = 0.0, sum_nearest = 0.0;
    std::int64_t count = 0, ups = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (i % 4096 == 0) continue;
      sum += out[std::size_t(i)], sum_nearest += nearest[std::size_t(i)], ++count;
      ups += out[std::size_t(i)] == float(hi);
    }
    const double sigma = (hi - lo) * std::sqrt(p * (1.0 - p) / double(count));
    // The test can tell: nearest rounding is far off in these units.
    CHECK(std::fabs(sum_nearest / double(count) - r0) > 20.0 * sigma);
    const double mean = sum / double(count);
    CHECK_AT(std::fabs(mean - r0) <= 5.0 * sigma,
             "mean " + show(mean) + " vs " + show(double(r0)) + ", sigma " + show(sigma));
    const double freq = double(ups) / double(count);
    CHECK_AT(std::fabs(freq - p) <= 5.0 * std::sqrt(p * (1.0 - p) / double(count)),
             "frequency " + show(freq) + " vs " + show(p));
  }
}

// Stochastic codes are encode_value's (numerics/codebook.hpp) on every kernel path, for maps where the sign rule
// changes codes (a zero floor; no zero entry and both signs) and where it changes none (the 4-bit state maps, whose
// vector encoders leave it out).
OCTOPT_TEST(stochastic_codes_are_the_scalar_rule_on_every_path) {
  struct M {
    std::string name;
    std::vector<float> values;
    int bits;
    bool floor;
  };
  const std::vector<M> maps = {
      {"dynamic_map(true, 3, 4)", dynamic_map(true, 3, 4), 4, false},
      {"dynamic_map(true, 3, 4) + floor", dynamic_map(true, 3, 4), 4, true},
      {"log2_map_nozero(4)", log2_map_nozero(4, 0.8), 4, true},
      {"no zero, both signs",
       {-1.0f, -0.8f, -0.6f, -0.45f, -0.3f, -0.2f, -0.12f, -0.05f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f},
       4,
       false},
      {"dynamic_map(true)", dynamic_map(true), 8, false},
      {"dynamic_map(false) + floor", dynamic_map(false), 8, true},
  };
  const std::int64_t n = 4097;
  const int block = 256;
  const std::uint64_t seed = 11;
  const std::vector<float> x = test_values(n, false, 21);
  int paths = 0;
  for (const M& m : maps) {
    Codebook cb = make_codebook(m.values, m.bits);
    if (m.floor) keep_nonzero(cb);
    // the scalar rule, from the block absmax the kernels store (checked against max |x| by the round-trip tests)
    std::vector<std::uint8_t> codes(std::size_t(num_code_bytes(n, m.bits)));
    std::vector<float> absmax(std::size_t(num_blocks(n, block)));
    set_simd_level("baseline");
    quantize_blockwise(x.data(), DType::f32, n, cb, block, m.bits, Rounding::stochastic, seed, codes.data(),
                       absmax.data());
    const std::uint64_t key = rng_key(seed, 0);
    bool scalar_same = true;
    for (std::int64_t i = 0; i < n; ++i) {
      const int want = encode_value(cb, x[std::size_t(i)], absmax[std::size_t(i / block)], false, true, key, i);
      scalar_same = scalar_same && code_at(codes.data(), i, m.bits) == want;
    }
    CHECK_AT(scalar_same, m.name + ": baseline codes are encode_value's");
    for (const char* isa : {"avx2", "avx512", "avx512vbmi", "neon"}) {
      try {
        set_simd_level(isa);
      } catch (const std::invalid_argument&) {
        continue;
      }
      ++paths;
      std::vector<std::uint8_t> other(codes.size());
      std::vector<float> other_absmax(absmax.size());
      quantize_blockwise(x.data(), DType::f32, n, cb, block, m.bits, Rounding::stochastic, seed, other.data(),
                         other_absmax.data());
      CHECK_AT(other == codes, m.name + ": " + isa + " codes are baseline's");
    }
  }
  set_simd_level("");
  std::printf("stochastic codes: %d other paths checked\n", paths);
}
