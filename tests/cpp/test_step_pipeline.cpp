// The per-block pipeline shared by the CPU and CUDA backends (numerics/): state keys, chunking,
// percentile selection and trust ratios, checked against plain independent formulations.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/optim.hpp"
#include "octopt/qmap.hpp"

using namespace octopt;

namespace {

const OptimKind kAll[] = {OptimKind::adam,    OptimKind::adamw, OptimKind::sgd,      OptimKind::rmsprop,
                          OptimKind::adagrad, OptimKind::lion,  OptimKind::ademamix, OptimKind::lamb,
                          OptimKind::lars,    OptimKind::radam, OptimKind::nadam,    OptimKind::muon,
                          OptimKind::adan};

struct SlotRow {
  OptimKind kind;
  std::vector<std::pair<const char*, bool>> slots;  // torch name, signed
};

}  // namespace

// The state keys, written out once more as a table (python/octopt/_layout.py's SLOTS).
OCTOPT_TEST(state_slot_table) {
  static_assert(sizeof kAll / sizeof *kAll == std::size_t(kNumOptimKinds), "every kind listed");
  const std::vector<SlotRow> table = {
      {OptimKind::adam, {{"exp_avg", true}, {"exp_avg_sq", false}}},
      {OptimKind::adamw, {{"exp_avg", true}, {"exp_avg_sq", false}}},
      {OptimKind::lamb, {{"exp_avg", true}, {"exp_avg_sq", false}}},
      {OptimKind::radam, {{"exp_avg", true}, {"exp_avg_sq", false}}},
      {OptimKind::nadam, {{"exp_avg", true}, {"exp_avg_sq", false}}},
      {OptimKind::ademamix, {{"m1", true}, {"nu", false}, {"m2", true}}},
      {OptimKind::sgd, {{"momentum_buffer", true}}},
      {OptimKind::lars, {{"momentum_buffer", true}}},
      {OptimKind::lion, {{"exp_avg", true}}},
      {OptimKind::rmsprop, {{"square_avg", false}, {"momentum_buffer", true}, {"grad_avg", true}}},
      {OptimKind::adagrad, {{"sum", false}}},
      {OptimKind::muon, {{"momentum_buffer", true}}},
      {OptimKind::adan, {{"exp_avg", true}, {"exp_avg_sq", false}, {"exp_avg_diff", true}, {"pre_grad", true}}},
  };
  CHECK_EQ(table.size(), std::size_t(kNumOptimKinds));
  for (const SlotRow& row : table) {
    const std::string at = optim_name(row.kind);
    CHECK_EQ_AT(optim_state_slots(row.kind), int(row.slots.size()), at);
    for (int k = 0; k < kMaxStateSlots; ++k) {
      if (k < int(row.slots.size())) {
        CHECK_EQ_AT(std::string(state_slot_name(row.kind, k)), std::string(row.slots[std::size_t(k)].first), at);
        CHECK_EQ_AT(state_slot_signed(row.kind, k), row.slots[std::size_t(k)].second, at);
        const std::string n = row.slots[std::size_t(k)].first;
        CHECK_EQ_AT(state_slot_first_moment(row.kind, k),
                    n == "exp_avg" || n == "m1" || n == "momentum_buffer" || n == "exp_avg_diff", at);
      } else {
        CHECK_EQ_AT(std::string(state_slot_name(row.kind, k)), std::string(""), at);
        CHECK_AT(!state_slot_used(row.kind, k, 0.9, true), at);
      }
    }
  }
  // slots that depend on hyper-parameters
  CHECK(!state_slot_used(OptimKind::sgd, 0, 0.0, false));
  CHECK(state_slot_used(OptimKind::sgd, 0, 0.9, false));
  CHECK(!state_slot_used(OptimKind::lars, 0, 0.0, false));
  CHECK(state_slot_used(OptimKind::rmsprop, 0, 0.0, false));
  CHECK(!state_slot_used(OptimKind::rmsprop, 1, 0.0, true));
  CHECK(state_slot_used(OptimKind::rmsprop, 1, 0.5, false));
  CHECK(!state_slot_used(OptimKind::rmsprop, 2, 0.5, false));
  CHECK(state_slot_used(OptimKind::rmsprop, 2, 0.0, true));
  CHECK(state_slot_used(OptimKind::radam, 1, 0.0, false));
  CHECK(optim_uses_trust_ratio(OptimKind::lamb) && optim_uses_trust_ratio(OptimKind::lars));
  CHECK(!optim_uses_trust_ratio(OptimKind::adam) && !optim_uses_trust_ratio(OptimKind::nadam));
}

// Chunks of whole blocks cover a tensor's blocks in order, kChunkElems elements each (at least one block).
OCTOPT_TEST(chunking_covers_blocks) {
  for (int bs : {32, 64, 256, 4096}) {
    for (std::int64_t n : {std::int64_t(0), std::int64_t(1), std::int64_t(bs), std::int64_t(16384), std::int64_t(16385),
                           std::int64_t(100003)}) {
      const std::string at = "block " + std::to_string(bs) + ", n " + std::to_string(n);
      const std::int64_t nb = (n + bs - 1) / bs;
      CHECK_EQ_AT(block_count(n, bs), nb, at);
      CHECK_EQ_AT(chunk_blocks(bs), std::int64_t(bs >= 16384 ? 1 : 16384 / bs), at);
      std::int64_t next = 0;
      for (std::int64_t c = 0; c < chunk_count(n, bs); ++c) {
        const BlockRange r = chunk_block_range(c, n, bs);
        CHECK_EQ_AT(r.begin, next, at);
        CHECK_AT(r.end > r.begin && r.end - r.begin <= chunk_blocks(bs), at);
        next = r.end;
      }
      CHECK_EQ_AT(next, nb, at);
      std::int64_t covered = 0;
      for (std::int64_t b = 0; b < nb; ++b) {
        CHECK_EQ_AT(block_first(b, bs), covered, at);
        covered += block_len(b, n, bs);
      }
      CHECK_EQ_AT(covered, n, at);
    }
  }
}

