#pragma once
// Helpers of test_blockwise.cpp: typed input buffers, quantize / dequantize with guard bytes
// past every output, and the round-trip check against the documented contract.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/qmap.hpp"
#include "reference.hpp"

namespace octopt_test {

constexpr std::size_t kGuard = 16;
constexpr std::uint8_t kCodeGuard = 0xA5;
constexpr float kFloatGuard = 12345.0f;

// x stored as `dtype`, and the float32 values the library loads from it.
struct Input {
  octopt::DType dtype;
  std::vector<float> f32;
  std::vector<std::uint16_t> u16;
  std::vector<float> loaded;
  const void* data() const { return dtype == octopt::DType::f32 ? static_cast<const void*>(f32.data()) : u16.data(); }
};

inline Input make_input(octopt::DType dt, const std::vector<float>& x) {
  Input in{dt, {}, {}, {}};
  for (float v : x) {
    if (dt == octopt::DType::f32) {
      in.f32.push_back(v), in.loaded.push_back(v);
    } else {
      const std::uint16_t h = dt == octopt::DType::f16 ? octopt::f32_to_f16(v) : octopt::f32_to_bf16(v);
      in.u16.push_back(h);
      in.loaded.push_back(dt == octopt::DType::f16 ? octopt::f16_to_f32(h) : octopt::bf16_to_f32(h));
    }
  }
  return in;
}

struct Quantized {
  std::vector<float> map;
  octopt::Codebook cb;
  int bits, block_size;
  std::int64_t n, bad_blocks;
  std::vector<std::uint8_t> codes;  // num_code_bytes(n, bits)
  std::vector<float> absmax;        // num_blocks(n, block_size)
};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return false;
  return true;
}

