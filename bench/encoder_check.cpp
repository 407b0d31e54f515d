// Exhaustive check of the closed-form encoder (cpp/src/cpu/closed_form.hpp) and of the portable one, the
// octave table (cpp/src/cpu/octave_table.hpp): every float r in [-1, 1] is quantized by a kernel variant and by
// the exact scalar search (nearest_code, numerics/codebook.hpp), for the signed and unsigned dynamic maps and the
// fp8 map, each also with the second-moment zero floor, and the codes are compared.
//
//   octopt_encoder_check [--stride N] [--isa avx512vbmi|avx512|avx2|neon|baseline]
//
// --isa: the variant checked (default: the best this CPU runs); baseline is the octave table.
// --stride N checks every N-th float (CTest runs a sample this way); the default, 1, checks all
// 2 x 1,065,353,217 floats per map, which takes a few minutes. The 2 x 129 floats nearest each of the
// map's thresholds (where a closed form can go wrong) are always checked too. Each map is then checked
// again in blocks of 24 other absmax values (x = r * scale against the search on x / scale): the floats
// near the thresholds and every (997 N)-th float. Exit status 1 on any difference.
// Built with the C++ tests (OCTOPT_BUILD_TESTS=ON).
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/closed_form.hpp"
#include "cpu/kernels.hpp"
#include "cpu/octave_table.hpp"
#include "octopt/numerics/codebook.hpp"
#include "octopt/qmap.hpp"
#include "octopt/threading.hpp"

