// Muon's final update on the CPU (octopt/muon.hpp): a fixed chunking, so results never depend on the threads.
#include "octopt/muon.hpp"

#include <stdexcept>
#include <string>

#include "octopt/threading.hpp"

namespace octopt {
namespace {

template <DType P, DType O>
void apply_range(void* p, const void* o, std::int64_t n, float decay, float alpha) {
  parallel_for(n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) muon_apply_element<P, O>(p, o, i, decay, alpha);
  });
}

template <DType P>
void apply_param(void* p, const void* o, DType o_dtype, std::int64_t n, float decay, float alpha) {
  switch (o_dtype) {
    case DType::f32:
      return apply_range<P, DType::f32>(p, o, n, decay, alpha);
    case DType::f16:
      return apply_range<P, DType::f16>(p, o, n, decay, alpha);
    case DType::bf16:
      return apply_range<P, DType::bf16>(p, o, n, decay, alpha);
  }
}

}  // namespace

void muon_apply(void* p, DType p_dtype, const void* o, DType o_dtype, std::int64_t n, double decay, double alpha,
                const char* fn) {
  if (n < 0) throw std::invalid_argument(std::string(fn) + ": element count must be >= 0");
  if (n == 0) return;
  const float d = float(decay), a = float(alpha);
  switch (p_dtype) {
    case DType::f32:
      return apply_param<DType::f32>(p, o, o_dtype, n, d, a);
    case DType::f16:
      return apply_param<DType::f16>(p, o, o_dtype, n, d, a);
    case DType::bf16:
      return apply_param<DType::bf16>(p, o, o_dtype, n, d, a);
  }
}

}  // namespace octopt