inline int code_at(const Quantized& q, std::int64_t i) {
  if (q.bits == 8) return q.codes[std::size_t(i)];
  const int byte = q.codes[std::size_t(i / 2)];
  return (i % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
}

// Quantizes, checking that nothing past the outputs is written.
inline Quantized quantize_input(const Input& in, const std::vector<float>& map, int bits, int block_size,
                                octopt::Rounding rounding = octopt::Rounding::nearest, std::uint64_t seed = 0) {
  const std::int64_t n = std::int64_t(in.loaded.size());
  Quantized q{map, octopt::make_codebook(map, bits), bits, block_size, n, 0, {}, {}};
  q.codes.assign(std::size_t(octopt::num_code_bytes(n, bits)) + kGuard, kCodeGuard);
  q.absmax.assign(std::size_t(octopt::num_blocks(n, block_size)) + kGuard, kFloatGuard);
  q.bad_blocks = octopt::quantize_blockwise(in.data(), in.dtype, n, q.cb, block_size, bits, rounding, seed,
                                            q.codes.data(), q.absmax.data());
  bool guards = true;
  for (std::size_t k = 0; k < kGuard; ++k) {
    guards = guards && q.codes[q.codes.size() - 1 - k] == kCodeGuard;
    guards = guards && q.absmax[q.absmax.size() - 1 - k] == kFloatGuard;
  }
  CHECK(guards);
  q.codes.resize(q.codes.size() - kGuard);
  q.absmax.resize(q.absmax.size() - kGuard);
  return q;
}

inline Quantized quantize(octopt::DType dt, const std::vector<float>& x, const std::vector<float>& map, int bits,
                          int block_size, octopt::Rounding rounding = octopt::Rounding::nearest,
                          std::uint64_t seed = 0) {
  return quantize_input(make_input(dt, x), map, bits, block_size, rounding, seed);
}

// Dequantizes into `out_dt` and returns the values as float32 (checking the guard elements).
inline std::vector<float> dequantize(const Quantized& q, octopt::DType out_dt) {
  const std::size_t n = std::size_t(q.n);
  std::vector<float> out;
  if (out_dt == octopt::DType::f32) {
    std::vector<float> raw(n + kGuard, kFloatGuard);
    octopt::dequantize_blockwise(q.codes.data(), q.absmax.data(), q.n, q.cb, q.block_size, q.bits, out_dt, raw.data());
    CHECK(std::all_of(raw.begin() + std::ptrdiff_t(n), raw.end(), [](float v) { return v == kFloatGuard; }));
    out.assign(raw.begin(), raw.begin() + std::ptrdiff_t(n));
  } else {
    std::vector<std::uint16_t> raw(n + kGuard, 0xBEEF);
    octopt::dequantize_blockwise(q.codes.data(), q.absmax.data(), q.n, q.cb, q.block_size, q.bits, out_dt, raw.data());
    CHECK(std::all_of(raw.begin() + std::ptrdiff_t(n), raw.end(), [](std::uint16_t v) { return v == 0xBEEF; }));
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(out_dt == octopt::DType::f16 ? octopt::f16_to_f32(raw[i]) : octopt::bf16_to_f32(raw[i]));
  }
  return out;
}

// The contract: absmax = max |x| per block; code = nearest map entry to x / absmax (ties to the
// lower index, sign rule); dequantized value = map[code] * absmax in float32, then rounded to the
// output type; and so the error is at most half the widest gap of the map (or the distance from
// the ends of the input range to the map), times absmax.
inline void check_round_trip(octopt::DType dt, const std::vector<float>& x, const std::vector<float>& map, int bits,
                             int block_size) {
  const std::string at = std::string(octopt::dtype_name(dt)) + ", n " + std::to_string(x.size()) + ", bits " +
                         std::to_string(bits) + ", block " + std::to_string(block_size);
  const Input in = make_input(dt, x);
  const Quantized q = quantize_input(in, map, bits, block_size);
  const std::int64_t n = q.n, nb = octopt::num_blocks(n, block_size);
  CHECK_EQ_AT(q.bad_blocks, std::int64_t(0), at);
  // Worst case |r - map[code]| over the r this input can produce (the maps here need no sign rule).
  const bool any_negative = std::any_of(x.begin(), x.end(), [](float v) { return v < 0.0f; });
  double max_err = std::max(double(map.front()) - (any_negative ? -1.0 : 0.0), 1.0 - double(map.back()));
  for (std::size_t k = 0; k + 1 < map.size(); ++k) max_err = std::max(max_err, (double(map[k + 1]) - map[k]) / 2.0);
  const std::vector<float> out32 = dequantize(q, octopt::DType::f32);
  const std::vector<float> out_dt = dequantize(q, dt);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t i0 = b * block_size, i1 = std::min<std::int64_t>(i0 + block_size, n);
    float amax = 0.0f;
    for (std::int64_t i = i0; i < i1; ++i) amax = std::max(amax, std::fabs(in.loaded[std::size_t(i)]));
    CHECK_BITS_EQ(q.absmax[std::size_t(b)], amax);
    for (std::int64_t i = i0; i < i1; ++i) {
      const float xi = in.loaded[std::size_t(i)];
      const std::string where = at + ", element " + std::to_string(i);
      if (amax == 0.0f) {
        CHECK_EQ_AT(out32[std::size_t(i)], 0.0f, where);
        continue;
      }
      const int code = brute_nearest(map, xi / amax);
      CHECK_EQ_AT(code_at(q, i), code, where);
      const float want = map[std::size_t(code)] * amax;
      CHECK_BITS_EQ(out32[std::size_t(i)], want);
      const float want_dt = dt == octopt::DType::f32   ? want
                            : dt == octopt::DType::f16 ? octopt::f16_to_f32(octopt::f32_to_f16(want))
                                                       : octopt::bf16_to_f32(octopt::f32_to_bf16(want));
      CHECK_BITS_EQ(out_dt[std::size_t(i)], want_dt);
      const bool within = std::fabs(double(out32[std::size_t(i)]) - xi) <= (max_err * (1.0 + 1e-6) + 1e-7) * amax;
      CHECK_AT(within, where + ", x = " + show(xi) + ", got " + show(out32[std::size_t(i)]));
    }
  }
}

}  // namespace octopt_test
