// libFuzzer harness: bytes at the job's store, before and after the token handshake. One
// store serves every input; each input arrives on a fresh connection, first as a stranger's
// bytes, then after a successful handshake as request frames. The store must survive every
// input and still serve a client afterwards.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "weft/comm/auth.h"
#include "weft/comm/frame_mac.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/util/error.h"

using namespace weft::comm;

namespace {
const std::string kToken = "fuzz-store-token-0123456789abcdef";
StoreServer& server() {
  static StoreServer s("127.0.0.1", 0, kToken, StoreLimits{64, 0.5});
  return s;
}
// After a handshake the input is read as frames (u32 length, then that many bytes), each
// sent with the tag its connection's key gives it, so that the requests reach the store's
// parser; what does not parse as a frame goes as it is (and fails its check).
void send_bytes(bool authenticate, const std::uint8_t* data, std::size_t size) {
  try {
    Socket s = connect_tcp("127.0.0.1", server().port(), Deadline::in(2.0));
    std::string out(reinterpret_cast<const char*>(data), size);
    if (authenticate) {
      Digest session{};
      connect_handshake(s.fd(), kToken, Purpose::kStore, 1, 2.0, &session);
      FrameMac mac(session, true);
      std::string sealed;
      std::size_t at = 0;
      while (at + 4 <= size) {
        const std::uint32_t len = data[at] | data[at + 1] << 8 | data[at + 2] << 16 | std::uint32_t{data[at + 3]} << 24;
        if (len > size - at - 4) break;
        const std::string frame = out.substr(at, 4 + len);
        sealed += frame + mac.seal(frame);
        at += 4 + len;
      }
      out = sealed + out.substr(at);
    }
    write_all(s.fd(), out.data(), out.size(), Deadline::in(2.0));
  } catch (const weft::Error&) {
  }
}
}  // namespace

// The store, its thread and OpenSSL's per-thread random state exist before the first input,
// so that their one-time allocations are not taken for leaks of an input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  StoreClient c("127.0.0.1", server().port(), kToken, 0, 5.0);
  c.set("warm", "up");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  send_bytes(false, data, size);
  send_bytes(true, data, size);
  static int n = 0;
  if (++n % 256 == 0) {  // still serving its job
    StoreClient c("127.0.0.1", server().port(), kToken, 0, 5.0);
    c.set("alive", "yes");
    if (c.get("alive", 1.0) != std::optional<std::string>("yes")) __builtin_trap();
  }
  return 0;
}
