// Export and import of a slot in any layout (state_convert.hpp): copies of equal layouts, re-quantization of
// others, 4-bit packing, one scale, shard segments, size inference, the plan's slots and the messages.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "octopt/blockwise.hpp"
#include "octopt/optim_table.hpp"
#include "octopt/qmap.hpp"
#include "octopt/state_convert.hpp"
#include "octopt/step_plan.hpp"

using namespace octopt;

namespace {

SlotForm quantized(int bits, int block_size, bool is_signed = true) {
  SlotForm f;
  f.bits = bits;
  f.block_size = block_size;
  f.map = state_map_values(bits, is_signed);
  return f;
}

SlotSource floats(const std::vector<float>& v) {
  SlotSource s;
  s.values = v.data();
  s.count = std::int64_t(v.size());
  return s;
}

SlotSource codes(const std::vector<std::uint8_t>& c, const std::vector<float>& absmax) {
  SlotSource s;
  s.values = c.data();
  s.elem = SlotElem::u8;
  s.count = std::int64_t(c.size());
  s.absmax = absmax.data();
  s.absmax_count = std::int64_t(absmax.size());
  return s;
}

SlotNames names() { return SlotNames{"load", "exp_avg", "exp_avg_absmax", ""}; }

std::vector<float> ramp(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * float(i)) * (1.0f + float(i % 7));
  return v;
}

// (codes, absmax) of v quantized with the block-wise kernels, nearest codes.
void quantize(const std::vector<float>& v, const SlotForm& f, std::vector<std::uint8_t>& c, std::vector<float>& a) {
  const std::int64_t n = std::int64_t(v.size());
  c.assign(static_cast<std::size_t>(num_code_bytes(n, f.bits)), 0);
  a.assign(static_cast<std::size_t>(num_blocks(n, f.block_size)), 0.0f);
  quantize_blockwise(v.data(), DType::f32, n, make_codebook(f.map, f.bits), f.block_size, f.bits, Rounding::nearest, 0,
                     c.data(), a.data());
}

}  // namespace

OCTOPT_TEST(convert_copies_an_equal_layout_and_requantizes_others) {
  const std::int64_t n = 1000;
  const std::vector<float> v = ramp(n);
  const SlotForm f8 = quantized(8, 256), f4 = quantized(4, 128);
  std::vector<std::uint8_t> c8, c4;
  std::vector<float> a8, a4;
  quantize(v, f8, c8, a8);
  quantize(v, f4, c4, a4);

  // float32 -> 8 bits: the kernels' codes
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
  std::vector<float> am(a8.size());
  convert_slot(n, SlotForm{}, floats(v), f8, SlotTarget{out.data(), n, am.data(), std::int64_t(am.size())}, names());
  CHECK(out == c8);
  CHECK(am == a8);
  // the same layout: the bytes as they are (absmax too, even a value the codes would not give)
  std::vector<float> odd = a8;
  odd[1] = 123.0f;
  convert_slot(n, f8, codes(c8, odd), f8, SlotTarget{out.data(), n, am.data(), std::int64_t(am.size())}, names());
  CHECK(out == c8);
  CHECK(am == odd);
  // 4 bits -> 8 bits: through float32, dequantized with the 4-bit map and blocks
  std::vector<float> deq(static_cast<std::size_t>(n));
  dequantize_blockwise(c4.data(), a4.data(), n, make_codebook(f4.map, 4), 128, 4, DType::f32, deq.data());
  std::vector<std::uint8_t> want;
  std::vector<float> want_am;
  quantize(deq, f8, want, want_am);
  convert_slot(n, f4, codes(c4, a4), f8, SlotTarget{out.data(), n, am.data(), std::int64_t(am.size())}, names());
  CHECK(out == want);
  CHECK(am == want_am);
  // 8 bits -> float32
  std::vector<float> back(static_cast<std::size_t>(n));
  convert_slot(n, f8, codes(c8, a8), SlotForm{}, SlotTarget{back.data(), n, nullptr, 0}, names());
  dequantize_blockwise(c8.data(), a8.data(), n, make_codebook(f8.map, 8), 256, 8, DType::f32, deq.data());
  CHECK(back == deq);
}

