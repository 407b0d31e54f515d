// One slot's state from one layout to another (state_convert.hpp): the checks of incoming state and the
// layout arithmetic every state-dict format shares.
#include "octopt/state_convert.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "octopt/blockwise.hpp"
#include "octopt/numerics/convert.hpp"
#include "octopt/qmap.hpp"

namespace octopt {
namespace {

[[noreturn]] void fail(const SlotNames& nm, const std::string& key, const std::string& what) {
  throw std::invalid_argument(nm.where + ": '" + key + "' " + what);
}

std::string map_key(const SlotNames& nm) { return nm.map.empty() ? nm.values + " map" : nm.map; }

const char* elem_str(SlotElem e, const char* name) { return e == SlotElem::other && name ? name : slot_elem_name(e); }

bool is_float(SlotElem e) {
  return e == SlotElem::f32 || e == SlotElem::f64 || e == SlotElem::f16 || e == SlotElem::bf16;
}

float value_at(const SlotSource& s, std::int64_t i) {
  switch (s.elem) {
    case SlotElem::f64:
      return static_cast<float>(static_cast<const double*>(s.values)[i]);
    case SlotElem::f16:
      return f16_to_f32(static_cast<const std::uint16_t*>(s.values)[i]);
    case SlotElem::bf16:
      return bf16_to_f32(static_cast<const std::uint16_t*>(s.values)[i]);
    default:
      return static_cast<const float*>(s.values)[i];
  }
}

// The blocks of every segment, segment after segment: the absmax index of a segment's first block.
std::vector<std::int64_t> segment_bases(const SlotForm& f) {
  std::vector<std::int64_t> base{0};
  for (std::size_t k = 0; k + 1 < f.segments.size(); ++k)
    base.push_back(base.back() + num_blocks(f.segments[k + 1] - f.segments[k], f.block_size));
  return base;
}

bool same_layout(const SlotForm& a, const SlotForm& b) {
  return a.bits == b.bits && (a.bits == 32 || (a.block_size == b.block_size && a.map == b.map));
}

// Codes one per byte (4-bit unpacked or 8-bit) -> the packing `to` wants; `codes` holds n codes.
void write_codes(const std::uint8_t* codes, std::int64_t n, bool packed4, std::uint8_t* out) {
  if (packed4)
    pack_codes4(codes, n, out);
  else
    std::copy(codes, codes + n, out);
}

// Codes one per byte of a source, whatever its packing.
std::vector<std::uint8_t> codes_of(std::int64_t n, const SlotForm& f, const SlotSource& s) {
  const auto* c = static_cast<const std::uint8_t*>(s.values);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
  if (f.bits == 4 && f.packed)
    unpack_codes4(c, n, out.data());
  else
    std::copy(c, c + n, out.begin());
  return out;
}

// Codes in the packing the block-wise kernels read (4 bits: two per byte).
std::vector<std::uint8_t> kernel_codes(std::int64_t n, const SlotForm& f, const SlotSource& s) {
  const auto* c = static_cast<const std::uint8_t*>(s.values);
  const std::int64_t bytes = num_code_bytes(n, f.bits);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(bytes));
  if (f.bits == 4 && !f.packed)
    pack_codes4(c, n, out.data());
  else
    std::copy(c, c + bytes, out.begin());
  return out;
}

// The float32 values of a source.
std::vector<float> dequantized(std::int64_t n, const SlotForm& f, const SlotSource& s) {
  std::vector<float> v(static_cast<std::size_t>(n));
  if (f.bits == 32) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = value_at(s, i);
    return v;
  }
  if (f.block_size && f.segments.empty()) {
    const std::vector<std::uint8_t> c = kernel_codes(n, f, s);
    const Codebook cb = make_codebook(f.map, f.bits);
    dequantize_blockwise(c.data(), s.absmax, n, cb, f.block_size, f.bits, DType::f32, v.data());
    return v;
  }
  // one scale, or blocks that restart at every segment: map[code] * absmax element by element
  const std::vector<std::uint8_t> c = codes_of(n, f, s);
  const std::vector<std::int64_t> base = f.segments.empty() ? std::vector<std::int64_t>{} : segment_bases(f);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t block = 0;
    if (!f.segments.empty()) {
      const std::int64_t g = f.offset + i;
      const auto k = std::size_t(std::upper_bound(f.segments.begin(), f.segments.end(), g) - f.segments.begin() - 1);
      block = base[k] + (g - f.segments[k]) / f.block_size;
    }
    v[i] = f.map[c[i]] * s.absmax[block];
  }
  return v;
}

