// Adan through the public C++ Optimizer: 32-bit state against a float64 reference of the paper's Algorithm 1 in
// the authors' code's convention (the same as tests/optim/test_adan.py), both weight-decay forms; 8- and 4-bit
// state (all four slots quantized) near the 32-bit run; a save/load in the middle continues the run bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/optimizer.hpp"

using namespace octopt;

namespace {

constexpr std::size_t kN = 4097;  // 16 blocks of 256 and one element
constexpr int kSteps = 80;

struct AdanRef {
  HyperParams hp;
  std::vector<double> p, m, n, d, prev;
  int t = 0;
  void step(const std::vector<float>& grad) {
    const double b1 = hp.beta1, b2 = hp.beta2, b3 = hp.beta3, lr = hp.lr, wd = hp.weight_decay;
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i];
      const double diff = t == 1 ? 0.0 : g - prev[i];
      const double c = g + b2 * diff;
      m[i] = b1 * m[i] + (1 - b1) * g;
      d[i] = b2 * d[i] + (1 - b2) * diff;
      n[i] = b3 * n[i] + (1 - b3) * c * c;
      const double denom = std::sqrt(n[i]) / std::sqrt(1 - std::pow(b3, t)) + hp.eps;
      const double u = (m[i] / (1 - std::pow(b1, t)) + b2 * d[i] / (1 - std::pow(b2, t))) / denom;
      // the float32 scalar that float32 code multiplies or divides by
      if (hp.no_prox)
        p[i] = p[i] * double(float(1 - lr * wd)) - lr * u;
      else
        p[i] = (p[i] - lr * u) / double(float(1 + lr * wd));
      prev[i] = g;
    }
  }
};

std::vector<std::vector<float>> gradients(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<float>> out(kSteps, std::vector<float>(kN));
  for (auto& g : out) {
    const double scale = 0.2 + 2.0 * std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    for (auto& x : g) x = float(scale * normal(rng));
  }
  return out;
}

std::vector<float> start() {
  std::mt19937_64 rng(99);
  std::normal_distribution<double> normal(0.0, 0.1);
  std::vector<float> p(kN);
  for (auto& x : p) x = float(normal(rng));
  return p;
}

HyperParams adan_hp(double wd, bool no_prox) {
  HyperParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.98;
  hp.beta2 = 0.92;
  hp.beta3 = 0.99;
  hp.weight_decay = wd;
  hp.no_prox = no_prox;
  return hp;
}

std::vector<float> run(const HyperParams& hp, int bits, const std::vector<std::vector<float>>& grads) {
  std::vector<float> p = start();
  Optimizer opt(OptimKind::adan, hp, bits, 0, 0);
  opt.add_param(p.data(), std::int64_t(kN));
  for (const auto& g : grads) opt.step({g.data()});
  return p;
}

}  // namespace

OCTOPT_TEST(adan_matches_float64_reference) {
  const auto grads = gradients(5);
  for (const bool no_prox : {false, true}) {
    for (const double wd : {0.0, 0.1}) {
      const HyperParams hp = adan_hp(wd, no_prox);
      const std::vector<float> p = run(hp, 32, grads);
      const std::vector<float> p0 = start();
      AdanRef ref{hp,
                  std::vector<double>(p0.begin(), p0.end()),
                  std::vector<double>(kN),
                  std::vector<double>(kN),
                  std::vector<double>(kN),
                  std::vector<double>(kN)};
      for (const auto& g : grads) ref.step(g);
      double displacement = 0.0, err = 0.0;
      for (std::size_t i = 0; i < kN; ++i) {
        displacement = std::max(displacement, std::fabs(ref.p[i] - double(p0[i])));
        err = std::max(err, std::fabs(double(p[i]) - ref.p[i]));
      }
      const std::string at = "wd " + std::to_string(wd) + (no_prox ? " no_prox" : " prox") + ": err/displacement " +
                             std::to_string(err / displacement);
      CHECK_AT(displacement > 0.1, at);
      CHECK_AT(err <= 1e-5 * displacement, at);
    }
  }
}

OCTOPT_TEST(adan_quantized_state_tracks_32_bit) {
  const auto grads = gradients(6);
  const HyperParams hp = adan_hp(0.01, false);
  const std::vector<float> p0 = start(), full = run(hp, 32, grads);
  double displacement = 0.0;
  for (std::size_t i = 0; i < kN; ++i) displacement = std::max(displacement, std::fabs(double(full[i] - p0[i])));
  // the median |p_bits - p_32| / displacement (tests/optim/test_adan.py measures the same bounds)
  for (const auto& [bits, bound] : {std::pair<int, double>{8, 0.01}, {4, 0.15}}) {
    const std::vector<float> q = run(hp, bits, grads);
    std::vector<double> err(kN);
    for (std::size_t i = 0; i < kN; ++i) err[i] = std::fabs(double(q[i] - full[i]));
    std::nth_element(err.begin(), err.begin() + kN / 2, err.end());
    const std::string at =
        std::to_string(bits) + "-bit median err/displacement " + std::to_string(err[kN / 2] / displacement);
    CHECK_AT(err[kN / 2] <= bound * displacement && err[kN / 2] > 0.0, at);
  }
  Optimizer opt(OptimKind::adan, hp, 8, 0, 0);
  std::vector<float> p = start();
  opt.add_param(p.data(), std::int64_t(kN));
  const std::vector<int> bits = opt.state_bits(0);
  CHECK_EQ(bits.size(), std::size_t(4));
  for (int b : bits) CHECK_EQ(b, 8);
}

OCTOPT_TEST(adan_resumes_exactly_from_a_state_file) {
  const auto grads = gradients(7);
  const HyperParams hp = adan_hp(0.05, false);
  for (const int bits : {32, 8, 4}) {
    std::vector<float> a = start(), b;
    Optimizer first(OptimKind::adan, hp, bits, 0, 0, 11);
    first.add_param(a.data(), std::int64_t(kN));
    for (int s = 0; s < kSteps / 2; ++s) first.step({grads[std::size_t(s)].data()});
    const std::string path = "octopt_test_adan_" + std::to_string(bits) + ".octopt";
    first.save(path);
    b = a;
    Optimizer second(OptimKind::adan, hp, bits, 0, 0, 11);
    second.add_param(b.data(), std::int64_t(kN));
    second.load(path);
    std::remove(path.c_str());
    for (int s = kSteps / 2; s < kSteps; ++s) {
      first.step({grads[std::size_t(s)].data()});
      second.step({grads[std::size_t(s)].data()});
    }
    CHECK_AT(a == b, std::to_string(bits) + "-bit");
  }
}
