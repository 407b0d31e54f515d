// A rule that names a hand-vectorized CPU block loop (OptimRule::cpu_kernel) gets, through the public Optimizer,
// the parameters its own update_element gives element by element: bit for bit, at 32 bits (where no quantization
// hides a difference), on every instruction-set path the suite runs under (OCTOPT_ISA), over 4097 elements (a
// block tail), with weight decay off and on, maximize, a gradient whose square overflows (v = inf) and an
// infinite parameter (a NaN where the L2 term meets it: the canonical NaN).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/numerics/hyper_params.hpp"
#include "octopt/numerics/update_rules.hpp"
#include "octopt/optimizer.hpp"

using namespace octopt;

namespace {

constexpr std::size_t kN = 4097;
constexpr int kSteps = 6;

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::vector<std::vector<float>> gradients() {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> out(kSteps, std::vector<float>(kN));
  for (auto& g : out) {
    for (auto& x : g) x = 0.05f * normal(rng);
    g[7] = 3e19f;     // g * g overflows: v = inf, the update's denominator inf
    g[300] = 0.0f;    // an exact zero
    g[4096] = -2.5f;  // the tail element
  }
  return out;
}

std::vector<float> start() {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(kN);
  for (auto& x : p) x = normal(rng);
  p[11] = std::numeric_limits<float>::infinity();  // inf times the decay, or plus its L2 term
  p[12] = -0.0f;
  return p;
}

// update_element<K> over the elements, with the scalars the step derives (scalars_for_step).
template <OptimKind K>
std::vector<float> reference(const HyperParams& hp, const std::vector<std::vector<float>>& grads) {
  std::vector<float> p = start();
  std::vector<std::vector<float>> st(rule_slot_count<K>, std::vector<float>(kN, 0.0f));
  for (int t = 1; t <= int(grads.size()); ++t) {
    const SlotScalars h = scalars_for_step(K, hp, t);
    for (std::size_t i = 0; i < kN; ++i) {
      SlotValues s{};
      for (int k = 0; k < rule_slot_count<K>; ++k) s[k] = st[k][i];
      p[i] = update_element<K>(h, p[i], grads[t - 1][i], s);
      for (int k = 0; k < rule_slot_count<K>; ++k) st[k][i] = s[k];
    }
  }
  return p;
}

template <OptimKind K>
void check_kind() {
  const auto grads = gradients();
  for (const double wd : {0.0, 0.1}) {
    for (const bool maximize : {false, true}) {
      HyperParams hp;
      hp.lr = 1e-2;
      hp.weight_decay = wd;
      hp.maximize = maximize;
      std::vector<float> p = start();
      Optimizer opt(K, hp, 32, 0, 0);
      opt.add_param(p.data(), std::int64_t(kN));
      for (const auto& g : grads) opt.step({g.data()});
      const std::vector<float> want = reference<K>(hp, grads);
      std::size_t differ = 0, first = kN;
      for (std::size_t i = 0; i < kN; ++i)
        if (bits_of(p[i]) != bits_of(want[i])) {
          ++differ;
          if (first == kN) first = i;
        }
      const std::string at = std::string(OptimRule<K>::name) + " wd " + std::to_string(wd) +
                             (maximize ? " maximize" : "") + ": " + std::to_string(differ) +
                             " elements differ, first at " + std::to_string(first);
      CHECK_AT(differ == 0, at);
    }
  }
}

}  // namespace

OCTOPT_TEST(cpu_kernels_match_their_rules) {
  int with_kernel = 0;
#define OCTOPT_CHECK_KERNEL(name)                                               \
  if constexpr (OptimRule<OptimKind::name>::cpu_kernel != CpuKernel::generic) { \
    check_kind<OptimKind::name>();                                              \
    ++with_kernel;                                                              \
  }
  OCTOPT_OPTIMIZERS(OCTOPT_CHECK_KERNEL)
#undef OCTOPT_CHECK_KERNEL
  CHECK_EQ(with_kernel, 2);  // Adam and AdamW; a new one is checked here once its rule names it
}