void check_source(std::int64_t n, const SlotForm& f, const SlotSource& s, const SlotNames& nm) {
  const std::int64_t want = slot_values_count(n, f);
  if (n && !s.values) fail(nm, nm.values, "is missing");
  if (f.bits == 32) {
    if (s.elem == SlotElem::u8 && !nm.absmax.empty()) fail(nm, nm.values, "is uint8 without '" + nm.absmax + "'");
    if (!is_float(s.elem) || s.count != want)
      fail(nm, nm.values,
           "must hold " + std::to_string(want) + " floating-point values, got " + std::to_string(s.count) + " of " +
               elem_str(s.elem, s.elem_name));
    return;
  }
  if (s.elem != SlotElem::u8 || s.count != want)
    fail(nm, nm.values,
         "must hold " + std::to_string(want) + " uint8 codes (" + std::to_string(f.bits) + "-bit), got " +
             std::to_string(s.count) + " of " + elem_str(s.elem, s.elem_name));
  if (f.bits == 4 && !f.packed) {
    const auto* c = static_cast<const std::uint8_t*>(s.values);
    for (std::int64_t i = 0; i < n; ++i)
      if (c[i] > 15) fail(nm, nm.values, "holds 4-bit codes one per byte, but one is " + std::to_string(c[i]));
  }
  const std::int64_t blocks = slot_absmax_count(n, f);
  if (!s.absmax && (n || s.absmax_count)) fail(nm, nm.values, "holds codes without '" + nm.absmax + "'");
  const std::string got = std::to_string(s.absmax_count) + " of " + elem_str(s.absmax_elem, s.absmax_elem_name);
  if (f.block_size == 0) {
    if (s.absmax_elem != SlotElem::f32 || s.absmax_count != 1 || !std::isfinite(s.absmax[0]) || s.absmax[0] < 0)
      fail(nm, nm.absmax,
           "must be one finite non-negative float32 value, got " +
               (s.absmax_count == 1 && s.absmax_elem == SlotElem::f32 ? std::to_string(s.absmax[0]) : got));
    return;
  }
  const bool enough = f.segments.empty() ? s.absmax_count == blocks : s.absmax_count >= blocks;
  if (s.absmax_elem != SlotElem::f32 || !enough)
    fail(nm, nm.values,
         std::string("absmax must hold ") + (f.segments.empty() ? "" : "at least ") + std::to_string(blocks) +
             " float32 values (block size " + std::to_string(f.block_size) + "), got " + got);
  // a scale is a largest magnitude: never negative (NaN and Inf stay: a step that made them stores them)
  for (std::int64_t b = 0; b < s.absmax_count; ++b)
    if (s.absmax[b] < 0.0f)
      fail(nm, nm.absmax.empty() ? nm.values + " absmax" : nm.absmax,
           "holds a negative scale, " + std::to_string(s.absmax[b]) + " for block " + std::to_string(b));
}

void check_target(std::int64_t n, const SlotForm& f, const SlotTarget& d, const SlotNames& nm) {
  if (d.count != slot_values_count(n, f) || (f.bits != 32 && d.absmax_count != slot_absmax_count(n, f)) ||
      (n && !d.values) || (f.bits != 32 && n && !d.absmax))
    fail(nm, nm.values, "has a target of the wrong size (internal)");
}

}  // namespace

