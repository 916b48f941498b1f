// Sizes in bytes as people write them, one syntax for the whole command line (comm-bench,
// sim, plan):
//   8, 8B           bytes
//   64K, 1M, 2G, 1T binary multiples, as nccl-tests reads them (64K = 65,536)
//   1KB, 1MB, 1GB   decimal (1MB = 10^6)
//   1KiB, 1MiB      binary (1MiB = 2^20)
// Units are case-insensitive but for the i of KiB. A fraction is allowed when the result
// is a whole number of bytes (1.5K = 1536). Negative, non-finite or fractional byte counts,
// and sizes beyond 2^62, are ConfigErrors naming `what`.
#pragma once

#include <cstdint>
#include <string>

namespace weft {

std::int64_t parse_size(const std::string& text, const std::string& what);

}  // namespace weft
