// libFuzzer harness: the bytes a rank's peer connections can carry before they are trusted.
// The first byte picks the side:
//   even: we connect, and the other end sends these bytes as its hello and answer
//         (connect_handshake must refuse them, or accept only a correct MAC);
//   odd:  we accept peers (accept_authenticated, the rendezvous loop) while a stranger's
//         connection sends these bytes and closes; a genuine peer connecting at the same
//         time must still be accepted, with its identity.
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/comm/socket.h"
#include "weft/util/error.h"

using namespace weft::comm;

namespace {
const std::string kToken = "fuzz-handshake-token-0123456789abcdef";
constexpr std::uint32_t kGenuine = 7;

struct Listener {
  int port = 0;  // before the socket: set by listen_tcp
  Socket socket;
  Listener() : socket(listen_tcp("127.0.0.1", 0, &port)) {}
};
Listener& listener() {
  static Listener l;
  return l;
}

// A genuine peer, connecting once each time it is asked. Each input waits until the peer's
// side of its handshake is over too: a handshake still running on that thread when the
// process exits would use OpenSSL's state while exit() frees it (a rare crash at the end).
class Genuine {
 public:
  Genuine() : thread_([this] { loop(); }) { thread_.detach(); }
  void ask() {
    std::lock_guard<std::mutex> lock(mu_);
    ++asked_;
    cv_.notify_all();
  }
  void wait_done() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == asked_; });
  }

 private:
  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return asked_ > done_; });
      }
      try {
        Socket s = connect_tcp("127.0.0.1", listener().port, Deadline::in(5.0));
        connect_handshake(s.fd(), kToken, Purpose::kPeer, kGenuine, 5.0);
      } catch (const weft::Error&) {
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++done_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int asked_ = 0, done_ = 0;
  std::thread thread_;
};
Genuine& genuine() {  // never destroyed: its thread waits on it until the process ends
  static Genuine* g = new Genuine;
  return *g;
}

void as_connector(const std::uint8_t* data, std::size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  Socket ours(fds[0]), theirs(fds[1]);
  try {
    write_all(theirs.fd(), data, size, Deadline::in(1.0));
  } catch (const weft::Error&) {
    return;  // more than the socket buffer: the connector reads only a hello's worth
  }
  shutdown(theirs.fd(), SHUT_WR);
  try {
    connect_handshake(ours.fd(), kToken, Purpose::kPeer, 1, 1.0);
  } catch (const weft::Error&) {
  }
}

void as_acceptor(const std::uint8_t* data, std::size_t size) {
  try {
    Socket stranger = connect_tcp("127.0.0.1", listener().port, Deadline::in(2.0));
    write_all(stranger.fd(), data, size, Deadline::in(2.0));
  } catch (const weft::Error&) {
  }
  genuine().ask();
  auto peers = accept_authenticated(listener().socket.fd(), kToken, Purpose::kPeer, 0, 1,
                                    [](std::uint32_t id) { return id == kGenuine; }, 10.0, 2.0, "fuzz rank", 64);
  if (peers.size() != 1 || peers[0].identity != kGenuine) __builtin_trap();
  close(peers[0].fd);
  genuine().wait_done();
}
}  // namespace

// The listener, the genuine peer's thread and OpenSSL's per-thread state exist before the
// first input, so that their one-time allocations are not taken for an input's leaks.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  genuine();
  const std::uint8_t nothing = 1;
  as_acceptor(&nothing, 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) as_connector(data + 1, size - 1);
  else as_acceptor(data + 1, size - 1);
  return 0;
}