const char* slot_elem_name(SlotElem e) {
  switch (e) {
    case SlotElem::f32:
      return "float32";
    case SlotElem::f64:
      return "float64";
    case SlotElem::f16:
      return "float16";
    case SlotElem::bf16:
      return "bfloat16";
    case SlotElem::u8:
      return "uint8";
    case SlotElem::other:
      break;
  }
  return "other";
}

std::int64_t slot_values_count(std::int64_t n, const SlotForm& f) {
  return f.bits == 4 && f.packed ? num_code_bytes(n, 4) : n;
}

std::int64_t slot_absmax_count(std::int64_t n, const SlotForm& f) {
  if (f.bits == 32) return 0;
  if (f.block_size == 0) return 1;
  if (f.segments.empty()) return num_blocks(n, f.block_size);
  std::int64_t blocks = 0;
  for (std::size_t k = 0; k + 1 < f.segments.size(); ++k)
    blocks += num_blocks(f.segments[k + 1] - f.segments[k], f.block_size);
  return blocks;
}

void check_slot_form(std::int64_t n, const SlotForm& f, bool source, const SlotNames& nm) {
  if (n < 0) fail(nm, nm.values, "has a negative element count " + std::to_string(n));
  if (f.bits != 32 && f.bits != 8 && f.bits != 4)
    fail(nm, nm.values, "has " + std::to_string(f.bits) + "-bit state; expected 32, 8 or 4 bits");
  if (f.bits == 32) return;
  const bool one_scale = source && f.block_size == 0;
  if (!one_scale &&
      (f.block_size < kMinBlockSize || f.block_size > kMaxBlockSize || (f.block_size & (f.block_size - 1)) != 0))
    fail(nm, nm.absmax,
         "has block size " + std::to_string(f.block_size) + "; expected a power of two in [32, 4096]" +
             (source ? " (or 0: one scale)" : ""));
  const std::int64_t size = std::int64_t(1) << f.bits;
  if (one_scale) {  // read by index only: any 2^bits values
    if (std::int64_t(f.map.size()) != size)
      fail(nm, map_key(nm), "must hold " + std::to_string(size) + " values, got " + std::to_string(f.map.size()));
  } else {
    const std::string key = map_key(nm);
    validate_qmap(f.map.data(), std::int64_t(f.map.size()), f.bits, nm.where.c_str(), key.c_str());
  }
  if (f.segments.empty()) return;
  if (!source || one_scale) fail(nm, nm.values, "has segments, which only a quantized source may have");
  const auto& s = f.segments;
  if (s.size() < 2 || !std::is_sorted(s.begin(), s.end()) || s.front() < 0 || f.offset < s.front() ||
      f.offset + n > s.back())
    fail(nm, nm.values,
         "has segments that do not ascend over its elements [" + std::to_string(f.offset) + ", " +
             std::to_string(f.offset + n) + ")");
}