namespace {

using octopt::Codebook;

constexpr int kBlock = 256;  // element 0 of each block is 1.0, so absmax = 1 and r = x
constexpr std::int64_t kBlocksPerBatch = 4096;
constexpr std::uint32_t kOneBits = 0x3f800000u;  // 1.0f: the largest magnitude checked

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Tally {
  std::atomic<std::uint64_t> checked{0}, differ{0};
  std::atomic<std::uint32_t> first_bad{0};
};

// Checks the floats with bit patterns sign | pattern(k) for k in [k0, k1), each as x = r * scale in a block whose
// absmax is scale, against the search on x / scale (r itself where scale is 1).
template <class Pattern>
void check_range(const Codebook& cb, const octopt::cpu::Kernels& fast, std::uint32_t sign, Pattern pattern,
                 std::uint64_t k0, std::uint64_t k1, Tally& t, float scale = 1.0f) {
  std::vector<float> x(kBlock * kBlocksPerBatch);
  std::vector<std::uint8_t> ca(x.size()), cb2(x.size());
  std::vector<float> amax(kBlocksPerBatch);
  std::uint64_t k = k0;
  while (k < k1) {
    std::int64_t n = 0;
    for (; n < std::int64_t(x.size()) && k < k1; ++n) {
      if (n % kBlock == 0) {
        x[std::size_t(n)] = scale;
        continue;
      }
      const std::uint32_t u = sign | pattern(k);
      x[std::size_t(n)] = from_bits(u) * scale;
      ++k;
    }
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
    fast.quantize(x.data(), octopt::DType::f32, n, cb, kBlock, 8, octopt::Rounding::nearest, 0, ca.data(), amax.data(),
                  0, blocks);
    // the reference: every block's absmax is scale (|x| <= scale), so r = x / scale
    for (std::int64_t i = 0; i < n; ++i)
      cb2[std::size_t(i)] = std::uint8_t(octopt::nearest_code(cb, x[std::size_t(i)] / scale));
    std::uint64_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (i % kBlock == 0 || ca[std::size_t(i)] == cb2[std::size_t(i)]) continue;
      if (bad++ == 0) {
        std::uint32_t u;
        std::memcpy(&u, &x[std::size_t(i)], 4);
        t.first_bad.store(u);
      }
    }
    t.checked += std::uint64_t(n - blocks);
    t.differ += bad;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t stride = 1;
  std::string isa = "";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--stride") {
      stride = std::stoull(argv[i + 1]);
    } else if (a == "--isa") {
      isa = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--stride N] [--isa NAME]\n", argv[0]);
      return 2;
    }
  }
  if (stride == 0) stride = 1;
  try {
    octopt::cpu::set_isa(isa.c_str());
  } catch (const std::exception& e) {
    std::printf("skipped: %s\n", e.what());
    return 0;
  }
  const octopt::cpu::Kernels& fast = octopt::cpu::active();
  std::printf("kernels: %s, stride %llu\n", fast.name, static_cast<unsigned long long>(stride));
  int failures = 0;
  // the 8-bit state maps: dynamic signed and unsigned, and fp8 (both of its slots use the same values)
  for (int map = 0; map < 3; ++map) {
    const bool is_signed = map != 1;
    for (int floor = 0; floor < 2; ++floor) {
      Codebook cb = octopt::make_codebook(map == 2 ? octopt::fp8_map() : octopt::dynamic_map(is_signed), 8);
      if (floor) octopt::keep_nonzero(cb);
      octopt::cpu::ClosedForm cf;
      const bool closed = octopt::cpu::build_closed_form(cb, cf);
      octopt::cpu::OctaveTable octave;
      octopt::cpu::build_octave_table(cb, octave);
      Tally t;
      const std::uint64_t count = kOneBits / stride + 1;  // k * stride <= 0x3f800000
      const auto strided = [&](std::uint64_t k) { return std::uint32_t(k * stride); };
      // near the thresholds: 64 floats either side of each |threshold| in (0, 1)
      std::vector<std::uint32_t> near;
      for (int i = 0; i + 1 < cb.size; ++i) {
        const float a = cb.thresholds[i] < 0 ? -cb.thresholds[i] : cb.thresholds[i];
        std::uint32_t u;
        std::memcpy(&u, &a, 4);
        for (int d = -64; d <= 64; ++d)
          if (std::int64_t(u) + d > 0 && std::int64_t(u) + d <= std::int64_t(kOneBits)) near.push_back(u + d);
      }
      const auto nearby = [&](std::uint64_t k) { return near[std::size_t(k)]; };
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        const std::int64_t chunks = 64;
        octopt::parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
          for (std::int64_t c = c0; c < c1; ++c)
            check_range(cb, fast, sign, strided, count * std::uint64_t(c) / chunks,
                        count * std::uint64_t(c + 1) / chunks, t);
        });
        check_range(cb, fast, sign, nearby, 0, near.size(), t);
      }
      std::printf(
          "%-8s map%-11s closed form %-3s (mirror form %-3s) width %.3g, octave table %d/octave: %llu floats checked, "
          "%llu differ",
          map == 2    ? "fp8"
          : is_signed ? "signed"
                      : "unsigned",
          floor ? " + floor" : "", closed ? "yes" : "no", closed && cf.mirror && cf.pos16 ? "yes" : "no",
          double(cf.width), octave.valid ? 1 << (23 - octave.shift) : 0,
          static_cast<unsigned long long>(t.checked.load()), static_cast<unsigned long long>(t.differ.load()));
      if (t.differ.load()) {
        std::printf(" (first: bits 0x%08x)", t.first_bad.load());
        ++failures;
      }
      std::printf("\n");
      // Blocks of other absmax values, where a kernel may divide by way of a reciprocal (ClosedForm::recip_delta):
      // the floats near the thresholds and a sparser sample, times each scale (normal reciprocals, the range's
      // edges, reciprocals outside it, a spread of exponents).
      Tally ts;
      std::vector<float> scales = {3.0f,        0.7310586f,  1.0f / 3.0f, 1.1f,    0x1.8p-119f, 0x1.fffffep+119f,
                                   0x1.3p-126f, 0x1.7p+125f, 1e-30f,      6.02e23f};
      std::uint32_t lcg = 12345u;
      for (int k = 0; k < 14; ++k) {
        lcg = lcg * 1664525u + 1013904223u;
        scales.push_back(std::ldexp(1.0f + float(lcg >> 9) * 0x1p-23f, int(lcg % 121u) - 60));
      }
      const std::uint64_t sparse = stride * 997;
      const std::uint64_t scount = kOneBits / sparse + 1;
      const auto sampled = [&](std::uint64_t k) { return std::uint32_t(k * sparse); };
      octopt::parallel_for(std::int64_t(scales.size()), 1, [&](std::int64_t s0, std::int64_t s1) {
        for (std::int64_t q = s0; q < s1; ++q)
          for (std::uint32_t sign : {0u, 0x80000000u}) {
            check_range(cb, fast, sign, nearby, 0, near.size(), ts, scales[std::size_t(q)]);
            check_range(cb, fast, sign, sampled, 0, scount, ts, scales[std::size_t(q)]);
          }
      });
      std::printf("%-8s    %-11s %zu block scales: %llu floats checked, %llu differ", "", "", scales.size(),
                  static_cast<unsigned long long>(ts.checked.load()),
                  static_cast<unsigned long long>(ts.differ.load()));
      if (ts.differ.load()) {
        std::printf(" (first: bits 0x%08x)", ts.first_bad.load());
        ++failures;
      }
      std::printf("\n");
    }
  }
  return failures ? 1 : 0;
}
