#include "weft/plan/hardware.h"

#include "weft/util/error.h"

namespace weft::plan {

const std::vector<std::string>& gpu_names() {
  static const std::vector<std::string> names{"v100-16gb", "v100-32gb", "a100-40gb",   "a100-80gb", "h100-80gb",
                                              "h200-141gb", "b200-180gb", "gb200-nvl72", "mi300x"};
  return names;
}

GpuSpec gpu_preset(const std::string& name) {
  // name, memory, bf16 dense, fp8 dense, HBM bandwidth, watts, domain GPUs, domain GB/s per
  // direction, network and host-link GB/s per GPU and direction, SMs (the vendors' datasheets,
  // dense figures without sparsity; docs/planning.md lists them).
  if (name == "v100-16gb") return {name, 16e9, 125e12, 0, 0.9e12, 300, 8, 150e9, 12.5e9, 12e9, 80};
  if (name == "v100-32gb") return {name, 32e9, 125e12, 0, 0.9e12, 300, 8, 150e9, 12.5e9, 12e9, 80};
  if (name == "a100-40gb") return {name, 40e9, 312e12, 0, 1.555e12, 400, 8, 300e9, 25e9, 25e9, 108};
  if (name == "a100-80gb") return {name, 80e9, 312e12, 0, 2.039e12, 400, 8, 300e9, 25e9, 25e9, 108};
  if (name == "h100-80gb") return {name, 80e9, 989e12, 1979e12, 3.35e12, 700, 8, 450e9, 50e9, 50e9, 132};
  if (name == "h200-141gb") return {name, 141e9, 989e12, 1979e12, 4.8e12, 700, 8, 450e9, 50e9, 50e9, 132};
  if (name == "b200-180gb") return {name, 180e9, 2250e12, 4500e12, 8e12, 1000, 8, 900e9, 100e9, 50e9, 148};
  if (name == "gb200-nvl72") return {name, 186e9, 2500e12, 5000e12, 8e12, 1200, 72, 900e9, 100e9, 450e9, 148};
  if (name == "mi300x") return {name, 192e9, 1307e12, 2615e12, 5.3e12, 750, 8, 448e9, 50e9, 50e9, 304};
  std::string known;
  for (const auto& n : gpu_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown GPU '" + name + "' (known: " + known + ")");
}

const std::vector<std::string>& network_names() {
  static const std::vector<std::string> names{"hdr-ib", "ndr-ib", "xdr-ib", "roce-100g", "roce-200g", "roce-400g", "roce-800g"};
  return names;
}

NetworkSpec network_preset(const std::string& name) {
  // InfiniBand HDR/NDR/XDR at 200/400/800 Gb/s per port (IBTA), Ethernet RoCE ports at
  // their IEEE 802.3 rates; one port per GPU. Latencies: 5 us per message on InfiniBand,
  // 8 us on RoCE (a collective library's small-message latency across a two-tier fabric).
  if (name == "hdr-ib") return {name, 25e9, 5e-6};
  if (name == "ndr-ib") return {name, 50e9, 5e-6};
  if (name == "xdr-ib") return {name, 100e9, 5e-6};
  if (name == "roce-100g") return {name, 12.5e9, 8e-6};
  if (name == "roce-200g") return {name, 25e9, 8e-6};
  if (name == "roce-400g") return {name, 50e9, 8e-6};
  if (name == "roce-800g") return {name, 100e9, 8e-6};
  std::string known;
  for (const auto& n : network_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown network '" + name + "' (known: " + known + ")");
}

}  // namespace weft::plan