OCTOPT_TEST(convert_repacks_4bit_codes) {
  const std::int64_t n = 301;  // odd: the last byte's high nibble is 0
  const SlotForm packed = quantized(4, 64);
  SlotForm loose = packed;
  loose.packed = false;
  std::vector<std::uint8_t> c;
  std::vector<float> a;
  quantize(ramp(n), packed, c, a);
  std::vector<std::uint8_t> one(static_cast<std::size_t>(n)), two(c.size());
  unpack_codes4(c.data(), n, one.data());
  for (std::int64_t i = 0; i < n; ++i) CHECK_EQ(int(one[i]), int((c[i / 2] >> (4 * (i & 1))) & 15));
  pack_codes4(one.data(), n, two.data());
  CHECK(two == c);
  std::vector<std::uint8_t> out(c.size());
  std::vector<float> am(a.size());
  convert_slot(n, loose, codes(one, a), packed,
               SlotTarget{out.data(), std::int64_t(out.size()), am.data(), std::int64_t(am.size())}, names());
  CHECK(out == c);
  CHECK(am == a);
  one[3] = 16;
  CHECK_THROWS(
      convert_slot(n, loose, codes(one, a), packed,
                   SlotTarget{out.data(), std::int64_t(out.size()), am.data(), std::int64_t(am.size())}, names()),
      std::invalid_argument, {"load: 'exp_avg' holds 4-bit codes one per byte, but one is 16"});
}

OCTOPT_TEST(convert_reads_one_scale_and_segments) {
  // one scale: map[code] * scale, element by element
  const std::int64_t n = 70;
  SlotForm one = quantized(8, 0);
  std::vector<std::uint8_t> c(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) c[i] = std::uint8_t(i * 3);
  const std::vector<float> scale{0.5f};
  std::vector<float> out(static_cast<std::size_t>(n));
  convert_slot(n, one, codes(c, scale), SlotForm{}, SlotTarget{out.data(), n, nullptr, 0}, names());
  for (std::int64_t i = 0; i < n; ++i) CHECK_BITS_EQ(out[i], one.map[c[i]] * 0.5f);
  const std::vector<float> negative{-1.0f};
  CHECK_THROWS(convert_slot(n, one, codes(c, negative), SlotForm{}, SlotTarget{out.data(), n, nullptr, 0}, names()),
               std::invalid_argument, {"'exp_avg_absmax' must be one finite non-negative float32 value"});

  // segments: two shards [0, 100) and [100, 260) quantized on their own blocks of 64; this slot is [100, 260),
  // the second shard itself: every block is a saved block, so codes and absmax come back as they were
  const std::vector<float> v = ramp(260);
  const SlotForm f = quantized(8, 64);
  std::vector<std::uint8_t> c0, c1;
  std::vector<float> a0, a1;
  quantize(std::vector<float>(v.begin(), v.begin() + 100), f, c0, a0);
  quantize(std::vector<float>(v.begin() + 100, v.end()), f, c1, a1);
  std::vector<float> table = a0;
  table.insert(table.end(), a1.begin(), a1.end());
  table.push_back(0.0f);  // a table may be longer than its blocks
  SlotForm seg = f;
  seg.segments = {0, 100, 260};
  seg.offset = 100;
  std::vector<std::uint8_t> got(160);
  std::vector<float> got_am(3);
  convert_slot(160, seg, codes(c1, table), f, SlotTarget{got.data(), 160, got_am.data(), 3}, names());
  CHECK(got == c1);
  CHECK(got_am == a1);
  // [60, 160): neither of this layout's blocks, [60, 124) and [124, 160), starts on a saved block, so both are
  // re-quantized from the values dequantized with the saved blocks
  std::vector<std::uint8_t> mix(c0.begin() + 60, c0.end());
  mix.insert(mix.end(), c1.begin(), c1.begin() + 60);
  seg.offset = 60;
  std::vector<float> deq(100);
  for (int i = 0; i < 100; ++i) {
    const int g = 60 + i;
    const float a = g < 100 ? a0[g / 64] : a1[(g - 100) / 64];
    deq[i] = f.map[mix[i]] * a;
  }
  std::vector<std::uint8_t> want;
  std::vector<float> want_am;
  quantize(deq, f, want, want_am);
  std::vector<std::uint8_t> got2(100);
  std::vector<float> got2_am(2);
  convert_slot(100, seg, codes(mix, table), f, SlotTarget{got2.data(), 100, got2_am.data(), 2}, names());
  CHECK(got2 == want);
  CHECK(got2_am == want_am);
  seg.segments = {0, 260, 100};
  CHECK_THROWS(convert_slot(100, seg, codes(mix, table), f, SlotTarget{got2.data(), 100, got2_am.data(), 2}, names()),
               std::invalid_argument, {"load: 'exp_avg' has segments that do not ascend"});
}

