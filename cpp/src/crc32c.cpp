#include "crc32c.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "octopt/state_io.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define OCTOPT_CRC32C_X86 1
#include <nmmintrin.h>
#else
#define OCTOPT_CRC32C_X86 0
#endif

namespace octopt::detail {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

// tables[0] is the classic byte-at-a-time table; tables[k][b] is the CRC of byte b followed by k zero
// bytes, so eight table look-ups advance the CRC over eight bytes at once.
constexpr Tables make_tables() {
  Tables t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}

constexpr Tables kTables = make_tables();

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

}  // namespace

std::uint32_t crc32c_portable(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const std::uint64_t w = load_le64(p) ^ c;
    c = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
        kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
  }
  for (; size > 0; --size, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFF];
  return ~c;
}

#if OCTOPT_CRC32C_X86

__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
#if defined(__x86_64__)
  for (; size >= 8; size -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);  // x86 is little-endian; memcpy permits any alignment
    c = std::uint32_t(_mm_crc32_u64(c, w));
  }
#endif
  for (; size >= 4; size -= 4, p += 4) {
    std::uint32_t w;
    std::memcpy(&w, p, 4);
    c = _mm_crc32_u32(c, w);
  }
  for (; size > 0; --size, ++p) c = _mm_crc32_u8(c, *p);
  return ~c;
}

bool crc32c_have_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}

#else

std::uint32_t crc32c_sse42(std::uint32_t, const void*, std::size_t) {
  throw std::logic_error("crc32c_sse42: this build has no SSE4.2 path");
}

bool crc32c_have_sse42() { return false; }

#endif

std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size) {
  static const auto impl = crc32c_have_sse42() ? &crc32c_sse42 : &crc32c_portable;
  return impl(crc, data, size);
}

}  // namespace octopt::detail

namespace octopt {

std::uint32_t crc32c(const void* data, std::size_t size, Crc32cImpl impl) {
  switch (impl) {
    case Crc32cImpl::automatic:
      return detail::crc32c(0, data, size);
    case Crc32cImpl::portable:
      return detail::crc32c_portable(0, data, size);
    case Crc32cImpl::sse42:
      if (!detail::crc32c_have_sse42())
        throw std::invalid_argument("crc32c: argument 'impl' is sse4.2, which this CPU or build does not offer");
      return detail::crc32c_sse42(0, data, size);
  }
  throw std::invalid_argument("crc32c: argument 'impl' has an unknown value " + std::to_string(int(impl)));
}

bool crc32c_hardware() { return detail::crc32c_have_sse42(); }

}  // namespace octopt
