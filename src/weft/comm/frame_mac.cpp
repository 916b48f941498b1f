#include "weft/comm/frame_mac.h"

#include <openssl/crypto.h>

namespace weft::comm {

std::string FrameMac::tag(char direction, std::uint64_t seq, const std::string& frame) const {
  std::string message(1, direction);
  for (int i = 0; i < 8; ++i) message.push_back(static_cast<char>((seq >> (8 * i)) & 0xff));
  const Digest d = hmac_sha256(key_, message + frame);
  return std::string(reinterpret_cast<const char*>(d.data()), kFrameTagBytes);
}

std::string FrameMac::seal(const std::string& frame) { return tag(client_ ? 'q' : 'r', sent_++, frame); }

bool FrameMac::check(const std::string& frame, const std::uint8_t* received) {
  const std::string want = tag(client_ ? 'r' : 'q', received_++, frame);
  return CRYPTO_memcmp(want.data(), received, kFrameTagBytes) == 0;
}

}  // namespace weft::comm
