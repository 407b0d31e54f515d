// Every CPU kernel path on every architecture computes the same bits: quantize/dequantize outputs and a
// few optimizer steps are hashed and compared with hashes computed once on x86-64 (kGolden below). The
// same program, cross-compiled for aarch64 and run under qemu (tests/cpp/test_cross.py), thereby checks
// the NEON and portable paths against the x86 ones; on x86 it checks baseline, AVX2 and AVX-512 alike.
//
// The inputs are made from bit patterns (no libm), so that they are the same everywhere. To regenerate the
// table (only after a deliberate change of the numerics), run on x86-64:
//   OCTOPT_PRINT_ISA_HASHES=1 build/cpp-tests/tests/cpp/octopt_cpp_tests isa_hashes
// and paste the printed lines into kGolden.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/numerics/rng.hpp"
#include "octopt/optimizer.hpp"
#include "octopt/qmap.hpp"
#include "octopt/runtime.hpp"

using namespace octopt;

namespace {

struct Golden {
  const char* name;
  std::uint64_t hash;
};

// Computed on x86-64 (AMD Zen 4, every path agreeing); see the header comment.
const Golden kGolden[] = {
#include "isa_hashes.inc"
};

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}
constexpr std::uint64_t kFnvStart = 0xCBF29CE484222325ull;

template <class T>
std::uint64_t hash_vec(std::uint64_t h, const std::vector<T>& v) {
  return fnv1a(h, v.data(), v.size() * sizeof(T));
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Values of changing scale (exponents 2^-24 .. 2^3), with exact zeros of both signs, tiny and subnormal values, an
// all-zero block and, when `nan_block` >= 0, one NaN in that block of 256.
std::vector<float> make_values(std::int64_t n, bool non_negative, std::uint64_t seed, int nan_block) {
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t z = mix64(seed * 0x9E3779B97F4A7C15ull + std::uint64_t(i));
    const std::uint32_t mant = std::uint32_t(z) & 0x7fffffu;
    const std::uint32_t exp = 103u + std::uint32_t((z >> 32) % 28u) - std::uint32_t(((i / 64) % 4) * 3);
    const std::uint32_t sign = non_negative ? 0u : std::uint32_t(z >> 63) << 31;
    float v = from_bits(sign | exp << 23 | mant);
    if ((z >> 40) % 13 == 0) v = 0.0f;
    if ((z >> 48) % 29 == 0) v = -0.0f;                          // a negative zero meets a map's zero entry from below
    if ((z >> 44) % 97 == 0) v = from_bits(sign | (mant >> 3));  // subnormal
    x[std::size_t(i)] = v;
  }
  for (std::int64_t i = 512; i < 768 && i < n; ++i) x[std::size_t(i)] = 0.0f;
  if (nan_block >= 0 && std::int64_t(nan_block) * 256 + 7 < n) x[std::size_t(nan_block * 256 + 7)] = NAN;
  return x;
}

struct Result {
  std::string name;
  std::uint64_t hash;
};

void quantize_cases(std::vector<Result>& out) {
  struct MapCase {
    const char* name;
    std::vector<float> values;
    int bits;
    bool non_negative;
    bool floor;
  };
  const std::vector<MapCase> maps = {
      {"dyn8s", dynamic_map(true), 8, false, false},      {"dyn8u", dynamic_map(false), 8, true, false},
      {"dyn8u_floor", dynamic_map(false), 8, true, true}, {"fp8", fp8_map(), 8, false, false},
      {"lin8s", linear_map(true), 8, false, false},       {"dyn4s", dynamic_map(true, 3, 4), 4, false, false},
      {"log2_4u", log2_map_nozero(4), 4, true, false},    {"lin4_nozero", linear_map_nozero(4), 4, false, false},
  };
  const std::int64_t n = 10007;
  for (const MapCase& m : maps) {
    Codebook cb = make_codebook(m.values, m.bits);
    if (m.floor) keep_nonzero(cb);
    std::uint64_t h = hash_vec(kFnvStart, m.values);
    for (int bs : {64, 256, 2048}) {
      for (Rounding rounding : {Rounding::nearest, Rounding::stochastic}) {
        const std::vector<float> x = make_values(n, m.non_negative, std::uint64_t(bs), 5);
        std::vector<std::uint8_t> codes(std::size_t(num_code_bytes(n, m.bits)));
        std::vector<float> absmax(std::size_t(num_blocks(n, bs))), y(static_cast<std::size_t>(n));
        const std::int64_t bad =
            quantize_blockwise(x.data(), DType::f32, n, cb, bs, m.bits, rounding, 3, codes.data(), absmax.data());
        dequantize_blockwise(codes.data(), absmax.data(), n, cb, bs, m.bits, DType::f32, y.data());
        h = fnv1a(hash_vec(hash_vec(hash_vec(h, codes), absmax), y), &bad, sizeof bad);
      }
    }
    out.push_back({std::string("quantize_") + m.name, h});
  }
}

