// Which of the next pass's weight panels a row block fetches ahead (weight_panels.cpp's
// float32/bf16/int8 kernels, int8_panels.cpp's VNNI kernels).
//
// A product over panels runs in passes of a few panels; a pass runs its row blocks one after
// another on the same panels, the first block reading them from memory and the blocks after
// it from L2. While a pass computes, its row blocks fetch the next pass's panels into L2, each
// a share of them (panels [first, first + count) of the next pass), so that the next pass's
// first block reads L2 too and the memory's stream goes on under the computing. Shares are
// whole panels, the later blocks taking them when there are fewer panels than blocks (one
// panel of 16 rows in 4 blocks: the last block fetches it). A pass of one row block (a
// decoding step of one stream, bound by reading the weights) fetches nothing.
#pragma once

#include <cstdint>

namespace weft::serve {

struct PanelShare {
  std::int64_t first = 0, count = 0;
};

inline PanelShare next_pass_share(std::int64_t block, std::int64_t blocks, std::int64_t next_panels) {
  if (blocks <= 1 || next_panels <= 0) return {};
  const std::int64_t first = block * next_panels / blocks, end = (block + 1) * next_panels / blocks;
  return {first, end - first};
}

}  // namespace weft::serve