OCTOPT_TEST(convert_names_the_bad_input) {
  const std::int64_t n = 300;
  const SlotForm f8 = quantized(8, 256);
  std::vector<std::uint8_t> c(static_cast<std::size_t>(n));
  std::vector<float> a(2, 1.0f), out(static_cast<std::size_t>(n));
  std::vector<std::uint8_t> oc(static_cast<std::size_t>(n));
  std::vector<float> oa(2);
  const SlotTarget to8{oc.data(), n, oa.data(), 2};
  const SlotNames nm = names();
  std::vector<std::uint8_t> short_codes(10);
  CHECK_THROWS(convert_slot(n, f8, codes(short_codes, a), f8, to8, nm), std::invalid_argument,
               {"load: 'exp_avg' must hold 300 uint8 codes (8-bit), got 10 of uint8"});
  std::vector<float> one_block(1);
  CHECK_THROWS(convert_slot(n, f8, codes(c, one_block), f8, to8, nm), std::invalid_argument,
               {"load: 'exp_avg' absmax must hold 2 float32 values (block size 256), got 1 of float32"});
  // a negative scale is refused, a NaN or infinite one (a step that made a NaN stores it) kept as it is
  std::vector<float> negative{1.0f, -0.5f};
  CHECK_THROWS(convert_slot(n, f8, codes(c, negative), f8, to8, nm), std::invalid_argument,
               {"load: 'exp_avg_absmax' holds a negative scale, -0.500000 for block 1"});
  std::vector<float> nan_scale{NAN, INFINITY};
  convert_slot(n, f8, codes(c, nan_scale), f8, to8, nm);
  CHECK(std::isnan(oa[0]) && std::isinf(oa[1]));
  std::vector<float> v = ramp(n);
  v[7] = NAN;
  CHECK_THROWS(convert_slot(n, SlotForm{}, floats(v), f8, to8, nm), std::invalid_argument,
               {"load: 'exp_avg' holds NaN or Inf"});
  convert_slot(n, SlotForm{}, floats(v), SlotForm{}, SlotTarget{out.data(), n, nullptr, 0}, nm);  // 32 bits: kept
  CHECK(std::isnan(out[7]));
  SlotSource as_codes = codes(c, a);
  as_codes.absmax = nullptr;
  CHECK_THROWS(convert_slot(n, SlotForm{}, as_codes, f8, to8, nm), std::invalid_argument,
               {"load: 'exp_avg' is uint8 without 'exp_avg_absmax'"});
  SlotForm bad = f8;
  bad.block_size = 100;
  CHECK_THROWS(convert_slot(n, bad, codes(c, a), f8, to8, nm), std::invalid_argument,
               {"'exp_avg_absmax' has block size 100; expected a power of two in [32, 4096]"});
  bad = f8;
  bad.map[5] = 5.0f;  // outside [-1, 1]
  CHECK_THROWS(convert_slot(n, bad, codes(c, a), f8, to8, nm), std::invalid_argument, {"load", "'exp_avg map'"});
  bad = f8;
  bad.bits = 6;
  CHECK_THROWS(convert_slot(n, bad, codes(c, a), f8, to8, nm), std::invalid_argument,
               {"'exp_avg' has 6-bit state; expected 32, 8 or 4 bits"});
}

