#include "octopt/runtime.hpp"

#include <string>

#include "cpu/kernels.hpp"
#include "octopt/version.hpp"

namespace octopt {

std::string version() { return OCTOPT_VERSION; }

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#elif defined(_MSC_VER)
  return "msvc " + std::to_string(_MSC_VER);
#else
  return "unknown";
#endif
}

std::string fp_contract() {
#if defined(OCTOPT_FP_CONTRACT_OFF)
  return "off";
#else
  return "compiler default";
#endif
}

std::string simd_level() { return cpu::active().name; }

void set_simd_level(const std::string& name) { cpu::set_isa(name.c_str()); }

std::string cpu_features() {
  std::string out;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const auto add = [&](bool has, const char* name) {
    if (has) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("f16c"), "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
#endif
  return out;
}

}  // namespace octopt
