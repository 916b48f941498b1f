// libFuzzer harness: Chakra execution traces (<name>.<rank>.et) read by weft sim, on a
// 16-GPU switch. An input is a trace folder: a byte giving the ranks (1-3), then each
// rank's file as a 4-byte little-endian length and its bytes (cut at the input's end); the
// folder also has a comm_group.json with groups "a" (rank 0) and "b" (ranks 0 and 1).
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "weft/sim/topology.h"
#include "weft/sim/workload.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = "/tmp/weft-fuzz-chakra-" + std::to_string(::getpid());
  static const weft::sim::Topology topology = weft::sim::parse_topology(
      "fabric: single-switch\nhosts: 16\nnic: {speed: 100G}\nswitch: {ports: 32}\n", "switch.yaml");
  if (size < 1) return 0;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int ranks = 1 + data[0] % 3;
  std::size_t at = 1;
  for (int r = 0; r < ranks; ++r) {
    std::size_t n = 0;
    for (int i = 0; i < 4 && at < size; ++i, ++at) n |= static_cast<std::size_t>(data[at]) << (8 * i);
    n = std::min(n, size - at);
    std::ofstream out(dir + "/t." + std::to_string(r) + ".et", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + at), static_cast<std::streamsize>(n));
    at += n;
  }
  if (ranks > 1) std::ofstream(dir + "/comm_group.json") << R"({"a": [0], "b": [0, 1]})";
  try {
    weft::sim::load_workload(dir, topology, 1);
  } catch (const weft::Error&) {
  }
  return 0;
}
