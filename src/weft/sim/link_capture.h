// An observer of the simulated fabric: the pcap of one link, every frame sent on it in both
// directions, with real Ethernet, IPv4, UDP (port 4791), InfiniBand BTH and RETH/AETH
// headers (PFC frames as MAC control frames), so Wireshark and tshark decode the RoCEv2
// traffic. Frames are stored whole without the FCS; payload bytes are zeros. The fabric calls
// `write` as a frame goes on a captured link (one compare on every other frame).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "weft/sim/packet.h"
#include "weft/sim/topology.h"

namespace weft::sim {

class LinkCapture {
 public:
  LinkCapture() = default;
  LinkCapture(const LinkCapture&) = delete;
  LinkCapture& operator=(const LinkCapture&) = delete;
  ~LinkCapture();
  // Starts the file with its header; throws ConfigError when it cannot be written.
  void open(const std::string& path, int link);
  bool active() const { return file_ != nullptr; }
  bool captures(int link) const { return file_ != nullptr && link == link_; }
  // Frame `p` sent at `now`. `message_bytes`: the length of the message a First or Only data
  // packet starts (its RETH's DMA length); `mtu` places the RETH's virtual address.
  void write(const Packet& p, Time now, std::int64_t message_bytes, const Topology& topo, std::int64_t mtu);

 private:
  std::FILE* file_ = nullptr;
  int link_ = -1;
  std::vector<unsigned char> frame_;
};

}  // namespace weft::sim
