// The IDX file format of MNIST and Fashion-MNIST, raw or gzip-compressed.
//
//   bytes 0-1  zero
//   byte  2    element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   byte  3    number of dimensions
//   then one big-endian uint32 per dimension, then the elements (big-endian), row-major.
//
// read_idx validates all of it (magic, type, rank, dimensions, exact data size) and
// throws DataError with one line naming the file and the problem. Asked for the first items
// only (a run limited to N samples), it reads the header and those items: the header is
// checked as always, and a raw file's size against it, but the data past them are not read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/tensor/allocator.h"

namespace weft {

struct IdxArray {
  std::uint8_t type = 0x08;
  std::vector<std::int64_t> dims;  // as the file states them
  std::int64_t items = -1;         // of dims[0], those held in data (-1: all)
  std::vector<std::uint8_t> data;  // as stored (big-endian for multi-byte types)
  CountedBytes counted;            // data's bytes, under the allocator's ceiling (allocator.h)
  std::int64_t count() const;      // elements held: items x the other dimensions
  // Element i as a double, whatever the stored type.
  double value(std::int64_t i) const;
};

std::size_t idx_type_size(std::uint8_t type);  // 0 for an unknown type
// first > 0: only the first `first` items along dimension 0 (all when the file has fewer).
IdxArray read_idx(const std::string& path, std::int64_t first = 0);
// Writes an IDX file (raw; gzip when the path ends in .gz). For tests and tools.
void write_idx(const std::string& path, const IdxArray& array);

}  // namespace weft
