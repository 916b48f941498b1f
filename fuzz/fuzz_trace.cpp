// libFuzzer harness: trace records (WEFT_TRACE's rank-<n>.jsonl, replayed by weft sim) on a
// 16-GPU switch. Each input is rank 0's file of a one-rank trace folder.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "weft/sim/topology.h"
#include "weft/sim/workload.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = "/tmp/weft-fuzz-trace-" + std::to_string(::getpid());
  static const weft::sim::Topology topology = weft::sim::parse_topology(
      "fabric: single-switch\nhosts: 16\nnic: {speed: 100G}\nswitch: {ports: 32}\n", "switch.yaml");
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/rank-0.jsonl", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    weft::sim::load_workload(dir, topology, 1);
  } catch (const weft::Error&) {
  }
  return 0;
}
