#include "weft/sim/chakra.h"

#include <algorithm>
#include <unordered_set>

#include "weft/util/error.h"

namespace weft::sim {

namespace {

// Protobuf's wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// A cursor over one message's bytes; every read checks what is left. `base` is the
// message's offset in the file, for errors.
class WireReader {
 public:
  WireReader(std::string_view bytes, std::size_t base, const std::string& where)
      : bytes_(bytes), base_(base), where_(where) {}

  bool done() const { return pos_ >= bytes_.size(); }
  std::size_t offset() const { return base_ + pos_; }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) fail("a varint runs past the end");
      const auto b = static_cast<std::uint8_t>(bytes_[pos_++]);
      if (shift == 63 && b > 1) fail("a varint longer than 64 bits");
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  std::uint64_t fixed(int bytes) {
    if (bytes_.size() - pos_ < static_cast<std::size_t>(bytes)) fail("a fixed-size field runs past the end");
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += static_cast<std::size_t>(bytes);
    return v;
  }
  // A length-delimited field's bytes and their offset in the file.
  std::pair<std::string_view, std::size_t> delimited() {
    const std::uint64_t n = varint();
    if (n > bytes_.size() - pos_)
      fail("a field of " + std::to_string(n) + " bytes where " + std::to_string(bytes_.size() - pos_) + " are left");
    const std::size_t at = pos_;
    pos_ += static_cast<std::size_t>(n);
    return {bytes_.substr(at, static_cast<std::size_t>(n)), base_ + at};
  }
  void skip(int wire) {
    switch (wire) {
      case kVarint: varint(); return;
      case kFixed64: fixed(8); return;
      case kLengthDelimited: delimited(); return;
      case kFixed32: fixed(4); return;
      default: fail("wire type " + std::to_string(wire) + " (not a protobuf field)");
    }
  }
  // A field's number and wire type.
  std::pair<std::uint64_t, int> key() {
    const std::uint64_t k = varint();
    if ((k >> 3) == 0) fail("field number 0");
    return {k >> 3, static_cast<int>(k & 7)};
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(where_ + ": byte " + std::to_string(base_ + pos_) + ": " + what);
  }

 private:
  std::string_view bytes_;
  std::size_t base_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

void expect_wire(const WireReader& r, int got, int want, const char* field) {
  if (got != want) r.fail(std::string("field '") + field + "' has wire type " + std::to_string(got));
}

// An attribute's name and, for the attributes read here, its integer or string value.
struct Attribute {
  std::string name;
  bool has_integer = false, has_string = false;
  std::int64_t integer = 0;
  std::string text;
};

Attribute read_attribute(std::string_view bytes, std::size_t base, const std::string& where) {
  WireReader r(bytes, base, where);
  Attribute a;
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == 1 && wire == kLengthDelimited) {
      a.name = std::string(r.delimited().first);
    } else if (wire == kVarint && (field == 7 || field == 9 || field == 11 || field == 13 || field == 27)) {
      // int32, int64, uint32, uint64, bool
      a.integer = static_cast<std::int64_t>(r.varint());
      a.has_integer = true;
    } else if (wire == kVarint && (field == 15 || field == 17)) {  // sint32, sint64 (zigzag)
      const std::uint64_t z = r.varint();
      a.integer = static_cast<std::int64_t>(z >> 1) ^ -static_cast<std::int64_t>(z & 1);
      a.has_integer = true;
    } else if (wire == kFixed32 && (field == 19 || field == 23)) {  // fixed32, sfixed32
      const auto v = static_cast<std::uint32_t>(r.fixed(4));
      a.integer = field == 19 ? static_cast<std::int64_t>(v) : static_cast<std::int64_t>(static_cast<std::int32_t>(v));
      a.has_integer = true;
    } else if (wire == kFixed64 && (field == 21 || field == 25)) {  // fixed64, sfixed64
      a.integer = static_cast<std::int64_t>(r.fixed(8));
      a.has_integer = true;
    } else if (field == 29 && wire == kLengthDelimited) {  // string
      a.text = std::string(r.delimited().first);
      a.has_string = true;
    } else {
      r.skip(wire);
    }
  }
  return a;
}