OCTOPT_TEST(infer_finds_bits_and_block_size) {
  const SlotNames nm = names();
  CHECK_EQ(infer_code_bits(1001, 1001, nm), 8);
  CHECK_EQ(infer_code_bits(1001, 501, nm), 4);
  CHECK_THROWS(infer_code_bits(1001, 600, nm), std::invalid_argument,
               {"'exp_avg' has 600 codes, which fits neither 8-bit (1001) nor 4-bit (501)"});
  CHECK_EQ(infer_block_size(1000, 4, {256, 2048}, nm), 256);
  CHECK_EQ(infer_block_size(1000, 1, {256, 2048}, nm), 2048);
  CHECK_THROWS(infer_block_size(1000, 3, {256, 2048, 256}, nm), std::invalid_argument,
               {"'exp_avg_absmax' has 3 blocks, which fits no block size (tried 256, 2048)"});
}

OCTOPT_TEST(plan_slots_export_and_import_in_any_layout) {
  const std::int64_t n = 5000;
  std::vector<float> w(static_cast<std::size_t>(n), 0.5f), g = ramp(n);
  StepPlan plan(OptimKind::adam);
  plan.add_group(HyperParams{}, LayoutOptions{});
  plan.add_tensor(0, w.data(), DType::f32, {n}, -1);
  const DType f32 = DType::f32;
  const void* grads[] = {g.data()};
  plan.step(grads, &f32);
  const SlotForm stored = plan_slot_form(plan, 0, 1);
  CHECK_EQ(stored.bits, 8);
  CHECK(stored.map == state_map_values(8, false));  // the second moment: the unsigned map
  // exported as it is stored, then as float32 and as 4-bit codes
  std::vector<std::uint8_t> c(static_cast<std::size_t>(n));
  std::vector<float> a(static_cast<std::size_t>(num_blocks(n, stored.block_size)));
  export_slot(plan, 0, 1, stored, SlotTarget{c.data(), n, a.data(), std::int64_t(a.size())}, names());
  const StateBuffers b = plan.tensor_state(0)[1];
  CHECK(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(b.data), static_cast<std::uint8_t*>(b.data) + n) == c);
  std::vector<float> f(static_cast<std::size_t>(n));
  export_slot(plan, 0, 1, SlotForm{}, SlotTarget{f.data(), n, nullptr, 0}, names());
  // imported in the stored layout: the bytes as they are
  std::vector<std::uint8_t> zero(static_cast<std::size_t>(n), 0);
  import_slot(plan, 0, 1, stored, codes(zero, a), names());
  CHECK_EQ(int(static_cast<std::uint8_t*>(b.data)[0]), 0);
  import_slot(plan, 0, 1, stored, codes(c, a), names());
  CHECK(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(b.data), static_cast<std::uint8_t*>(b.data) + n) == c);
  // a bad import changes nothing
  std::vector<float> bad = f;
  bad[0] = INFINITY;
  CHECK_THROWS(import_slot(plan, 0, 1, SlotForm{}, floats(bad), names()), std::invalid_argument, {"NaN or Inf"});
  CHECK(std::vector<std::uint8_t>(static_cast<std::uint8_t*>(b.data), static_cast<std::uint8_t*>(b.data) + n) == c);
  CHECK_THROWS(plan_slot_form(plan, 0, 2), std::invalid_argument, {"tensor 0 has no state slot 2"});
  CHECK_THROWS(plan_slot_form(plan, 3, 0), std::out_of_range, {"tensor 3 does not exist"});
}