void step_cases(std::vector<Result>& out) {
  struct StepCase {
    const char* name;
    OptimKind kind;
    int bits;
    HyperParams hp;
    StateMap map;
  };
  HyperParams plain, wd, maxi, mom, centered;
  wd.weight_decay = 0.01;
  maxi.maximize = true;
  maxi.weight_decay = 0.1;
  mom.momentum = 0.9;
  centered.momentum = 0.9;
  centered.centered = true;
  HyperParams adamw_wd;
  adamw_wd.weight_decay = 0.01;
  const std::vector<StepCase> cases = {
      {"adam8", OptimKind::adam, 8, plain, StateMap::dynamic},
      {"adam8_wd", OptimKind::adam, 8, wd, StateMap::dynamic},
      {"adam8_max", OptimKind::adam, 8, maxi, StateMap::dynamic},
      {"adamw8", OptimKind::adamw, 8, adamw_wd, StateMap::dynamic},
      {"adamw8_fp8", OptimKind::adamw, 8, adamw_wd, StateMap::fp8},
      {"adam4", OptimKind::adam, 4, plain, StateMap::dynamic},
      {"adamw4", OptimKind::adamw, 4, adamw_wd, StateMap::dynamic},
      {"adam32", OptimKind::adam, 32, wd, StateMap::dynamic},
      {"sgd8", OptimKind::sgd, 8, mom, StateMap::dynamic},
      {"sgd4", OptimKind::sgd, 4, mom, StateMap::dynamic},
      {"rmsprop8", OptimKind::rmsprop, 8, centered, StateMap::dynamic},
      {"adagrad8", OptimKind::adagrad, 8, plain, StateMap::dynamic},
      {"lion8", OptimKind::lion, 8, plain, StateMap::dynamic},
      {"ademamix8", OptimKind::ademamix, 8, plain, StateMap::dynamic},
      {"lamb8", OptimKind::lamb, 8, plain, StateMap::dynamic},
      {"lars8", OptimKind::lars, 8, mom, StateMap::dynamic},
      {"radam8", OptimKind::radam, 8, plain, StateMap::dynamic},
      {"nadam8", OptimKind::nadam, 8, plain, StateMap::dynamic},
  };
  const std::int64_t sizes[] = {5000, 4097};
  for (const StepCase& c : cases) {
    std::vector<std::vector<float>> params;
    for (std::int64_t n : sizes) params.push_back(make_values(n, false, 100 + std::uint64_t(n), -1));
    PlanOptions po;
    po.seed = 11;
    Optimizer opt(c.kind, po);
    LayoutOptions lo;
    lo.bits = c.bits;
    lo.state_map = c.map;
    opt.add_group(c.hp, lo);
    for (auto& p : params) opt.add_param(0, p.data(), DType::f32, {std::int64_t(p.size())});
    for (int s = 0; s < 3; ++s) {
      std::vector<std::vector<float>> grads;
      for (std::int64_t n : sizes) grads.push_back(make_values(n, false, 1000 * std::uint64_t(s + 1) + 7, -1));
      if (s == 1) grads[0][300] = NAN;  // one skipped block
      std::vector<const void*> g;
      for (auto& v : grads) g.push_back(v.data());
      opt.step(g, std::vector<DType>(g.size(), DType::f32));
    }
    std::uint64_t h = kFnvStart;
    for (std::size_t i = 0; i < params.size(); ++i) {
      h = hash_vec(h, params[i]);
      for (const StateBuffers& sb : opt.plan().tensor_state(i)) {
        h = fnv1a(h, sb.data, sb.slot.bits == 32 ? sb.count * 4 : sb.count);
        if (sb.absmax) h = fnv1a(h, sb.absmax, sb.blocks * 4);
      }
    }
    out.push_back({std::string("step_") + c.name, h});
  }
}

std::vector<Result> compute_all() {
  std::vector<Result> r;
  quantize_cases(r);
  step_cases(r);
  return r;
}

}  // namespace

OCTOPT_TEST(isa_hashes_match_x86) {
  const bool print = std::getenv("OCTOPT_PRINT_ISA_HASHES") != nullptr;
  int paths = 0;
  for (const char* isa : {"baseline", "avx2", "avx512", "avx512vbmi", "neon"}) {
    try {
      set_simd_level(isa);
    } catch (const std::invalid_argument&) {
      continue;  // not built for this architecture, or not supported by this CPU
    }
    ++paths;
    std::printf("isa_hashes: checking the %s kernels\n", isa);
    const std::vector<Result> got = compute_all();
    if (print && paths == 1)
      for (const Result& r : got)
        std::printf("    {\"%s\", 0x%016llxull},\n", r.name.c_str(), static_cast<unsigned long long>(r.hash));
    CHECK_EQ_AT(got.size(), sizeof kGolden / sizeof *kGolden, std::string(isa));
    for (std::size_t i = 0; i < got.size() && i < sizeof kGolden / sizeof *kGolden; ++i) {
      CHECK_EQ_AT(got[i].name, std::string(kGolden[i].name), std::string(isa));
      CHECK_EQ_AT(got[i].hash, kGolden[i].hash, std::string(isa) + " " + got[i].name);
    }
  }
  set_simd_level("");
  CHECK(paths >= 1);
}
