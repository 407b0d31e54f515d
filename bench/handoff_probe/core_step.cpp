// The core's own cost of a step, with no Python: octopt::step over N tensors of E float32 elements against
// one tensor of N*E, Adam, 32- or 8-bit state, at a given thread count. Prints one line per case:
//   core <bits> <N> <E> <threads> <ns per step, N tensors> <ns per step, one tensor> <ns compute_scalars x N>
//        <ns validate_step x N> <ns of one make_levels call>
// make_levels (cpu/encode.hpp) reorders a codebook for the level search; run_blocks calls it once per
// quantized state per chunk, and a small tensor is one chunk. It is compiled here without the ISA flags of
// the kernels (it is a scalar loop there too).
// Arguments: N (256), rounds (7), steps per round (101), threads (1), block size (256), views (0: each
// array its own allocation, as separate tensors have; 1: slices of one allocation).
// Each figure is the minimum over rounds of the median of a round's steps, in the process's CPU time (at one
// thread it leaves out the time other processes held the core, as bench/overhead_profile.py does).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "octopt/optim.hpp"
#include "octopt/qmap.hpp"
#include "octopt/threading.hpp"

#define OCTOPT_ISA_NS probe_baseline
#include "cpu/encode.hpp"

namespace {

struct Tensors {
  std::vector<std::vector<float>> p, g, m32, v32, absm, absv;
  std::vector<std::vector<std::uint8_t>> m8, v8;
  std::vector<octopt::StepTensor> slots;
};

// views: every array of the N tensors is a slice of one allocation (one tensor's layout, cut up) instead of
// an allocation of its own, which separates the per-tensor work from the memory layout's effect.
Tensors make(int n, std::int64_t e, int bits, int bs, bool views) {
  Tensors t;
  const std::int64_t nb = (e + bs - 1) / bs;
  const int allocs = views ? 1 : n;
  const std::int64_t per = views ? e * n : e, per_nb = views ? nb * n : nb;
  for (int i = 0; i < allocs; ++i) {
    t.p.emplace_back(per, 0.5f);
    t.g.emplace_back(per, 1e-2f);
    if (bits == 32) {
      t.m32.emplace_back(per, 0.0f);
      t.v32.emplace_back(per, 0.0f);
    } else {
      t.m8.emplace_back(per, 127);
      t.v8.emplace_back(per, 0);
      t.absm.emplace_back(per_nb, 0.0f);
      t.absv.emplace_back(per_nb, 0.0f);
    }
  }
  octopt::HyperParams hp;
  for (int i = 0; i < n; ++i) {
    const int a = views ? 0 : i;
    const std::int64_t off = views ? i * e : 0, boff = views ? i * nb : 0;
    octopt::StepTensor s;
    s.param = t.p[a].data() + off;
    s.grad = t.g[a].data() + off;
    s.n = e;
    s.block_size = bs;
    s.rng_stream = std::uint64_t(i);
    s.scalars = octopt::compute_scalars(octopt::OptimKind::adam, hp, 1);
    for (int k = 0; k < 2; ++k) {
      octopt::StateBuffer& st = s.state[k];
      st.bits = bits;
      if (bits == 32) {
        st.data = (k ? t.v32 : t.m32)[a].data() + off;
      } else {
        st.data = (k ? t.v8 : t.m8)[a].data() + off;
        st.absmax = (k ? t.absv : t.absm)[a].data() + boff;
        st.codebook = k;
      }
    }
    t.slots.push_back(s);
  }
  return t;
}

double cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// `inner` calls per timed sample: the CPU clock is a system call (~0.3 us), too coarse for one short call.
template <class F>
double best_median_ns(F&& f, int rounds, int reps, int inner = 1) {
  double best = 1e30;
  std::vector<double> ts(std::size_t(reps), 0.0);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < reps; ++i) {
      const double t0 = cpu_ns();
      for (int k = 0; k < inner; ++k) f();
      ts[std::size_t(i)] = (cpu_ns() - t0) / inner;
    }
    std::nth_element(ts.begin(), ts.begin() + reps / 2, ts.end());
    best = std::min(best, ts[std::size_t(reps / 2)]);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 101;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  const int block_size = argc > 5 ? std::atoi(argv[5]) : 256;  // octopt's default for 8-bit state
  const bool views = argc > 6 && std::atoi(argv[6]) != 0;
  octopt::set_num_threads(threads);
  std::vector<octopt::Codebook> books;
  books.push_back(octopt::make_codebook(octopt::dynamic_map(true), 8));
  books.push_back(octopt::make_codebook(octopt::dynamic_map(false), 8));
  octopt::keep_nonzero(books.back());
  octopt::StepConfig cfg;
  cfg.kind = octopt::OptimKind::adam;
  cfg.codebooks = books.data();
  cfg.num_codebooks = int(books.size());
  octopt::HyperParams hp;
  for (std::int64_t e : {std::int64_t(64), std::int64_t(4096)}) {
    for (int bits : {32, 8}) {
      Tensors many = make(n, e, bits, block_size, views), one = make(1, e * n, bits, block_size, false);
      octopt::StepWorkspace ws_many, ws_one;
      auto step_many = [&] {
        ++cfg.step;
        octopt::step(cfg, many.slots.data(), many.slots.size(), ws_many);
      };
      auto step_one = [&] {
        ++cfg.step;
        octopt::step(cfg, one.slots.data(), one.slots.size(), ws_one);
      };
      std::int64_t t = 1;
      auto scalars = [&] {
        ++t;
        for (auto& s : many.slots) s.scalars = octopt::compute_scalars(cfg.kind, hp, t);
      };
      for (int i = 0; i < 20; ++i) step_many(), step_one();
      const double a = best_median_ns(step_many, rounds, reps), b = best_median_ns(step_one, rounds, reps);
      const double c = best_median_ns(scalars, rounds, reps);
      const double d = best_median_ns([&] { octopt::validate_step(cfg, many.slots.data(), many.slots.size(), "step"); },
                                      rounds, reps);
      octopt::cpu::probe_baseline::Levels levels;
      volatile float sink = 0.0f;
      const double l = best_median_ns(
          [&] {
            octopt::cpu::probe_baseline::make_levels(books[0], levels);
            sink = sink + levels.lvl[1];
          },
          rounds, reps, 100);
      std::printf("core %d %d %lld %d %.0f %.0f %.0f %.0f %.0f\n", bits, n, static_cast<long long>(e), threads, a, b, c,
                  d, l);
    }
  }
  return 0;
}
