#include "weft/sim/link_capture.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "weft/util/error.h"

namespace weft::sim {
namespace {

void put16(unsigned char* p, unsigned v) {
  p[0] = static_cast<unsigned char>(v >> 8);
  p[1] = static_cast<unsigned char>(v);
}
void put24(unsigned char* p, unsigned v) {
  p[0] = static_cast<unsigned char>(v >> 16);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v);
}
void put32(unsigned char* p, std::uint32_t v) {
  put16(p, v >> 16);
  put16(p + 2, v & 0xFFFF);
}
void mac(unsigned char* p, int node) {
  unsigned char m[6] = {0x02, 0x00, 0x00, static_cast<unsigned char>(node >> 16), static_cast<unsigned char>(node >> 8),
                        static_cast<unsigned char>(node)};
  std::memcpy(p, m, 6);
}

}  // namespace

LinkCapture::~LinkCapture() {
  if (file_) std::fclose(file_);
}

void LinkCapture::open(const std::string& path, int link) {
  if (file_) std::fclose(file_);  // a second capture replaces the first
  link_ = link;
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw ConfigError("pcap: cannot write " + path);
  unsigned char h[24] = {};
  std::uint32_t magic = 0xA1B23C4D;  // nanosecond timestamps
  std::memcpy(h, &magic, 4);
  std::uint16_t major = 2, minor = 4;
  std::memcpy(h + 4, &major, 2);
  std::memcpy(h + 6, &minor, 2);
  std::uint32_t snaplen = 65535, linktype = 1;
  std::memcpy(h + 16, &snaplen, 4);
  std::memcpy(h + 20, &linktype, 4);
  std::fwrite(h, 1, sizeof h, file_);
}

void LinkCapture::write(const Packet& p, Time now, std::int64_t message_bytes, const Topology& topo, std::int64_t mtu) {
  frame_.assign(std::max<std::size_t>(p.frame, 64), 0);
  unsigned char* f = frame_.data();
  std::size_t n = 0;
  if (p.type == PacketType::kPause) {
    const unsigned char dst[6] = {0x01, 0x80, 0xC2, 0x00, 0x00, 0x01};
    std::memcpy(f, dst, 6);
    mac(f + 6, p.src);
    put16(f + 12, 0x8808);
    put16(f + 14, 0x0101);            // PFC opcode
    put16(f + 16, 1u << p.queue);     // class enable vector
    put16(f + 18 + 2 * p.queue, p.psn);  // quanta of that class
    n = 60;
  } else {
    mac(f, p.dst);
    mac(f + 6, p.src);
    put16(f + 12, 0x0800);
    unsigned char* ip = f + 14;
    std::uint32_t ip_len = p.frame - 14 - 4;  // without Ethernet header and FCS
    ip[0] = 0x45;
    ip[1] = static_cast<unsigned char>(p.dscp << 2 | (p.ce ? 3 : p.ect ? 2 : 0));
    put16(ip + 2, ip_len);
    put16(ip + 6, 0x4000);  // don't fragment
    ip[8] = 64;
    ip[9] = 17;
    put32(ip + 12, topo.nodes[p.src].ip);
    put32(ip + 16, topo.nodes[p.dst].ip);
    std::uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<std::uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    put16(ip + 10, ~sum & 0xFFFF);
    unsigned char* udp = ip + 20;
    put16(udp, p.sport);
    put16(udp + 2, kRocePort);
    put16(udp + 4, ip_len - 20);
    unsigned char* bth = udp + 8;
    unsigned opcode = 0;
    switch (p.type) {
      case PacketType::kData:
        opcode = p.opcode == Opcode::kFirst ? 0x06 : p.opcode == Opcode::kMiddle ? 0x07 : p.opcode == Opcode::kLast ? 0x08 : 0x0A;
        break;
      case PacketType::kAck:
      case PacketType::kNak: opcode = 0x11; break;
      case PacketType::kCnp: opcode = 0x81; break;
      default: break;
    }
    bth[0] = static_cast<unsigned char>(opcode);
    put16(bth + 2, 0xFFFF);  // partition key
    if (p.type == PacketType::kCnp) bth[4] = 0x40;  // BECN: the CNP tells the sender of congestion
    put24(bth + 5, p.qp + 0x100);  // destination QP (0 and 1 are reserved for management)
    // An ACK carries the PSN of the last packet it acknowledges; a NAK (sequence error) the
    // PSN the responder expects, or for a trimmed packet (RoCE has no trimming NAK) the PSN
    // to resend.
    put24(bth + 9, p.type == PacketType::kAck ? p.psn - 1 : p.trimmed ? p.nacked_psn : p.psn);
    if (p.type == PacketType::kData && (p.opcode == Opcode::kLast || p.opcode == Opcode::kOnly)) bth[8] = 0x80;  // ack request
    n = 14 + 20 + 8 + 12;
    if (p.type == PacketType::kData && (p.opcode == Opcode::kFirst || p.opcode == Opcode::kOnly)) {
      unsigned char* reth = f + n;
      put32(reth, 0);
      put32(reth + 4, p.psn * static_cast<std::uint32_t>(mtu));      // virtual address (low word)
      put32(reth + 8, 0x1000 + p.qp);                                 // R_Key
      put32(reth + 12, static_cast<std::uint32_t>(message_bytes));   // DMA length: the whole message
      n += kRethBytes;
    } else if (p.type == PacketType::kAck || p.type == PacketType::kNak) {
      f[n] = p.type == PacketType::kNak ? 0x60 : 0x1F;  // AETH syndrome: NAK (PSN sequence error) or ACK
      put24(f + n + 1, p.msn);  // message sequence number
      n += 4;
    } else if (p.type == PacketType::kCnp) {
      n += 16;
    }
  }
  // Captured: the whole frame without FCS (payload and ICRC as zeros).
  n = p.type == PacketType::kPause ? 60 : p.frame - 4;
  std::uint32_t rec[4] = {static_cast<std::uint32_t>(now / kSec), static_cast<std::uint32_t>(now % kSec / kNs),
                          static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n)};
  std::fwrite(rec, sizeof rec, 1, file_);
  std::fwrite(f, 1, n, file_);
}

}  // namespace weft::sim
