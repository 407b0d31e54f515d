#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels.hpp"

namespace octopt::cpu {
namespace {

bool cpu_has(const std::string& isa) {
#if defined(OCTOPT_X86_KERNELS)
  __builtin_cpu_init();
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (isa == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && cpu_has("avx2");
  if (isa == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi") && cpu_has("avx512");
#endif
#if defined(OCTOPT_NEON_KERNELS)
  if (isa == "neon") return true;  // Advanced SIMD is part of every AArch64 CPU
#endif
  return isa == "baseline";
}

const Kernels* by_name(const std::string& name) {
  if (name == "baseline" || name == "scalar") return &kernels_baseline();
#if defined(OCTOPT_X86_KERNELS)
  if (name == "avx2") return cpu_has("avx2") ? &kernels_avx2() : nullptr;
  if (name == "avx512") return cpu_has("avx512") ? &kernels_avx512() : nullptr;
  if (name == "avx512vbmi") return cpu_has("avx512vbmi") ? &kernels_avx512vbmi() : nullptr;
#endif
#if defined(OCTOPT_NEON_KERNELS)
  if (name == "neon") return cpu_has("neon") ? &kernels_neon() : nullptr;
#endif
  return nullptr;
}

const Kernels* choose(const std::string& forced) {
  if (!forced.empty()) {
    const Kernels* k = by_name(forced);
    if (!k)
      throw std::invalid_argument(
          "OCTOPT_ISA: '" + forced +
          "' is not available here (choose baseline, avx2, avx512, avx512vbmi or neon as the CPU allows)");
    return k;
  }
  for (const char* n : {"avx512vbmi", "avx512", "avx2", "neon"})
    if (const Kernels* k = by_name(n)) return k;
  return &kernels_baseline();
}

std::atomic<const Kernels*> g_active{nullptr};

}  // namespace

const Kernels& active() {
  const Kernels* k = g_active.load(std::memory_order_acquire);
  if (!k) {
    const char* env = std::getenv("OCTOPT_ISA");
    k = choose(env ? env : "");
    g_active.store(k, std::memory_order_release);
  }
  return *k;
}

void set_isa(const char* name) {
  // "" (or null) returns to the start-up choice: OCTOPT_ISA when set, else the best the CPU runs
  const char* forced = name && *name ? name : std::getenv("OCTOPT_ISA");
  g_active.store(choose(forced ? forced : ""), std::memory_order_release);
}

}  // namespace octopt::cpu