// A repeated uint64, packed (one length-delimited field) or not (one varint per field).
void read_ids(WireReader& r, int wire, std::vector<std::uint64_t>& out, const std::string& where) {
  if (wire == kVarint) {
    out.push_back(r.varint());
    return;
  }
  expect_wire(r, wire, kLengthDelimited, "deps");
  const auto [bytes, base] = r.delimited();
  WireReader packed(bytes, base, where);
  while (!packed.done()) out.push_back(packed.varint());
}

ChakraNode read_node(std::string_view bytes, std::size_t base, const std::string& where) {
  WireReader r(bytes, base, where);
  ChakraNode n;
  while (!r.done()) {
    const auto [field, wire] = r.key();
    switch (field) {
      case 1: expect_wire(r, wire, kVarint, "id"); n.id = r.varint(); break;
      case 2: expect_wire(r, wire, kLengthDelimited, "name"); n.name = std::string(r.delimited().first); break;
      case 3: expect_wire(r, wire, kVarint, "type"); n.type = static_cast<int>(std::min<std::uint64_t>(r.varint(), 1u << 30)); break;
      case 4:
      case 5: read_ids(r, wire, n.deps, where); break;
      case 7: expect_wire(r, wire, kVarint, "duration_micros"); n.duration_us = r.varint(); break;
      case 10: {
        expect_wire(r, wire, kLengthDelimited, "attr");
        const auto [attr_bytes, attr_base] = r.delimited();
        const Attribute a = read_attribute(attr_bytes, attr_base, where);
        auto integer = [&](std::int64_t& into) {
          if (!a.has_integer) r.fail("attribute '" + a.name + "' is not an integer");
          into = a.integer;
        };
        if (a.name == "is_cpu_op") {
          std::int64_t v = 0;
          integer(v);
          n.is_cpu_op = v != 0;
        } else if (a.name == "comm_type") {
          integer(n.comm_type);
        } else if (a.name == "comm_size") {
          integer(n.comm_size);
        } else if (a.name == "comm_src") {
          integer(n.comm_src);
        } else if (a.name == "comm_dst") {
          integer(n.comm_dst);
        } else if (a.name == "comm_tag") {
          integer(n.comm_tag);
        } else if (a.name == "pg_name") {
          if (!a.has_string) r.fail("attribute 'pg_name' is not a string");
          n.pg_name = a.text;
        }
        break;
      }
      default: r.skip(wire);
    }
  }
  return n;
}

}  // namespace

ChakraTrace parse_chakra(std::string_view bytes, const std::string& where) {
  ChakraTrace trace;
  WireReader file(bytes, 0, where);
  if (file.done()) throw ConfigError(where + ": empty (a Chakra trace starts with its metadata)");
  bool metadata = true;
  std::unordered_set<std::uint64_t> ids;
  while (!file.done()) {
    const auto [message, base] = file.delimited();
    if (metadata) {
      WireReader r(message, base, where);
      while (!r.done()) {
        const auto [field, wire] = r.key();
        if (field == 1 && wire == kLengthDelimited) trace.version = std::string(r.delimited().first);
        else r.skip(wire);
      }
      metadata = false;
      continue;
    }
    ChakraNode n = read_node(message, base, where);
    if (!ids.insert(n.id).second)
      throw ConfigError(where + ": byte " + std::to_string(base) + ": node id " + std::to_string(n.id) + " given twice");
    trace.nodes.push_back(std::move(n));
  }
  for (const ChakraNode& n : trace.nodes)
    for (std::uint64_t d : n.deps)
      if (!ids.count(d))
        throw ConfigError(where + ": node " + std::to_string(n.id) + " depends on node " + std::to_string(d) +
                          ", which the file does not have");
  return trace;
}

std::string chakra_collective_name(std::int64_t comm_type) {
  static const char* const names[] = {"ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER",
                                      "BROADCAST", "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"};
  if (comm_type >= 0 && comm_type < 10) return names[comm_type];
  return "type " + std::to_string(comm_type);
}

}  // namespace weft::sim