void convert_slot(std::int64_t n, const SlotForm& from, const SlotSource& src, const SlotForm& to,
                  const SlotTarget& dst, const SlotNames& names) {
  check_slot_form(n, from, true, names);
  check_slot_form(n, to, false, names);
  check_source(n, from, src, names);
  check_target(n, to, dst, names);
  if (n == 0) return;
  auto* out_codes = static_cast<std::uint8_t*>(dst.values);
  const bool plain = from.segments.empty() && from.block_size != 0;
  if (plain && same_layout(from, to)) {
    if (to.bits == 32) {
      for (std::int64_t i = 0; i < n; ++i) static_cast<float*>(dst.values)[i] = value_at(src, i);
      return;
    }
    if (from.bits == 8 || from.packed == to.packed)
      std::copy_n(static_cast<const std::uint8_t*>(src.values), dst.count, out_codes);
    else
      write_codes(codes_of(n, from, src).data(), n, to.packed, out_codes);
    std::copy_n(src.absmax, dst.absmax_count, dst.absmax);
    return;
  }
  const std::vector<float> v = dequantized(n, from, src);
  if (to.bits == 32) {
    std::copy(v.begin(), v.end(), static_cast<float*>(dst.values));
    return;
  }
  for (float x : v)
    if (!std::isfinite(x)) fail(names, names.values, "holds NaN or Inf");
  std::vector<std::uint8_t> packed(static_cast<std::size_t>(num_code_bytes(n, to.bits)));
  std::vector<float> absmax(static_cast<std::size_t>(num_blocks(n, to.block_size)));
  const Codebook cb = make_codebook(to.map, to.bits);
  quantize_blockwise(v.data(), DType::f32, n, cb, to.block_size, to.bits, Rounding::nearest, 0, packed.data(),
                     absmax.data());
  if (!from.segments.empty() && same_layout(from, to)) {
    // A block of the target that is a block of the source (same start on its segment's grid, same end)
    // keeps its codes and absmax bit for bit; re-quantizing dequantized codes need not give them back.
    const std::vector<std::int64_t> base = segment_bases(from);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(n));
    if (to.bits == 4)
      unpack_codes4(packed.data(), n, codes.data());
    else
      codes.assign(packed.begin(), packed.end());
    const std::vector<std::uint8_t> saved = codes_of(n, from, src);
    const auto& seg = from.segments;
    for (std::int64_t b = 0; b < std::int64_t(absmax.size()); ++b) {
      const std::int64_t a = from.offset + b * to.block_size, e = std::min(a + to.block_size, from.offset + n);
      const auto k = std::size_t(std::upper_bound(seg.begin(), seg.end(), a) - seg.begin() - 1);
      if ((a - seg[k]) % to.block_size != 0 || std::min(a + to.block_size, seg[k + 1]) != e) continue;
      absmax[b] = src.absmax[base[k] + (a - seg[k]) / to.block_size];
      std::copy(saved.begin() + (a - from.offset), saved.begin() + (e - from.offset),
                codes.begin() + (a - from.offset));
    }
    write_codes(codes.data(), n, to.bits == 4 && to.packed, out_codes);
    std::copy(absmax.begin(), absmax.end(), dst.absmax);
    return;
  }
  if (to.bits == 4 && !to.packed)
    unpack_codes4(packed.data(), n, out_codes);
  else
    std::copy(packed.begin(), packed.end(), out_codes);
  std::copy(absmax.begin(), absmax.end(), dst.absmax);
}

int infer_code_bits(std::int64_t n, std::int64_t code_bytes, const SlotNames& nm) {
  if (code_bytes == n) return 8;
  if (code_bytes == num_code_bytes(n, 4)) return 4;
  fail(nm, nm.values,
       "has " + std::to_string(code_bytes) + " codes, which fits neither 8-bit (" + std::to_string(n) +
           ") nor 4-bit (" + std::to_string(num_code_bytes(n, 4)) + ") codes of the parameter");
}

int infer_block_size(std::int64_t n, std::int64_t blocks, const std::vector<int>& candidates, const SlotNames& nm) {
  std::string tried;
  for (int bs : candidates) {
    if (bs > 0 && num_blocks(n, bs) == blocks) return bs;
    if (bs > 0 && tried.find(" " + std::to_string(bs) + ",") == std::string::npos)
      tried += " " + std::to_string(bs) + ",";
  }
  if (!tried.empty()) tried.pop_back();
  fail(nm, nm.absmax, "has " + std::to_string(blocks) + " blocks, which fits no block size (tried" + tried + ")");
}

void pack_codes4(const std::uint8_t* codes, std::int64_t n, std::uint8_t* packed) {
  for (std::int64_t j = 0; j < num_code_bytes(n, 4); ++j) {
    const std::uint8_t lo = codes[2 * j] & 0x0F;
    const std::uint8_t hi = 2 * j + 1 < n ? std::uint8_t(codes[2 * j + 1] << 4) : std::uint8_t(0);
    packed[j] = std::uint8_t(lo | hi);
  }
}

void unpack_codes4(const std::uint8_t* packed, std::int64_t n, std::uint8_t* codes) {
  for (std::int64_t i = 0; i < n; ++i) codes[i] = (packed[i / 2] >> (4 * (i & 1))) & 0x0F;
}

}  // namespace octopt
