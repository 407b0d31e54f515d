#pragma once
// How a tensor is cut for the fused step: quantization blocks of `block_size` contiguous elements
// (the last may be partial), grouped into chunks of whole blocks. The chunking depends only on the
// tensor, never on the thread count or the device, so per-chunk partial sums (the LAMB/LARS norms)
// are added in one fixed order: elements in order within a block, blocks in order within a chunk,
// chunks in order within the tensor. The CPU backend also schedules its threads by chunks.
#include <cstdint>

#include "../config.hpp"

namespace octopt {

// Elements per chunk (a multiple of every block size up to 4096, and at least one block).
inline constexpr std::int64_t kChunkElems = 16384;

// Blocks of a tensor of n elements.
OCTOPT_HD constexpr std::int64_t block_count(std::int64_t n, int block_size) {
  return (n + block_size - 1) / block_size;
}

// Whole blocks per chunk: kChunkElems / block_size, at least one.
OCTOPT_HD constexpr std::int64_t chunk_blocks(int block_size) {
  return kChunkElems / block_size > 1 ? kChunkElems / block_size : 1;
}

// Chunks of a tensor of n elements (0 for an empty tensor).
OCTOPT_HD constexpr std::int64_t chunk_count(std::int64_t n, int block_size) {
  return (block_count(n, block_size) + chunk_blocks(block_size) - 1) / chunk_blocks(block_size);
}

// The blocks [begin, end) of chunk `chunk` of a tensor of n elements.
struct BlockRange {
  std::int64_t begin, end;
};
OCTOPT_HD constexpr BlockRange chunk_block_range(std::int64_t chunk, std::int64_t n, int block_size) {
  const std::int64_t per = chunk_blocks(block_size), nb = block_count(n, block_size);
  const std::int64_t b0 = chunk * per;
  return {b0, b0 + per < nb ? b0 + per : nb};
}

// Elements [i0, i0 + len) of block b.
OCTOPT_HD constexpr std::int64_t block_first(std::int64_t b, int block_size) { return b * block_size; }
OCTOPT_HD constexpr int block_len(std::int64_t b, std::int64_t n, int block_size) {
  return n - b * block_size < block_size ? int(n - b * block_size) : block_size;
}

}  // namespace octopt
