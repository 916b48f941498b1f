// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//   "__metadata__": {"key": "value"}}), then the raw little-endian tensor bytes.
// Files weft writes load in other safetensors readers and vice versa (F32 and F64).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "weft/nn/module.h"

namespace weft {

struct SafetensorsFile {
  StateDict tensors;  // in file order of their data
  std::map<std::string, std::string> metadata;
};

std::string encode_safetensors(const StateDict& tensors, const std::map<std::string, std::string>& metadata = {});
// Validates the header (length, JSON, dtypes, shapes, offsets inside the data and matching
// the shapes) and throws CheckpointError("<name>: <problem>") when anything is off.
SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name);

}  // namespace weft
