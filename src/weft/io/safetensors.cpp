#include "weft/io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <zlib.h>
#include <optional>

#include "weft/tensor/allocator.h"
#include "weft/util/file.h"
#include "weft/util/half_float.h"
#include "weft/util/json_integer.h"

namespace weft {

using nlohmann::json;

namespace {

// The format's dtypes weft reads and writes, and what a tensor of each becomes in weft.
enum class Stored : std::uint8_t { kF32, kF64, kBF16, kF16, kI8, kU8, kI16, kU16, kBool, kI32, kU32, kI64, kU64 };
struct FileType {
  const char* name;
  Stored stored;
  std::size_t bytes;
  DType loads_as;
  double lo, hi;  // the whole values an integer dtype holds (exactly, as doubles); unused for floats
};
constexpr double kExact = 9007199254740992.0;  // 2^53: doubles hold every integer up to here
constexpr FileType kFileTypes[] = {
    {"F32", Stored::kF32, 4, DType::F32, 0, 0},           {"F64", Stored::kF64, 8, DType::F64, 0, 0},
    {"BF16", Stored::kBF16, 2, DType::BF16, 0, 0},        {"F16", Stored::kF16, 2, DType::F32, 0, 0},
    {"I8", Stored::kI8, 1, DType::F32, -128, 127},        {"U8", Stored::kU8, 1, DType::F32, 0, 255},
    {"I16", Stored::kI16, 2, DType::F32, -32768, 32767},  {"U16", Stored::kU16, 2, DType::F32, 0, 65535},
    {"BOOL", Stored::kBool, 1, DType::F32, 0, 1},         {"I32", Stored::kI32, 4, DType::F64, -2147483648.0, 2147483647.0},
    {"U32", Stored::kU32, 4, DType::F64, 0, 4294967295.0}, {"I64", Stored::kI64, 8, DType::F64, -kExact, kExact},
    {"U64", Stored::kU64, 8, DType::F64, 0, kExact}};

const FileType* file_type(const std::string& name) {
  for (const auto& t : kFileTypes)
    if (name == t.name) return &t;
  return nullptr;
}

const FileType& native_type(DType t) { return kFileTypes[t == DType::F32 ? 0 : t == DType::F64 ? 1 : 2]; }
bool is_integer(const FileType& t) { return t.hi > t.lo; }

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Element i of `raw` (stored as `type`, little-endian as on every machine weft runs on);
// a 64-bit integer beyond 2^53, which a double would round, is nullopt.
std::optional<double> element(const FileType& type, const char* raw, std::size_t i) {
  const char* p = raw + i * type.bytes;
  switch (type.stored) {
    case Stored::kF16: return float_from_f16(load<std::uint16_t>(p));
    case Stored::kI8: return load<std::int8_t>(p);
    case Stored::kU8: case Stored::kBool: return load<std::uint8_t>(p);
    case Stored::kI16: return load<std::int16_t>(p);
    case Stored::kU16: return load<std::uint16_t>(p);
    case Stored::kI32: return load<std::int32_t>(p);
    case Stored::kU32: return load<std::uint32_t>(p);
    case Stored::kI64: {
      const auto v = load<std::int64_t>(p);
      if (v > static_cast<std::int64_t>(kExact) || v < -static_cast<std::int64_t>(kExact)) return std::nullopt;
      return static_cast<double>(v);
    }
    case Stored::kU64: {
      const auto v = load<std::uint64_t>(p);
      if (v > static_cast<std::uint64_t>(kExact)) return std::nullopt;
      return static_cast<double>(v);
    }
    case Stored::kF32: return load<float>(p);
    case Stored::kF64: return load<double>(p);
    case Stored::kBF16: return float_from_bf16(load<std::uint16_t>(p));
  }
  return std::nullopt;
}

// A tensor of the file's bytes, in the dtype weft holds it in.
Tensor load_tensor(const FileType& type, const Shape& shape, const char* raw, const std::string& name,
                   const std::function<CheckpointError(const std::string&)>& fail) {
  Tensor t = Tensor::empty(shape, type.loads_as);
  const std::size_t n = static_cast<std::size_t>(shape_numel(shape));
  if (&type == &native_type(type.loads_as)) {
    std::memcpy(t.raw_data(), raw, n * type.bytes);
    return t;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto v = element(type, raw, i);
    if (!v)
      throw fail("tensor '" + name + "' holds a 64-bit integer beyond 2^53, which weft's tensors cannot hold exactly");
    if (type.loads_as == DType::F32) static_cast<float*>(t.raw_data())[i] = static_cast<float>(*v);
    else static_cast<double*>(t.raw_data())[i] = *v;
  }
  return t;
}

template <class T>
void store(std::string& out, T v) {
  char b[sizeof v];
  std::memcpy(b, &v, sizeof v);
  out.append(b, sizeof v);
}

// Appends `t` stored as `type`; integer dtypes take whole values in their range only.
void store_tensor(std::string& out, const Tensor& t, const FileType& type, const std::string& name) {
  if (&type == &native_type(t.dtype())) {
    Tensor c = t.contiguous();
    out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
    return;
  }
  const Tensor d = t.to(DType::F64).contiguous();
  const double* v = static_cast<const double*>(d.raw_data());
  for (std::int64_t i = 0; i < d.numel(); ++i) {
    const double x = v[i];
    if (is_integer(type) && !(x == std::floor(x) && x >= type.lo && x <= type.hi))
      throw CheckpointError("tensor '" + name + "': " + std::to_string(x) + " cannot be stored as " + type.name);
    switch (type.stored) {
      case Stored::kF32: store(out, static_cast<float>(x)); break;
      case Stored::kF64: store(out, x); break;
      case Stored::kF16: store(out, f16_from_float(static_cast<float>(x))); break;
      case Stored::kBF16: store(out, bf16_from_float(static_cast<float>(x))); break;
      case Stored::kI8: store(out, static_cast<std::int8_t>(x)); break;
      case Stored::kU8: case Stored::kBool: store(out, static_cast<std::uint8_t>(x)); break;
      case Stored::kI16: store(out, static_cast<std::int16_t>(x)); break;
      case Stored::kU16: store(out, static_cast<std::uint16_t>(x)); break;
      case Stored::kI32: store(out, static_cast<std::int32_t>(x)); break;
      case Stored::kU32: store(out, static_cast<std::uint32_t>(x)); break;
      case Stored::kI64: store(out, static_cast<std::int64_t>(x)); break;
      case Stored::kU64: store(out, static_cast<std::uint64_t>(x)); break;
    }
  }
}

}  // namespace

namespace {

// The file's bytes in order, handed to `put` piece by piece: the length and header, then each
// tensor's data (a tensor in its own dtype as it lies in memory; one in another dtype converted
// alone), so that a writer holds at most one converted tensor at a time.
template <class Put>
void encode_pieces(const StateDict& tensors, const std::map<std::string, std::string>& metadata,
                   const std::map<std::string, std::string>& dtypes, Put&& put) {
  json header = json::object();
  std::uint64_t offset = 0;
  std::vector<const FileType*> types;
  for (const auto& [name, t] : tensors) {
    WEFT_CHECK(name != "__metadata__", "reserved tensor name");
    const auto want = dtypes.find(name);
    const FileType* type = want == dtypes.end() ? &native_type(t.dtype()) : file_type(want->second);
    if (!type) throw CheckpointError("tensor '" + name + "': unknown safetensors dtype '" + want->second + "'");
    types.push_back(type);
    const std::uint64_t n = static_cast<std::uint64_t>(t.numel()) * type->bytes;
    header[name] = {{"dtype", type->name}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // align the data to 8 bytes
  std::string start(8, '\0');
  const std::uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) start[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  start += h;
  put(std::string_view(start), offset);
  std::string piece;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    if (types[i] == &native_type(t.dtype())) {
      const Tensor c = t.contiguous();
      put(std::string_view(static_cast<const char*>(c.raw_data()), c.nbytes()), 0);
      continue;
    }
    piece.clear();
    store_tensor(piece, t, *types[i], tensors[i].first);
    put(std::string_view(piece), 0);
  }
}

}  // namespace

std::string encode_safetensors(const StateDict& tensors, const std::map<std::string, std::string>& metadata,
                               const std::map<std::string, std::string>& dtypes) {
  std::string out;
  encode_pieces(tensors, metadata, dtypes, [&](std::string_view piece, std::uint64_t data_bytes) {
    if (data_bytes > 0) out.reserve(piece.size() + data_bytes);
    out.append(piece);
  });
  return out;
}

std::uint32_t crc32_of(std::string_view bytes, std::uint32_t crc) {
  uLong c = crc;
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  while (left > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    c = crc32(c, p, chunk);
    p += chunk;
    left -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}

std::uint32_t write_safetensors(const std::string& path, const StateDict& tensors,
                                const std::map<std::string, std::string>& metadata,
                                const std::map<std::string, std::string>& dtypes) {
  AtomicFileWriter file(path);
  std::uint32_t crc = 0;
  encode_pieces(tensors, metadata, dtypes, [&](std::string_view piece, std::uint64_t) {
    file.write(piece);
    crc = crc32_of(piece, crc);
  });
  file.commit();
  return crc;
}

namespace {

// The header's length from the file's first 8 bytes, checked against the file's size.
std::uint64_t header_length(std::string_view first8, std::uint64_t file_size, const std::string& name) {
  if (first8.size() < 8 || file_size < 8) throw CheckpointError(name + ": too short to be a safetensors file");
  std::uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= std::uint64_t{static_cast<std::uint8_t>(first8[i])} << (8 * i);
  if (len > file_size - 8) throw CheckpointError(name + ": header length " + std::to_string(len) + " exceeds the file size");
  return len;
}

json parse_header(std::string_view text, const std::string& name) {
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception&) {
    throw CheckpointError(name + ": header is not valid JSON");
  }
  if (!header.is_object()) throw CheckpointError(name + ": header is not a JSON object");
  return header;
}

std::map<std::string, std::string> metadata_of(const json& v, const std::string& name) {
  if (!v.is_object()) throw CheckpointError(name + ": __metadata__ is not an object");
  std::map<std::string, std::string> metadata;
  for (auto& [mk, mv] : v.items()) {
    if (!mv.is_string()) throw CheckpointError(name + ": metadata value '" + mk + "' is not a string");
    metadata[mk] = mv.get<std::string>();
  }
  return metadata;
}

}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!in || ec) throw CheckpointError(path + ": cannot be read");
  std::string first8(8, '\0');
  in.read(first8.data(), 8);
  first8.resize(static_cast<std::size_t>(in.gcount()));
  const std::uint64_t len = header_length(first8, size, path);
  std::string text(static_cast<std::size_t>(len), '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(len))) throw CheckpointError(path + ": cannot be read");
  const json header = parse_header(text, path);
  return header.contains("__metadata__") ? metadata_of(header["__metadata__"], path) : std::map<std::string, std::string>{};
}

SafetensorsFile read_safetensors(const std::string& path) {
  const CountedBytes counted = counted_file_bytes(path);
  return decode_safetensors(read_file(path), path);
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& name) {
  auto fail = [&](const std::string& why) -> CheckpointError { return CheckpointError(name + ": " + why); };
  const std::uint64_t len = header_length(bytes.substr(0, 8), bytes.size(), name);
  const json header = parse_header(bytes.substr(8, len), name);
  std::string_view data = bytes.substr(8 + len);
  SafetensorsFile file;
  struct Entry {
    std::string name;
    const FileType* type;
    Shape shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> entries;
  try {
    for (auto& [key, v] : header.items()) {
      if (key == "__metadata__") {
        file.metadata = metadata_of(v, name);
        continue;
      }
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
        throw fail("entry '" + key + "' lacks dtype, shape or data_offsets");
      }
      const std::string dt = v["dtype"].get<std::string>();
      const FileType* type = file_type(dt);
      if (!type) throw fail("tensor '" + key + "' has unsupported dtype " + dt);
      Entry e{key, type, {}, 0, 0};
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
      std::uint64_t want = static_cast<std::uint64_t>(shape_numel(e.shape)) * e.type->bytes;
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
    file.tensors.emplace_back(e.name, load_tensor(*e.type, e.shape, data.data() + e.begin, e.name, fail));
    file.dtypes[e.name] = e.type->name;
  }
  return file;
}

}  // namespace weft
