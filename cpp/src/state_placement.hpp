#pragma once
// Where large host state buffers start within a 4 KiB page. A step streams the parameter, the gradient and
// every state buffer of a tensor at the same element index; fresh large allocations all start at the same
// offset within a page, so a load of one stream matches the low 12 address bits of an older store to another,
// and x86 cores hold it back (4K aliasing: Zen 4 ran the 32-bit Adam step at 1.3-1.4x torch's fused step's time
// at 2^24 parameters with the state at the parameter's offset, 0.86-1.1x placed; docs/decisions.md).
#include <cstddef>
#include <vector>

namespace octopt::placement {

inline constexpr int kPage = 4096;
inline constexpr int kAlign = 64;                               // host state is 64-byte aligned
inline constexpr std::size_t kMinBytes = std::size_t(1) << 20;  // smaller buffers: padding would cost more (0.4%)

// The multiple of kAlign within a page whose circular distance to the nearest of `taken` (offsets within a
// page) is largest, the lowest one on a tie; 0 when `taken` is empty.
int farthest(const std::vector<int>& taken);

// `bytes` of host memory starting at `page_offset` within a page (64-byte aligned), from the C heap; release
// with free_at_offset. Null when out of memory.
void* alloc_at_offset(std::size_t bytes, int page_offset);
void free_at_offset(void* p) noexcept;

}  // namespace octopt::placement