// The percentile scale: the CPU's quickselect returns the magnitude of rank percentile_rank, the
// value std::nth_element finds, and exactly one rank class holds it (the CUDA kernel's counting).
OCTOPT_TEST(percentile_selection) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 5);
  std::vector<float> v;
  std::vector<std::uint32_t> keys;
  for (int trial = 0; trial < 600; ++trial) {
    const int len = 2 + trial % 300;
    const float q = float(trial % 7 == 0 ? 50.0 : 1.0 + (trial * 37) % 99);
    v.resize(std::size_t(len));
    keys.resize(std::size_t(len));
    for (float& x : v) {
      // many ties and zeros in some trials, signed zeros, a few huge values
      x = trial % 3 == 0 ? float(small(rng) - 2) : normal(rng);
      if (trial % 5 == 0 && small(rng) == 0) x = -0.0f;
      if (trial % 11 == 0 && small(rng) == 0) x *= 1e30f;
    }
    const int k = percentile_rank(q, len);
    CHECK(k >= 0 && k < len);
    const int want_k = std::clamp(int(std::ceil(double(q) / 100.0 * len)) - 1, 0, len - 1);
    CHECK_EQ(k, want_k);
    std::vector<float> abs(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) abs[i] = std::fabs(v[i]);
    std::nth_element(abs.begin(), abs.begin() + k, abs.end());
    const float got = percentile_scale(v.data(), len, q, keys.data());
    CHECK_BITS_EQ(got, abs[std::size_t(k)]);
    int holders = 0;
    for (int i = 0; i < len; ++i) {
      int less = 0, le = 0;
      for (int j = 0; j < len; ++j) {
        less += magnitude_key(v[std::size_t(j)]) < magnitude_key(v[std::size_t(i)]);
        le += magnitude_key(v[std::size_t(j)]) <= magnitude_key(v[std::size_t(i)]);
      }
      if (rank_holds(less, le, k)) {
        ++holders;
        CHECK_BITS_EQ(std::fabs(v[std::size_t(i)]), got);
      }
    }
    CHECK(holders >= 1);
  }
  CHECK(!percentile_clips(0.0f) && !percentile_clips(100.0f) && percentile_clips(99.5f));
  CHECK_EQ(percentile_clip(3.0f), 1.0f);
  CHECK_EQ(percentile_clip(-3.0f), -1.0f);
  CHECK_EQ(percentile_clip(0.25f), 0.25f);
}

// The trust ratio: sums of squares in a fixed order (block, chunk, tensor), the papers' formulas.
OCTOPT_TEST(trust_ratio_formula) {
  const float v[5] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f};
  CHECK_EQ(block_sum_squares(v, 5), 1.0 + 4.0 + 0.25 + 9.0);
  const double pairs[6] = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0};
  double a = 0.5, b = 0.25;
  add_pair_sums(pairs, 1, 3, a, b);
  CHECK_EQ(a, 0.5 + 3.0 + 5.0);
  CHECK_EQ(b, 0.25 + 4.0 + 6.0);
  CHECK_EQ(trust_ratio(OptimKind::lamb, 16.0, 4.0, 0.0f, 0.0f), 2.0f);
  CHECK_EQ(trust_ratio(OptimKind::lamb, 0.0, 4.0, 0.0f, 0.0f), 1.0f);
  CHECK_EQ(trust_ratio(OptimKind::lars, 16.0, 9.0, 0.01f, 0.5f), float(double(0.01f) * 4.0 / (3.0 + 0.5 * 4.0)));
  CHECK_EQ(trust_ratio(OptimKind::lars, 16.0, 0.0, 0.01f, 0.5f), 1.0f);
}

// The per-element encode/decode of the CUDA kernel agree with the block-wise CPU quantizer.
OCTOPT_TEST(encode_value_matches_blockwise) {
  const std::vector<float> map = dynamic_map(true, 7, 8);
  const Codebook cb = make_codebook(map.data(), std::int64_t(map.size()), 8, "test", "qmap");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(1000);
  for (float& e : x) e = normal(rng);
  std::vector<std::uint8_t> codes(1000);
  std::vector<float> absmax(4);
  quantize_blockwise(x.data(), DType::f32, 1000, cb, 256, 8, Rounding::nearest, 0, codes.data(), absmax.data());
  for (int i = 0; i < 1000; ++i) {
    const float a = absmax[std::size_t(i / 256)];
    CHECK_EQ(encode_value(cb, x[std::size_t(i)], a, false, false, 0, i), int(codes[std::size_t(i)]));
    CHECK_BITS_EQ(decode_value(cb, code_at(codes.data(), i, 8), a), cb.values[codes[std::size_t(i)]] * a);
  }
  const std::uint8_t packed[2] = {0x21, 0x43};
  CHECK_EQ(code_at(packed, 0, 4), 1);
  CHECK_EQ(code_at(packed, 1, 4), 2);
  CHECK_EQ(code_at(packed, 3, 4), 4);
}
