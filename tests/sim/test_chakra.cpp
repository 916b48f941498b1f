// Chakra execution traces: the protobuf reader against hand-encoded messages, and the
// graphs' timing in the simulator against what they must take (compute chains, a
// collective between computes, overlap, sends and receives, process groups).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>

#include "weft/sim/chakra.h"
#include "weft/sim/network.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

using namespace weft::sim;

namespace {

// The protobuf wire format, written out by hand.
std::string pb_varint(std::uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}
std::string pb_key(int field, int wire) { return pb_varint(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire)); }
std::string pb_uint(int field, std::uint64_t v) { return pb_key(field, 0) + pb_varint(v); }
std::string pb_bytes(int field, const std::string& payload) { return pb_key(field, 2) + pb_varint(payload.size()) + payload; }
std::string delimited(const std::string& message) { return pb_varint(message.size()) + message; }

// Chakra's attributes as ASTRA-sim's tools write them: is_cpu_op a bool (field 27),
// comm_type and comm_size int64 (9), comm_src, comm_dst and comm_tag int32 (7), pg_name a
// string (29).
std::string et_attr(const std::string& name, std::int64_t v, int field) {
  return pb_bytes(10, pb_bytes(1, name) + pb_uint(field, static_cast<std::uint64_t>(v)));
}
std::string et_attr(const std::string& name, const std::string& v) { return pb_bytes(10, pb_bytes(1, name) + pb_bytes(29, v)); }

struct EtNode {
  std::uint64_t id;
  ChakraNodeType type;
  std::vector<std::uint64_t> deps;
  std::uint64_t duration_us = 0;
  std::string attrs;
};
EtNode et_gpu(std::uint64_t id, std::uint64_t us, std::vector<std::uint64_t> deps = {}) {
  return {id, ChakraNodeType::kCompute, std::move(deps), us, et_attr("is_cpu_op", 0, 27)};
}
EtNode et_cpu(std::uint64_t id, std::uint64_t us, std::vector<std::uint64_t> deps = {}) {
  return {id, ChakraNodeType::kCompute, std::move(deps), us, ""};  // no is_cpu_op: a CPU operation
}
EtNode et_coll(std::uint64_t id, ChakraCollective c, std::int64_t bytes, std::vector<std::uint64_t> deps = {},
               const std::string& pg = "") {
  std::string a = et_attr("comm_type", static_cast<int>(c), 9) + et_attr("comm_size", bytes, 9);
  if (!pg.empty()) a += et_attr("pg_name", pg);
  return {id, ChakraNodeType::kCollective, std::move(deps), 0, a};
}
EtNode et_p2p(std::uint64_t id, bool send, int src, int dst, std::int64_t bytes, std::vector<std::uint64_t> deps = {}) {
  return {id, send ? ChakraNodeType::kSend : ChakraNodeType::kRecv, std::move(deps), 0,
          et_attr("comm_src", src, 7) + et_attr("comm_dst", dst, 7) + et_attr("comm_tag", 5, 7) +
              et_attr("comm_size", bytes, 9)};
}
std::string et_node(const EtNode& n) {
  std::string deps;
  for (std::uint64_t d : n.deps) deps += pb_varint(d);
  return pb_uint(1, n.id) + pb_bytes(2, "node" + std::to_string(n.id)) + pb_uint(3, static_cast<std::uint64_t>(n.type)) +
         (deps.empty() ? "" : pb_bytes(5, deps)) + pb_uint(7, n.duration_us) + n.attrs;
}
std::string et_file(const std::vector<EtNode>& nodes) {
  std::string out = delimited(pb_bytes(1, "0.0.4"));
  for (const EtNode& n : nodes) out += delimited(et_node(n));
  return out;
}

// Writes one file per rank (and comm_group.json when given) into a fresh folder.
std::string et_folder(const std::string& name, const std::vector<std::vector<EtNode>>& ranks, const std::string& groups = "") {
  const std::string dir = ::testing::TempDir() + "/weft_chakra_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (std::size_t r = 0; r < ranks.size(); ++r) weft::write_file_atomic(dir + "/job." + std::to_string(r) + ".et", et_file(ranks[r]));
  if (!groups.empty()) weft::write_file_atomic(dir + "/comm_group.json", groups);
  return dir;
}

