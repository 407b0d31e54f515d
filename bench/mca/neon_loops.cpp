// llvm-mca drivers of the NEON kernels (bench/README.md, "ARM estimate"): the production kernels compiled
// for aarch64 (this file includes kernels_impl.cpp as the NEON object of the library), each called on one
// group of 16 elements between LLVM-MCA markers, so that llvm-mca sees the steady-state code of 16
// elements (no loop around it: llvm-mca repeats the region itself). Not part of the build. bench/mca/run.sh compiles it
// with clang and runs llvm-mca.
#define OCTOPT_ISA_NEON 1
#include "cpu/kernels_impl.cpp"  // NOLINT: the kernels themselves, as the library compiles them

namespace octopt::cpu::isa_neon {

// The closed-form encoder on 16 floats of one block (8-bit codes of a 256-entry dynamic map).
extern "C" [[gnu::flatten]] void mca_encode_neon(const Codebook& cb, const Levels& L, const float* v, float scale,
                                                 std::uint8_t* codes) {
  __asm__ volatile("// LLVM-MCA-BEGIN encode_closed_form_16");
  encode_block_closed_form_neon(cb, L.cfp, L.cf.width, v, 16, scale, codes);
  __asm__ volatile("// LLVM-MCA-END encode_closed_form_16");
}

// 16 bytes of a 256-entry byte table (four groups of 64 entries) at 16 codes: tbl for codes < 64, then tbx
// for each further group (an index out of its group's range leaves the byte as it is).
inline uint8x16_t lookup256(const uint8x16x4_t* T, uint8x16_t c) {
  const uint8x16_t s64 = vdupq_n_u8(64);
  uint8x16_t b = vqtbl4q_u8(T[0], c);
  c = vsubq_u8(c, s64);
  b = vqtbx4q_u8(b, T[1], c);
  c = vsubq_u8(c, s64);
  b = vqtbx4q_u8(b, T[2], c);
  c = vsubq_u8(c, s64);
  return vqtbx4q_u8(b, T[3], c);
}

// The rejected NEON decode of 256-entry maps: values[codes[i]] * a by byte-plane lookups (Levels::planes),
// four 64-entry tbl/tbx per plane and 16 codes; llvm-mca: 58 cycles per 16 on Neoverse V1, 17 for the scalar loop.
inline void decode256_tbl(const Codebook& cb, const std::uint8_t (*planes)[256], const std::uint8_t* codes, int len,
                          float a, float* out) {
  const float32x4_t va = vdupq_n_f32(a);
  int i = 0;
  for (; i + 16 <= len; i += 16) {
    const uint8x16_t c = vld1q_u8(codes + i);
    uint8x16_t b[4];
    for (int k = 0; k < 4; ++k) {
      const uint8x16x4_t T[4] = {vld1q_u8_x4(planes[k]), vld1q_u8_x4(planes[k] + 64), vld1q_u8_x4(planes[k] + 128),
                                 vld1q_u8_x4(planes[k] + 192)};
      b[k] = lookup256(T, c);
    }
    float32x4_t f[4];
    interleave_planes(b[0], b[1], b[2], b[3], f);
    for (int q = 0; q < 4; ++q) vst1q_f32(out + i + 4 * q, vmulq_f32(f[q], va));
  }
  for (; i < len; ++i) out[i] = decode_value(cb, codes[i], a);
}

// The 256-entry decode of 16 codes (byte planes, tbl/tbx).
extern "C" [[gnu::flatten]] void mca_decode_neon(const Codebook& cb, const Levels& L, const std::uint8_t* codes,
                                                 float a, float* out) {
  __asm__ volatile("// LLVM-MCA-BEGIN decode256_16");
  decode256_tbl(cb, L.planes, codes, 16, a, out);
  __asm__ volatile("// LLVM-MCA-END decode256_16");
}

// The scalar decode of 16 codes: decode_block's loop, what the NEON kernels run for 256-entry maps.
extern "C" [[gnu::flatten]] void mca_decode_scalar(const Codebook& cb, const std::uint8_t* codes, float a, float* out) {
  __asm__ volatile("// LLVM-MCA-BEGIN decode_scalar_16");
  for (int j = 0; j < 16; ++j) out[j] = decode_value(cb, codes[j], a);
  __asm__ volatile("// LLVM-MCA-END decode_scalar_16");
}

// The fused Adam update of 16 elements (the block loop's arithmetic: moments, parameter, absmax bits).
extern "C" [[gnu::flatten]] void mca_adam_neon(const SlotScalars& h, const float* g, float* p, float* m, float* v,
                                               std::uint32_t* amax) {
  __asm__ volatile("// LLVM-MCA-BEGIN adam_update_16");
  adam_update_block_portable<false, true, true>(h, g, p, m, v, 16, amax[0], amax[1]);
  __asm__ volatile("// LLVM-MCA-END adam_update_16");
}

}  // namespace octopt::cpu::isa_neon
