#include "octopt/qmap.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace octopt {
namespace {

// torch.linspace(start, end, steps, dtype=float32) on the CPU: the step is a float32 quotient and
// each entry a single fused multiply-add from the nearer end (verified against torch 2.x).
std::vector<float> torch_linspace_f32(float start, float end, int steps) {
  std::vector<float> out(static_cast<std::size_t>(steps));
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    out[std::size_t(i)] = i < halfway ? std::fma(step, float(i), start) : std::fma(-step, float(steps - i - 1), end);
  }
  return out;
}

// Appends scale * (midpoints of linspace(0.1, 1, items + 1)) in float32, as bitsandbytes does.
void append_scaled_means(std::vector<float>& data, int items, double scale) {
  const std::vector<float> b = torch_linspace_f32(0.1f, 1.0f, items + 1);
  const float s = float(scale);  // torch casts the Python scalar to the tensor's float32
  for (int k = 0; k < items; ++k) {
    const float mean = (b[std::size_t(k)] + b[std::size_t(k) + 1]) / 2.0f;
    data.push_back(s * mean);
  }
}

std::string fmt_float(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

std::vector<float> dynamic_map(bool is_signed, int max_exponent_bits, int total_bits) {
  if (total_bits < 2 || total_bits > 8) throw std::invalid_argument("dynamic_map: total_bits must be in [2, 8]");
  const int non_sign_bits = total_bits - 1;
  if (max_exponent_bits < 1 || max_exponent_bits > non_sign_bits)
    throw std::invalid_argument("dynamic_map: max_exponent_bits must be in [1, total_bits - 1]");
  std::vector<float> data;
  const int additional_items = (1 << (non_sign_bits - max_exponent_bits)) - 1;
  int i = 0;
  for (i = 0; i < max_exponent_bits; ++i) {
    const int items =
        is_signed ? (1 << (i + non_sign_bits - max_exponent_bits)) : (1 << (i + non_sign_bits - max_exponent_bits + 1));
    // Python evaluates 10 ** (-(e - 1) + i) as pow(10.0, k) for negative k.
    const double scale = std::pow(10.0, double(-(max_exponent_bits - 1) + i));
    append_scaled_means(data, items, scale);
    if (is_signed) append_scaled_means(data, items, -scale);
  }
  if (additional_items > 0) {
    const double scale = std::pow(10.0, double(-(max_exponent_bits - 1) + i - 1));
    append_scaled_means(data, additional_items, scale);
    if (is_signed) append_scaled_means(data, additional_items, -scale);
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != (std::size_t(1) << total_bits))
    throw std::invalid_argument("dynamic_map: these parameters do not give 2^total_bits values");
  std::stable_sort(data.begin(), data.end());
  return data;
}

std::vector<float> linear_map(bool is_signed, int bits) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument("linear_map: bits must be 4 or 8, got " + std::to_string(bits));
  const int n = 1 << bits;
  if (!is_signed) return torch_linspace_f32(0.0f, 1.0f, n);
  std::vector<float> v = torch_linspace_f32(-1.0f, 1.0f, n - 1);
  // The centre entry of the linspace is not exactly zero (for 4 bits it is -4.5e-8): insert the
  // zero where it keeps the map ascending.
  v.insert(std::upper_bound(v.begin(), v.end(), 0.0f), 0.0f);
  return v;
}

std::vector<float> linear_map_nozero(int bits) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument("linear_map_nozero: bits must be 4 or 8, got " + std::to_string(bits));
  const int n = 1 << bits;
  std::vector<float> v(std::size_t(n), 0.0f);
  for (int i = 0; i < n; ++i) v[std::size_t(i)] = float(i + 1) / float(n);
  return v;
}

std::vector<float> log2_map_nozero(int bits, double step) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument("log2_map_nozero: bits must be 4 or 8, got " + std::to_string(bits));
  if (!(step > 0.0 && step <= 8.0))
    throw std::invalid_argument("log2_map_nozero: step must be in (0, 8], got " + std::to_string(step));
  const int n = 1 << bits;
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  // exponents below float32's smallest normal are clamped there (only reachable with 8 bits)
  for (int i = 0; i < n; ++i) v[std::size_t(i)] = float(std::exp2(std::max(step * double(i - (n - 1)), -126.0)));
  return v;
}

std::vector<float> fp8_map() {
  constexpr int exponent_bits = 4, precision_bits = 3;
  const int bias = 1 << (exponent_bits - 1);
  std::vector<double> values;
  for (int e = 0; e < (1 << exponent_bits); ++e) {
    for (int m = 0; m < (1 << precision_bits); ++m) {
      double value = e != 0 ? 1.0 : 0.0;
      // mantissa bits, most significant first, as bitsandbytes enumerates them
      for (int bit = 0; bit < precision_bits; ++bit) {
        if ((m >> (precision_bits - 1 - bit)) & 1) value += std::ldexp(1.0, -(bit + 1));
      }
      value = e == 0 ? value * std::ldexp(1.0, -bias) : value * std::ldexp(1.0, -(e - bias - 1));
      values.push_back(value);
      values.push_back(-value);
    }
  }
  std::stable_sort(values.begin(), values.end());
  std::vector<float> out(values.size());
  for (std::size_t k = 0; k < values.size(); ++k) out[k] = float(values[k]);
  const float mx = *std::max_element(out.begin(), out.end());
  for (float& v : out) v = v / mx;
  return out;
}

