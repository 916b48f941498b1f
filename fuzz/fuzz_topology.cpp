// libFuzzer harness: topology YAML (weft sim --topology). Every input is built into a
// topology or refused with a weft error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "weft/sim/topology.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    weft::sim::parse_topology(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  } catch (const weft::Error&) {
  }
  return 0;
}
