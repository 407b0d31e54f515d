// The state-file layer's shared pieces (state_format.hpp): dtypes, names, messages and the header
// checksum. The writer, reader and inspect are in state_write.cpp, state_read.cpp and state_inspect.cpp.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "crc32c.hpp"
#include "state_format.hpp"

namespace octopt {
namespace detail {
namespace {

struct DTypeInfo {
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
                                 {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1}};

bool host_is_little_endian() {
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
  const std::uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
#endif
}

void put_u64(std::string& b, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) b += char((v >> (8 * k)) & 0xFF);
}
void put_str(std::string& b, std::string_view s) {
  put_u64(b, s.size());
  b.append(s.data(), s.size());
}

}  // namespace

std::string quote(std::string_view s) { return "'" + detail::printable(s) + "'"; }

std::string prefix(const char* fn, const std::string& path) { return std::string(fn) + ": " + quote(path) + ": "; }

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", unsigned(v));
  return buf;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

std::string known_dtypes() {
  std::string s;
  for (const DTypeInfo& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// Why `name` cannot name a tensor, or nullptr when it can.
const char* tensor_name_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxTensorNameBytes) return "is longer than 1024 bytes";
  if (name.compare(0, 2, "__") == 0) return "starts with '__' (reserved)";
  if (!detail::is_valid_utf8(name)) return "is not valid UTF-8";
  return nullptr;
}

// product(shape) * itemsize, or false on overflow of 64 bits.
bool byte_count(const std::vector<std::int64_t>& shape, std::size_t itemsize, std::uint64_t* out) {
  std::uint64_t n = itemsize;
  for (const std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, std::uint64_t(d), &n)) return false;
  }
  *out = n;
  return true;
}

bool extents_fit(const std::vector<std::int64_t>& shape, std::size_t itemsize) {
  std::uint64_t n = itemsize;
  for (const std::int64_t d : shape) {
    if (d < 0 || (d != 0 && __builtin_mul_overflow(n, std::uint64_t(d), &n))) return false;
  }
  return n <= std::uint64_t(std::numeric_limits<std::int64_t>::max());
}

void require_little_endian(const char* fn) {
  if (!host_is_little_endian())
    throw std::runtime_error(std::string(fn) +
                             ": state files hold little-endian data and this host is big-endian, which octopt "
                             "does not support");
}

std::uint32_t header_checksum(std::vector<std::pair<std::string_view, std::string_view>> metadata,
                              const std::vector<Entry>& tensors) {
  metadata.erase(std::remove_if(metadata.begin(), metadata.end(), [](const auto& kv) { return kv.first == kKeyCrc; }),
                 metadata.end());
  std::sort(metadata.begin(), metadata.end());
  std::string b;
  put_u64(b, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_str(b, key);
    put_str(b, value);
  }
  put_u64(b, tensors.size());
  for (const Entry& t : tensors) {
    put_str(b, t.name);
    put_str(b, t.dtype);
    put_u64(b, t.shape.size());
    for (const std::int64_t d : t.shape) put_u64(b, std::uint64_t(d));
    put_u64(b, t.begin);
    put_u64(b, t.end);
  }
  return detail::crc32c(0, b.data(), b.size());
}

bool owned_key(const std::string& key) { return key == kKeyFormat || key == kKeyVersion || key == kKeyCrc; }

}  // namespace detail

// ---------------------------------------------------------------------------------------------------
// Public API

std::size_t state_dtype_size(const std::string& dtype) {
  for (const detail::DTypeInfo& d : detail::kDTypes)
    if (dtype == d.name) return d.size;
  return 0;
}

const std::vector<std::string>& state_dtypes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const detail::DTypeInfo& d : detail::kDTypes) v.emplace_back(d.name);
    return v;
  }();
  return names;
}

}  // namespace octopt