struct ChakraRun {
  Topology topology;
  std::unique_ptr<Network> net;
  bool finished = false;
  double finish_us() const { return static_cast<double>(net->finish_time()) / 1e6; }
};
ChakraRun chakra_run(const std::string& workload, const std::string& topology = "single-switch.yaml") {
  ChakraRun r;
  r.topology = load_topology(std::string(WEFT_SOURCE_DIR) + "/examples/topologies/" + topology);
  SimConfig cfg;
  r.net = std::make_unique<Network>(r.topology, cfg, load_workload(workload, r.topology, cfg.seed, cfg.channels_per_nic));
  r.finished = r.net->run();
  return r;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const weft::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Chakra, ReadsNodesDependenciesAndAttributes) {
  // Dependencies packed and not, ctrl (4) and data (5); an unknown field of each wire type
  // skipped; integer attributes of other integer types (sint64, fixed32, uint64).
  const std::string node = pb_uint(1, 7) + pb_bytes(2, "ar") + pb_uint(3, 7) + pb_uint(4, 3) + pb_bytes(5, pb_varint(1) + pb_varint(2)) +
                           pb_uint(7, 25) + pb_uint(99, 1) + pb_key(98, 1) + std::string(8, 'x') + pb_key(97, 5) + std::string(4, 'y') +
                           pb_bytes(96, "skip") + et_attr("comm_type", 2, 9) +
                           pb_bytes(10, pb_bytes(1, "comm_size") + pb_uint(17, 2 * 4096)) +  // sint64: zigzag 4096
                           pb_bytes(10, pb_bytes(1, "comm_tag") + pb_key(19, 5) + std::string("\x2a\0\0\0", 4)) +
                           et_attr("is_cpu_op", 0, 27) + et_attr("pg_name", "tp0");
  const std::string bytes = delimited(pb_bytes(1, "0.0.4")) + delimited(pb_uint(1, 1)) + delimited(pb_uint(1, 2)) +
                            delimited(pb_uint(1, 3)) + delimited(node);
  const ChakraTrace t = parse_chakra(bytes, "x.0.et");
  EXPECT_EQ(t.version, "0.0.4");
  ASSERT_EQ(t.nodes.size(), 4u);
  const ChakraNode& n = t.nodes[3];
  EXPECT_EQ(n.id, 7u);
  EXPECT_EQ(n.name, "ar");
  EXPECT_EQ(n.type, static_cast<int>(ChakraNodeType::kCollective));
  EXPECT_EQ(n.deps, (std::vector<std::uint64_t>{3, 1, 2}));
  EXPECT_EQ(n.duration_us, 25u);
  EXPECT_EQ(n.comm_type, 2);
  EXPECT_EQ(n.comm_size, 4096);
  EXPECT_EQ(n.comm_tag, 42);
  EXPECT_FALSE(n.is_cpu_op);
  EXPECT_EQ(n.pg_name, "tp0");
  EXPECT_TRUE(t.nodes[0].is_cpu_op);  // absent: a CPU operation
}

TEST(Chakra, MalformedFilesAreOneLineErrors) {
  const std::string meta = delimited(pb_bytes(1, "0.0.4"));
  auto error = [](const std::string& bytes) { return error_of([&] { parse_chakra(bytes, "t.0.et"); }); };
  EXPECT_NE(error("").find("empty"), std::string::npos);
  EXPECT_NE(error(meta + pb_varint(50) + "abc").find("a field of 50 bytes where 3 are left"), std::string::npos);
  EXPECT_NE(error(meta + delimited(std::string("\x08\xff", 2))).find("varint runs past the end"), std::string::npos);
  EXPECT_NE(error(meta + delimited(std::string(11, '\xff'))).find("varint"), std::string::npos);
  EXPECT_NE(error(meta + delimited(pb_key(5, 3))).find("wire type 3"), std::string::npos);
  EXPECT_NE(error(meta + delimited(pb_bytes(1, "x"))).find("field 'id' has wire type 2"), std::string::npos);
  EXPECT_NE(error(meta + delimited(pb_uint(1, 4)) + delimited(pb_uint(1, 4))).find("node id 4 given twice"), std::string::npos);
  EXPECT_NE(error(meta + delimited(pb_uint(1, 4) + pb_uint(5, 9))).find("node 4 depends on node 9, which the file does not have"),
            std::string::npos);
  EXPECT_NE(error(meta + delimited(pb_uint(1, 4) + et_attr("pg_name", 3, 9))).find("'pg_name' is not a string"), std::string::npos);
  // The error names the byte.
  EXPECT_NE(error(meta + delimited(pb_key(5, 3))).find("t.0.et: byte " + std::to_string(meta.size() + 2)), std::string::npos);
}

