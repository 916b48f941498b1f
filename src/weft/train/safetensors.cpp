#include "weft/train/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "weft/util/json_integer.h"

namespace weft {

using nlohmann::json;

std::string encode_safetensors(const StateDict& tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    WEFT_CHECK(name != "__metadata__", "reserved tensor name");
    std::uint64_t n = t.nbytes();
    header[name] = {{"dtype", t.dtype() == DType::F32 ? "F32" : "F64"},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data to 8 bytes
  std::string out(8, '\0');
  std::uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += h;
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : tensors) {
    Tensor c = t.contiguous();
    out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name) {
  auto fail = [&](const std::string& why) -> CheckpointError { return CheckpointError(name + ": " + why); };
  if (bytes.size() < 8) throw fail("too short to be a safetensors file");
  std::uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  if (len > bytes.size() - 8) throw fail("header length " + std::to_string(len) + " exceeds the file size");
  json header;
  try {
    header = json::parse(bytes.substr(8, len));
  } catch (const json::exception&) {
    throw fail("header is not valid JSON");
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  std::string_view data = bytes.substr(8 + len);
  SafetensorsFile file;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> entries;
  try {
    for (auto& [key, v] : header.items()) {
      if (key == "__metadata__") {
        if (!v.is_object()) throw fail("__metadata__ is not an object");
        for (auto& [mk, mv] : v.items()) {
          if (!mv.is_string()) throw fail("metadata value '" + mk + "' is not a string");
          file.metadata[mk] = mv.get<std::string>();
        }
        continue;
      }
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
        throw fail("entry '" + key + "' lacks dtype, shape or data_offsets");
      }
      std::string dt = v["dtype"].get<std::string>();
      if (dt != "F32" && dt != "F64") throw fail("tensor '" + key + "' has unsupported dtype " + dt);
      Entry e{key, dt == "F32" ? DType::F32 : DType::F64, {}, 0, 0};
      for (auto& d : v["shape"]) {
        const std::optional<std::int64_t> s = json_integer(d);
        if (!s) throw fail("tensor '" + key + "' has a dimension that is not a whole number");
        if (*s < 0) throw fail("tensor '" + key + "' has a negative dimension");
        e.shape.push_back(*s);
      }
      auto& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2) throw fail("tensor '" + key + "' has malformed data_offsets");
      const std::optional<std::int64_t> begin = json_integer(off[0], 0), end = json_integer(off[1], 0);
      if (!begin || !end) throw fail("tensor '" + key + "' has data_offsets that are not whole numbers >= 0");
      e.begin = static_cast<std::uint64_t>(*begin);
      e.end = static_cast<std::uint64_t>(*end);
      if (e.begin > e.end || e.end > data.size()) throw fail("tensor '" + key + "' data lies outside the file");
      std::uint64_t want = static_cast<std::uint64_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
      if (e.end - e.begin != want) throw fail("tensor '" + key + "' has " + std::to_string(e.end - e.begin) +
                                              " bytes for shape " + shape_to_string(e.shape));
      entries.push_back(std::move(e));
    }
  } catch (const json::exception& ex) {
    throw fail(std::string("malformed header (") + ex.what() + ")");
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end) throw fail("tensors '" + entries[i - 1].name + "' and '" +
                                                          entries[i].name + "' overlap");
  }
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    std::memcpy(t.raw_data(), data.data() + e.begin, e.end - e.begin);
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace weft
