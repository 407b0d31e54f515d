// Trains a least-squares model Y ~ W X (W: 64 x 512) with 8-bit AdamW from octopt's C++ API, saves
// the optimizer state halfway, and checks that a fresh optimizer reloaded from that file continues
// exactly like the uninterrupted run. Usage: least_squares [state-file]  (exit code 0: success)
#include <octopt/optimizer.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr int kOut = 64, kIn = 512, kSamples = 128;

// A small deterministic generator (xorshift64*), so every run sees the same data.
struct Rng {
  std::uint64_t s;
  float uniform() {  // in [-1, 1)
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return float((s * 0x2545F4914F6CDD1Dull) >> 40) / float(1 << 23) - 1.0f;
  }
};

struct Problem {
  std::vector<float> x;  // kIn x kSamples
  std::vector<float> y;  // kOut x kSamples

  explicit Problem(std::uint64_t seed) : x(kIn * kSamples), y(kOut * kSamples, 0.0f) {
    Rng rng{seed};
    std::vector<float> w_true(kOut * kIn);
    for (float& v : w_true) v = 0.1f * rng.uniform();
    for (float& v : x) v = rng.uniform();
    for (int o = 0; o < kOut; ++o)
      for (int i = 0; i < kIn; ++i)
        for (int s = 0; s < kSamples; ++s) y[o * kSamples + s] += w_true[o * kIn + i] * x[i * kSamples + s];
    for (float& v : y) v += 0.01f * rng.uniform();
  }

  // loss = |W X - Y|^2 / (2 N); grad = (W X - Y) X^T / N
  double loss_and_grad(const std::vector<float>& w, std::vector<float>& grad) const {
    std::vector<float> r(kOut * kSamples);
    double loss = 0;
    for (int o = 0; o < kOut; ++o) {
      for (int s = 0; s < kSamples; ++s) r[o * kSamples + s] = -y[o * kSamples + s];
      for (int i = 0; i < kIn; ++i) {
        const float wi = w[o * kIn + i];
        for (int s = 0; s < kSamples; ++s) r[o * kSamples + s] += wi * x[i * kSamples + s];
      }
      for (int s = 0; s < kSamples; ++s) loss += double(r[o * kSamples + s]) * r[o * kSamples + s];
    }
    for (int o = 0; o < kOut; ++o)
      for (int i = 0; i < kIn; ++i) {
        float acc = 0;
        for (int s = 0; s < kSamples; ++s) acc += r[o * kSamples + s] * x[i * kSamples + s];
        grad[o * kIn + i] = acc / kSamples;
      }
    return loss / (2.0 * kSamples);
  }
};

octopt::Optimizer make_optimizer(std::vector<float>& w) {
  octopt::HyperParams hp;
  hp.lr = 1e-2;
  hp.weight_decay = 1e-4;
  octopt::Optimizer opt(octopt::OptimKind::adamw, hp, /*bits=*/8);
  opt.add_param(w.data(), std::int64_t(w.size()), {kOut, kIn});
  return opt;
}

// Runs `steps` steps and returns the last loss.
double train(octopt::Optimizer& opt, const Problem& problem, std::vector<float>& w, int steps, bool print) {
  std::vector<float> grad(w.size());
  double loss = 0;
  for (int k = 0; k < steps; ++k) {
    loss = problem.loss_and_grad(w, grad);
    if (print && opt.global_step() % 20 == 0)
      std::printf("step %4lld  loss %.6g\n", (long long)opt.global_step(), loss);
    opt.step({grad.data()});
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "least_squares_state.safetensors";
  try {
    const Problem problem(42);
    std::vector<float> w(kOut * kIn, 0.0f);
    octopt::Optimizer opt = make_optimizer(w);
    std::vector<float> grad(w.size());
    const double first_loss = problem.loss_and_grad(w, grad);
    std::printf("8-bit AdamW, %d x %d weights: %zu bytes of optimizer state (32-bit: %zu)\n", kOut, kIn,
                opt.state_bytes(), w.size() * 8);

    train(opt, problem, w, 100, true);
    opt.save(path);
    const std::vector<float> w_saved = w;
    const double last_loss = train(opt, problem, w, 60, true);
    std::printf("loss %.6g -> %.6g; state saved at step 100 to %s\n", first_loss, last_loss, path.c_str());

    // Resume from the file: fresh weights (the ones saved alongside), fresh optimizer, same 60 steps.
    std::vector<float> w2 = w_saved;
    octopt::Optimizer resumed = make_optimizer(w2);
    resumed.load(path);
    train(resumed, problem, w2, 60, false);

    const bool same = std::memcmp(w.data(), w2.data(), w.size() * sizeof(float)) == 0;
    const bool learned = last_loss < 0.1 * first_loss;
    std::printf("resumed run %s the uninterrupted one; loss %s\n", same ? "matches" : "DIFFERS FROM",
                learned ? "went down" : "DID NOT GO DOWN ENOUGH");
    return same && learned ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "least_squares: %s\n", e.what());
    return 2;
  }
}
