// Reading a Chakra execution trace (ET), the workload format of MLCommons' Chakra that
// ASTRA-sim runs: one file per rank, `<name>.<rank>.et`, holding protobuf messages each
// preceded by its length as a varint: first a GlobalMetadata, then the rank's nodes. A
// node is a unit of work (compute, a collective, a send or receive, a memory access) with
// the ids of the nodes it waits for (data and control dependencies).
//
// parse_chakra decodes the protobuf wire format itself (only the fields below are read;
// unknown fields are skipped as protobuf readers do) and checks every length against the
// bytes that are there. A malformed file is a ConfigError naming the file, the byte offset
// and what is wrong; so are a node id given twice and a dependency on an id the file lacks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::sim {

// Chakra's NodeType and CollectiveCommType values (schema/protobuf/et_def.proto).
enum class ChakraNodeType : int {
  kInvalid = 0, kMetadata = 1, kMemLoad = 2, kMemStore = 3, kCompute = 4, kSend = 5, kRecv = 6,
  kCollective = 7, kStorage = 8, kBatch = 9, kCheckpoint = 10
};
enum class ChakraCollective : int {
  kAllReduce = 0, kReduce = 1, kAllGather = 2, kGather = 3, kScatter = 4, kBroadcast = 5, kAllToAll = 6,
  kReduceScatter = 7, kReduceScatterBlock = 8, kBarrier = 9
};

struct ChakraNode {
  std::uint64_t id = 0;
  std::string name;
  int type = 0;                      // ChakraNodeType
  std::vector<std::uint64_t> deps;   // data and control dependencies, as listed
  std::uint64_t duration_us = 0;     // duration_micros
  // Attributes ASTRA-sim reads (an integer attribute may be of any integer field type).
  bool is_cpu_op = true;             // "is_cpu_op" (absent: a CPU operation, as ASTRA-sim reads it)
  std::int64_t comm_type = -1;       // "comm_type": ChakraCollective
  std::int64_t comm_size = 0;        // "comm_size": bytes
  std::int64_t comm_src = -1, comm_dst = -1, comm_tag = 0;  // "comm_src", "comm_dst", "comm_tag"
  std::string pg_name;               // "pg_name": the process group (empty: every rank)
};

struct ChakraTrace {
  std::string version;  // GlobalMetadata.version
  std::vector<ChakraNode> nodes;  // in file order
};

// `where` names the input in errors (the file's path).
ChakraTrace parse_chakra(std::string_view bytes, const std::string& where);

// Chakra's name for a collective type, e.g. "ALL_REDUCE"; "type N" for values it lacks.
std::string chakra_collective_name(std::int64_t comm_type);

}  // namespace weft::sim
