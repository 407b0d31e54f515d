#pragma once
// Muon's final update (numerics/rules/muon.hpp holds its momentum step): p <- p * decay + alpha * o in one pass,
// decay = 1 - lr * weight_decay and alpha = -adjusted_lr, o the orthogonalized direction the caller's framework
// computed. Evaluated in float32 as torch.optim.Muon's mul_ then (fused) add_, stored once in the parameter's
// dtype. No BLAS: the matrix work stays in the caller's framework.
#include <cstdint>

#include "config.hpp"
#include "dtype.hpp"
#include "numerics/convert.hpp"
#include "numerics/rule_math.hpp"

namespace octopt {

template <DType P, DType O>
OCTOPT_HD void muon_apply_element(void* p, const void* o, std::int64_t i, float decay, float alpha) {
  const float kept = load_f32<P>(p, i) * decay;
  store_f32<P>(p, i, rule_fma(alpha, load_f32<O>(o, i), kept));  // torch's add_(o, alpha=...) is fused
}

// `o`: float32, float16 or bfloat16 (Newton-Schulz in bfloat16 for a float32 parameter, as torch); n elements
// each. Throws std::invalid_argument naming `fn` for a negative count.
void muon_apply(void* p, DType p_dtype, const void* o, DType o_dtype, std::int64_t n, double decay, double alpha,
                const char* fn = "muon_apply");

namespace cuda {
// The same on the GPU, enqueued on `stream` (no synchronization); `device` >= 0 makes it current for the launch.
void muon_apply(void* p, DType p_dtype, const void* o, DType o_dtype, std::int64_t n, double decay, double alpha,
                cudaStream_t stream, int device = -1, const char* fn = "muon_apply");
}  // namespace cuda

}  // namespace octopt
