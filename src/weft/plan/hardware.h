// The hardware a plan runs on: GPU presets (memory, dense 16-bit and 8-bit tensor peaks,
// memory bandwidth, power, the NVLink domain and its bandwidth, the network per GPU), every
// figure overridable from the command line. Sources in docs/planning.md.
#pragma once

#include <string>
#include <vector>

namespace weft::plan {

struct GpuSpec {
  std::string name;
  double memory_bytes = 80e9;
  double peak_flops = 312e12;       // dense 16-bit (bf16/fp16) tensor FLOP/s
  double peak_fp8_flops = 0;        // dense 8-bit tensor FLOP/s (0: no FP8 tensor cores)
  double memory_bandwidth = 2.039e12;  // HBM bytes per second
  double watts = 400;
  int domain_gpus = 8;              // GPUs sharing one NVLink (or Infinity Fabric) domain
  double domain_bandwidth = 300e9;  // per GPU and direction inside the domain
  double network_bandwidth = 25e9;  // per GPU and direction to the rail (scale-out) network
  double host_bandwidth = 25e9;     // per GPU and direction to host memory (PCIe; GB200: NVLink-C2C)
  int sms = 108;                    // streaming multiprocessors (MI300X: compute units)
};

// v100-16gb, v100-32gb, a100-40gb, a100-80gb, h100-80gb, h200-141gb, b200-180gb, gb200-nvl72,
// mi300x; throws ConfigError listing them.
GpuSpec gpu_preset(const std::string& name);
const std::vector<std::string>& gpu_names();

// The scale-out network a GPU's NIC joins: line rate per GPU and direction, and the
// per-message latency the alpha-beta models charge (a collective library's base latency
// across the fabric, not the wire's).
struct NetworkSpec {
  std::string name;
  double bytes_per_second = 25e9;
  double latency_s = 6e-6;
};
// hdr-ib, ndr-ib, xdr-ib, roce-100g, roce-200g, roce-400g, roce-800g; throws ConfigError
// listing them.
NetworkSpec network_preset(const std::string& name);
const std::vector<std::string>& network_names();

}  // namespace weft::plan
