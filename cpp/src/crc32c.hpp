#pragma once
// CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF), the
// checksum of state files. Internal to the core; the public entry point is octopt::crc32c in
// octopt/state_io.hpp. crc32c("123456789") == 0xE3069283.
#include <cstddef>
#include <cstdint>

namespace octopt::detail {

// Each function continues a checksum: crc is the finished CRC-32C of the bytes before (0 for none), so
// crc32c_x(crc32c_x(0, a, na), b, nb) == CRC-32C of a followed by b.

// Portable: table-driven, slicing-by-8.
std::uint32_t crc32c_portable(std::uint32_t crc, const void* data, std::size_t size);

// The SSE4.2 crc32 instruction; call only when crc32c_have_sse42() is true.
std::uint32_t crc32c_sse42(std::uint32_t crc, const void* data, std::size_t size);
bool crc32c_have_sse42();  // the CPU has SSE4.2 and this build contains the instruction path

// The fastest of the above for this CPU, chosen once at run time.
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t size);

}  // namespace octopt::detail
