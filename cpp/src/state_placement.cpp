// Placement of large host state buffers within a page (state_placement.hpp).
#include "state_placement.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace octopt::placement {

int farthest(const std::vector<int>& taken) {
  if (taken.empty()) return 0;
  int best = 0, best_gap = -1;
  for (int x = 0; x < kPage; x += kAlign) {
    int gap = kPage;
    for (int t : taken) {
      const int d = ((x - t) % kPage + kPage) % kPage;
      gap = std::min(gap, std::min(d, kPage - d));
    }
    if (gap > best_gap) best = x, best_gap = gap;
  }
  return best;
}

// The block starts kPage + kAlign bytes early at most; the pointer to free sits in the 8 bytes before the
// returned address, which is at least kAlign bytes into the block.
void* alloc_at_offset(std::size_t bytes, int page_offset) {
  const std::size_t total = bytes + kPage + kAlign;
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kAlign, (total + kAlign - 1) / kAlign * kAlign));
  if (!base) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(base) + kAlign;  // room for the pointer before it
  const std::uintptr_t want = std::uintptr_t(page_offset) % kPage;
  const std::uintptr_t at = start + (want - start % kPage + kPage) % kPage;
  unsigned char* p = base + (at - reinterpret_cast<std::uintptr_t>(base));
  std::memcpy(p - sizeof(void*), &base, sizeof(void*));
  return p;
}

void free_at_offset(void* p) noexcept {
  if (!p) return;
  void* base;
  std::memcpy(&base, static_cast<unsigned char*>(p) - sizeof(void*), sizeof(void*));
  std::free(base);
}

}  // namespace octopt::placement