TEST(Chakra, ComputeRunsInDependencyOrderOneAtATimePerUnit) {
  // A GPU chain of 100 + 50 us; a CPU operation of 120 us beside it; a GPU node of 10 us
  // after both (starts at 150); then a GPU node that waits for nothing but the GPU (its
  // lower-id nodes go first): 200 us. One unit for all would take 320.
  ChakraRun r = chakra_run(
      et_folder("compute", {{et_gpu(1, 100), et_gpu(2, 50, {1}), et_cpu(3, 120), et_gpu(4, 10, {2, 3}), et_gpu(5, 40)}}));
  ASSERT_TRUE(r.finished);
  EXPECT_DOUBLE_EQ(r.finish_us(), 200.0);
  // The CPU operation longer than the GPU chain: node 4 waits for it.
  ChakraRun cpu = chakra_run(et_folder("compute_cpu", {{et_gpu(1, 100), et_gpu(2, 50, {1}), et_cpu(3, 170), et_gpu(4, 10, {2, 3})}}));
  ASSERT_TRUE(cpu.finished);
  EXPECT_DOUBLE_EQ(cpu.finish_us(), 180.0);
}

TEST(Chakra, ACollectiveBetweenComputesTakesWhatItTakesAlone) {
  // Four ranks: 100 us of compute, a 1 MB all-reduce, 50 us of compute.
  std::vector<std::vector<EtNode>> ranks(4, {et_gpu(1, 100), et_coll(2, ChakraCollective::kAllReduce, 1 << 20, {1}), et_gpu(3, 50, {2})});
  ChakraRun trace = chakra_run(et_folder("between", ranks));
  ChakraRun alone = chakra_run("allreduce:auto:1M@0-3");
  ASSERT_TRUE(trace.finished && alone.finished);
  EXPECT_EQ(trace.net->workload().collectives[0].name, alone.net->workload().collectives[0].name);
  EXPECT_NEAR(trace.finish_us(), 150 + alone.finish_us(), 0.001)
      << "trace " << trace.finish_us() << " us, all-reduce alone " << alone.finish_us() << " us";
  // Without the dependency the all-reduce overlaps the compute.
  std::vector<std::vector<EtNode>> overlapped(4, {et_gpu(1, 100), et_coll(2, ChakraCollective::kAllReduce, 1 << 20), et_gpu(3, 50, {1})});
  ChakraRun over = chakra_run(et_folder("overlap", overlapped));
  ASSERT_TRUE(over.finished);
  EXPECT_NEAR(over.finish_us(), std::max(150.0, alone.finish_us()), 0.001);
}

TEST(Chakra, SendsAndReceivesCarryTheirBytes) {
  // Rank 0 computes 20 us and sends 1 MB to rank 1, whose compute waits for it.
  ChakraRun r = chakra_run(et_folder("p2p", {{et_gpu(1, 20), et_p2p(2, true, 0, 1, 1 << 20, {1})},
                                              {et_p2p(1, false, 0, 1, 1 << 20), et_gpu(2, 30, {1})}}));
  ChakraRun flow = chakra_run("flow:0:1:1M");
  ASSERT_TRUE(r.finished && flow.finished);
  // Rank 1 computes once the message is in; rank 0 is done once it is acknowledged.
  const FlowRecord& alone = flow.net->flows().at(0);
  const double arrived_us = static_cast<double>(alone.delivered) / 1e6, acked_us = static_cast<double>(alone.acked) / 1e6;
  EXPECT_DOUBLE_EQ(r.finish_us(), std::max(20 + arrived_us + 30, 20 + acked_us));
  EXPECT_GT(20 + arrived_us + 30, 20 + acked_us);
}

