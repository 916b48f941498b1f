// Integrity of the store's frames after the handshake: each frame carries a tag,
// HMAC-SHA256 (first 16 bytes) under the connection's session key (auth.h) over the
// direction, the frame's sequence number in that direction, and the frame's bytes. A frame
// that was altered, replayed, reordered, dropped or injected on the network fails its
// check, and the connection is dropped (server) or the request fails (client).
#pragma once

#include <cstdint>
#include <string>

#include "weft/comm/auth.h"

namespace weft::comm {

constexpr std::size_t kFrameTagBytes = 16;

class FrameMac {
 public:
  FrameMac() = default;
  // `client`: this end sends requests and receives replies.
  FrameMac(const Digest& key, bool client) : key_(as_key(key)), client_(client) {}
  // The tag to append to the next frame this end sends.
  std::string seal(const std::string& frame);
  // Whether `tag` is the one the next frame from the other end must carry (constant time).
  bool check(const std::string& frame, const std::uint8_t* tag);

 private:
  static std::string as_key(const Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }
  std::string tag(char direction, std::uint64_t seq, const std::string& frame) const;
  std::string key_;
  bool client_ = false;
  std::uint64_t sent_ = 0, received_ = 0;
};

}  // namespace weft::comm
