// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//   "__metadata__": {"key": "value"}}), then the raw little-endian tensor bytes.
// Files weft writes load in other safetensors readers and vice versa. Every dtype of the
// format but the 8-bit floats is read: F32, F64 and BF16 as they are; F16 as F32 and
// I8/U8/I16/U16/BOOL as F32, I32/U32/I64/U64 as F64, each exactly (a 64-bit integer beyond
// 2^53 is refused). Tensors are written in their own dtype (F32, F64, BF16) or in the one
// `dtypes` names for them: F16, BF16, F32, F64 (rounded to nearest even), or an integer
// dtype or BOOL (values must be whole and in range).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "weft/nn/module.h"

namespace weft {

struct SafetensorsFile {
  StateDict tensors;  // in file order of their data
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> dtypes;  // each tensor's dtype in the file ("F16", "I64", ...)
};

// `dtypes`: the dtype to store a tensor in, by name (others keep their own); throws
// CheckpointError for an unknown dtype or a value the dtype cannot hold.
std::string encode_safetensors(const StateDict& tensors, const std::map<std::string, std::string>& metadata = {},
                               const std::map<std::string, std::string>& dtypes = {});
// The same file written to `path` atomically (util/file.h's AtomicFileWriter: a temporary file,
// renamed when whole), each tensor's bytes written from where they lie: the whole file is
// never held in memory. Returns the CRC-32 of the bytes written (crc32_of). Throws
// CheckpointError as encode_safetensors and for the file.
std::uint32_t write_safetensors(const std::string& path, const StateDict& tensors,
                                const std::map<std::string, std::string>& metadata = {},
                                const std::map<std::string, std::string>& dtypes = {});
// zlib's CRC-32 of `bytes`, continuing from `crc` (0 to start).
std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc = 0);
// Validates the header (length, JSON, dtypes, shapes, offsets inside the data and matching
// the shapes) and throws CheckpointError("<name>: <problem>") when anything is off.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name);
// The safetensors file at `path` read whole and decoded, its bytes counted under the
// allocator's ceiling while they are held beside its tensors (tensor/allocator.h): a file that
// would pass it is refused before it is read. A missing or unreadable file is a DataError.
SafetensorsFile read_safetensors(const std::string& path);
// The metadata of the safetensors file at `path`, reading its header only (the same checks
// on the header; CheckpointError naming the file).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace weft