TEST(Chakra, ProcessGroupsRunTheirCollectivesApart) {
  // Two groups of two ranks, each an all-reduce: both at once, as fast as one alone.
  const std::string groups = R"({"a": [0, 1], "b": [2, 3]})";
  std::vector<std::vector<EtNode>> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back({et_coll(1, ChakraCollective::kAllReduce, 4 << 20, {}, r < 2 ? "a" : "b")});
  ChakraRun r = chakra_run(et_folder("groups", ranks, groups));
  ChakraRun alone = chakra_run("allreduce:auto:4M@0-1");
  ASSERT_TRUE(r.finished && alone.finished);
  EXPECT_EQ(r.net->workload().collectives.size(), 2u);
  EXPECT_NEAR(r.finish_us(), alone.finish_us(), 0.001);
}

TEST(Chakra, GraphsThatCannotRunAreRefused) {
  auto error = [](const std::string& name, const std::vector<std::vector<EtNode>>& ranks, const std::string& groups = "") {
    const std::string dir = et_folder(name, ranks, groups);
    return error_of([&] { chakra_run(dir); });
  };
  EXPECT_NE(error("cycle", {{et_gpu(1, 1, {2}), et_gpu(2, 1, {1})}}).find("dependency cycle"), std::string::npos);
  EXPECT_NE(error("mismatch", {{et_coll(1, ChakraCollective::kAllReduce, 1024)}, {et_coll(1, ChakraCollective::kAllGather, 1024)}})
                .find("ALL_GATHER of 1024 bytes here, ALL_REDUCE of 1024 bytes on rank 0"),
            std::string::npos);
  EXPECT_NE(error("missing", {{et_coll(1, ChakraCollective::kAllReduce, 1024), et_coll(2, ChakraCollective::kAllReduce, 1024)},
                              {et_coll(1, ChakraCollective::kAllReduce, 1024)}})
                .find("rank 0 has 2 collectives, rank 1 has 1"),
            std::string::npos);
  EXPECT_NE(error("nogroup", {{et_coll(1, ChakraCollective::kAllReduce, 1024, {}, "tp")}}).find("process group 'tp' is not in"),
            std::string::npos);
  EXPECT_NE(error("member", {{et_coll(1, ChakraCollective::kAllReduce, 1024, {}, "g")}, {}}, R"({"g": [1]})")
                .find("rank 0 is not a member of process group 'g'"),
            std::string::npos);
  EXPECT_NE(error("self", {{et_p2p(1, true, 0, 0, 10)}}).find("comm_dst 0 is not another rank"), std::string::npos);
  EXPECT_NE(error("huge", {{et_coll(1, ChakraCollective::kAllReduce, std::int64_t{1} << 62)}})
                .find("comm_size 4611686018427387904 is not 0 to 2^61 bytes"),
            std::string::npos);
  EXPECT_NE(error("negative", {{et_p2p(1, true, 0, 1, -5)}, {}}).find("comm_size -5 is not 0 to 2^61 bytes"), std::string::npos);
  EXPECT_NE(error("unmatched", {{et_p2p(1, true, 0, 1, 10)}, {}}).find("is never received"), std::string::npos);
  EXPECT_NE(error("type", {{{1, ChakraNodeType::kInvalid, {}, 0, ""}}}).find("node type 0"), std::string::npos);
  EXPECT_NE(error("comm_type", {{et_coll(1, static_cast<ChakraCollective>(12), 1024)}}).find("comm_type 12"), std::string::npos);
  EXPECT_NE(error("groups", {{et_gpu(1, 1)}}, "[1]").find("comm_group.json: expected an object"), std::string::npos);
  // Ranks 0 and 2 but no 1.
  const std::string dir = et_folder("gap", {{et_gpu(1, 1)}, {et_gpu(1, 1)}, {et_gpu(1, 1)}});
  std::filesystem::remove(dir + "/job.1.et");
  EXPECT_NE(error_of([&] { chakra_run(dir); }).find("ranks 0-2 expected, 2 files found"), std::string::npos);
}
