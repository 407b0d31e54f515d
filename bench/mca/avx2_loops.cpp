// llvm-mca drivers of the AVX2 kernels, the counterpart of neon_loops.cpp (bench/README.md, "ARM estimate"):
// the AVX2 object of the library (kernels_impl.cpp with OCTOPT_ISA_AVX2), each kernel called on one group
// between LLVM-MCA markers. Not part of the build; bench/mca/run.sh compiles it with clang -mavx2 -mfma.
// The closed-form encoder (closed_form8, cpu/encode_avx2.hpp) and the fused Adam loop (adam_blocks_avx2.hpp) are
// this checkout's; run.sh takes another checkout's cpp/ as its argument to estimate that one instead.
#define OCTOPT_ISA_AVX2 1
#define OCTOPT_X86_KERNELS 1
#include "cpu/kernels_impl.cpp"  // NOLINT: the kernels themselves, as the library compiles them

namespace octopt::cpu::isa_avx2 {

// The main loop's group of encode_block_closed_form8 (cpu/encode_avx2.hpp) for a map in mirror form with eight
// runs a side (the dynamic maps, a first moment's group of mixed signs): 32 floats, divided by the block scale, the
// closed form on four vectors, the unsure test and the store of the codes (the rare unsure group's level search
// left out, as the NEON driver's is); bench/mca/run.sh halves the count for 16.
extern "C" [[gnu::flatten]] void mca_encode_avx2(const Levels& L, const float* v, float scale, std::uint8_t* codes,
                                                 int* unsure_groups) {
  const ClosedForm8 R(L.cf);
  const __m256 vs = _mm256_set1_ps(scale);
  __asm__ volatile("# LLVM-MCA-BEGIN encode_closed_form_32");
  __m256 r[4], unsure[4];
  __m256i c[4];
  for (int u = 0; u < 4; ++u) r[u] = _mm256_div_ps(_mm256_loadu_ps(v + 8 * u), vs);
  closed_form8_mirror<4, true>(R, r, c, unsure);
  const __m256 any = _mm256_or_ps(_mm256_or_ps(unsure[0], unsure[1]), _mm256_or_ps(unsure[2], unsure[3]));
  *unsure_groups += !_mm256_testz_ps(any, any);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), codes32(c));
  __asm__ volatile("# LLVM-MCA-END encode_closed_form_32");
}

extern "C" [[gnu::flatten]] void mca_decode_avx2(const Codebook& cb, const std::uint8_t* codes, float a, float* out) {
  __asm__ volatile("# LLVM-MCA-BEGIN decode256_16");
  decode_block(cb, codes, 16, a, out);
  __asm__ volatile("# LLVM-MCA-END decode256_16");
}

// The fused Adam update of 16 elements (adam_update_block8, cpu/adam_blocks_avx2.hpp: moments, parameter,
// absmax bits), as the NEON driver's.
extern "C" [[gnu::flatten]] void mca_adam_avx2(const SlotScalars& h, const float* g, float* p, float* m, float* v,
                                               std::uint32_t* amax) {
  __asm__ volatile("# LLVM-MCA-BEGIN adam_update_16");
  adam_update_block8<false, true>(h, g, p, m, v, 16, amax[0], amax[1]);
  __asm__ volatile("# LLVM-MCA-END adam_update_16");
}

}  // namespace octopt::cpu::isa_avx2
