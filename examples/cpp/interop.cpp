// State files shared between C++ and Python: a fixed AdamW setup that tests/cpp/test_consumer.py
// rebuilds in Python with octopt.AdamW, so that both sides can step, save and load each other's files.
//   interop write <state> [bits]                     3 steps from the initial parameters, then save
//   interop continue <in> <out-state> <out-params> [bits]
//                                                     initial parameters, load <in>, one more step,
//                                                     save the state and the raw float32 parameters
// Parameter k, element i starts at ((7 i + 3 k) mod 61 - 30) / 64; its gradient at global step s is
// ((13 i + 5 s + k) mod 53 - 26) / 32 (exact in float32, so NumPy produces the same values).
#include <octopt/optimizer.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

const std::vector<std::vector<std::int64_t>> kShapes = {{64, 80}, {100}, {4097}};  // 8/4-bit, 32-bit, ragged

struct Setup {
  std::vector<std::vector<float>> params;
  octopt::Optimizer opt;

  explicit Setup(int bits) : opt(octopt::OptimKind::adamw, hparams(), bits) {
    for (std::size_t k = 0; k < kShapes.size(); ++k) {
      std::int64_t n = 1;
      for (std::int64_t e : kShapes[k]) n *= e;
      std::vector<float> p(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) p[std::size_t(i)] = float((7 * i + 3 * std::int64_t(k)) % 61 - 30) / 64.0f;
      params.push_back(std::move(p));
    }
    for (std::size_t k = 0; k < params.size(); ++k)
      opt.add_param(params[k].data(), std::int64_t(params[k].size()), kShapes[k]);
  }

  static octopt::HyperParams hparams() {
    octopt::HyperParams hp;
    hp.lr = 1e-2;
    hp.weight_decay = 1e-2;
    return hp;
  }

  void step() {
    const std::int64_t s = opt.global_step() + 1;
    std::vector<std::vector<float>> grads;
    std::vector<const float*> ptrs;
    grads.reserve(params.size());
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::vector<float> g(params[k].size());
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = float((13 * std::int64_t(i) + 5 * s + std::int64_t(k)) % 53 - 26) / 32.0f;
      grads.push_back(std::move(g));
      ptrs.push_back(grads.back().data());
    }
    opt.step(ptrs);
  }
};

int usage() {
  std::fprintf(stderr, "usage: interop write <state> [bits] | interop continue <in> <out-state> <out-params> [bits]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string mode = argv[1];
  try {
    if (mode == "write" && (argc == 3 || argc == 4)) {
      Setup s(argc == 4 ? std::stoi(argv[3]) : 8);
      for (int k = 0; k < 3; ++k) s.step();
      s.opt.save(argv[2]);
      std::printf("wrote %s after %lld steps\n", argv[2], (long long)s.opt.global_step());
      return 0;
    }
    if (mode == "continue" && (argc == 5 || argc == 6)) {
      Setup s(argc == 6 ? std::stoi(argv[5]) : 8);
      s.opt.load(argv[2]);
      s.step();
      s.opt.save(argv[3]);
      std::FILE* f = std::fopen(argv[4], "wb");
      if (f == nullptr) throw std::runtime_error(std::string("cannot open ") + argv[4]);
      for (const auto& p : s.params) std::fwrite(p.data(), sizeof(float), p.size(), f);
      if (std::fclose(f) != 0) throw std::runtime_error(std::string("cannot write ") + argv[4]);
      std::printf("continued %s to step %lld\n", argv[2], (long long)s.opt.global_step());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "interop: %s\n", e.what());
    return 2;
  }
  return usage();
}