std::vector<float> quantile_map(const float* x, std::int64_t n, int bits) {
  if (bits != 4 && bits != 8)
    throw std::invalid_argument("quantile_map: bits must be 4 or 8, got " + std::to_string(bits));
  std::vector<float> finite;
  finite.reserve(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) finite.push_back(x[i]);
  if (finite.empty()) throw std::invalid_argument("quantile_map: argument 'x' has no finite values");
  std::sort(finite.begin(), finite.end());
  const int nq = (1 << bits) - 1;
  std::vector<double> q;
  q.reserve(std::size_t(nq) + 1);
  const double last = double(finite.size() - 1);
  for (int i = 0; i < nq; ++i) {
    // probability (i + 0.5) / nq, linear interpolation between order statistics
    const double pos = (double(i) + 0.5) / double(nq) * last;
    const std::size_t lo = std::size_t(std::floor(pos));
    const std::size_t hi = std::min(lo + 1, finite.size() - 1);
    const double w = pos - double(lo);
    q.push_back(double(finite[lo]) * (1.0 - w) + double(finite[hi]) * w);
  }
  q.push_back(0.0);
  std::sort(q.begin(), q.end());
  double amax = 0.0;
  for (double v : q) amax = std::max(amax, std::fabs(v));
  if (amax == 0.0) throw std::invalid_argument("quantile_map: argument 'x' is all zero");
  std::vector<float> out(q.size());
  for (std::size_t k = 0; k < q.size(); ++k) out[k] = std::clamp(float(q[k] / amax), -1.0f, 1.0f);
  return out;
}

void validate_qmap(const float* values, std::int64_t n, int bits, const char* fn, const char* arg) {
  const std::string where = std::string(fn) + ": argument '" + arg + "' ";
  if (bits != 4 && bits != 8)
    throw std::invalid_argument(std::string(fn) + ": bits must be 4 or 8, got " + std::to_string(bits));
  const std::int64_t want = std::int64_t(1) << bits;
  if (n != want)
    throw std::invalid_argument(where + "must have " + std::to_string(want) +
                                " entries for bits=" + std::to_string(bits) + ", got " + std::to_string(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (!std::isfinite(v))
      throw std::invalid_argument(where + "must be finite; entry " + std::to_string(i) + " is " + fmt_float(v));
    if (v < -1.0f || v > 1.0f)
      throw std::invalid_argument(where + "must lie in [-1, 1]; entry " + std::to_string(i) + " is " + fmt_float(v));
    if (i > 0 && v < values[i - 1])
      throw std::invalid_argument(where + "must be sorted ascending; entry " + std::to_string(i) + " (" + fmt_float(v) +
                                  ") is below entry " + std::to_string(i - 1) + " (" + fmt_float(values[i - 1]) + ")");
  }
}

Codebook make_codebook(const float* values, std::int64_t n, int bits, const char* fn, const char* arg) {
  validate_qmap(values, n, bits, fn, arg);
  Codebook cb{};
  cb.size = std::int32_t(n);
  cb.first_nonneg = cb.size;
  cb.last_nonpos = -1;
  for (std::int32_t k = 0; k < cb.size; ++k) {
    cb.values[k] = values[k];
    if (values[k] >= 0.0f && cb.first_nonneg == cb.size) cb.first_nonneg = k;
    // ties go to the lower index: the first entry of a run of equal values
    if (values[k] <= 0.0f && (cb.last_nonpos < 0 || values[k] != values[cb.last_nonpos])) cb.last_nonpos = k;
  }
  cb.zero_lo = 0;
  cb.zero_hi = -1;
  cb.nonzero_floor = -1;
  for (std::int32_t k = cb.size - 1; k >= 0; --k)
    if (values[k] == 0.0f) {
      if (cb.zero_hi < 0) cb.zero_hi = k;
      cb.zero_lo = k;
    }
  for (std::int32_t k = std::max(cb.size - 1, 0); k < 256; ++k)
    cb.thresholds[k] = std::numeric_limits<float>::infinity();
  // From the top down: an entry equal to its upper neighbour takes that neighbour's threshold, so
  // the search skips the upper entries of a run of equal values (ties go to the lower index).
  for (std::int32_t k = cb.size - 2; k >= 0; --k) {
    if (values[k] == values[k + 1]) {
      cb.thresholds[k] = cb.thresholds[k + 1];
      continue;
    }
    // The sum of two neighbouring floats, and half of it, are exact in double.
    const double mid = (double(values[k]) + double(values[k + 1])) * 0.5;
    float t = float(mid);
    if (double(t) <= mid) t = std::nextafter(t, std::numeric_limits<float>::infinity());
    cb.thresholds[k] = t;
  }
  return cb;
}

void keep_nonzero(Codebook& cb) {
  cb.nonzero_floor = (cb.zero_hi >= cb.zero_lo && cb.zero_hi + 1 < cb.size) ? cb.zero_hi + 1 : -1;
}

}  // namespace octopt
