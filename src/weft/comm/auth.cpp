#include "weft/comm/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <list>
#include <set>

#include "weft/comm/socket.h"
#include "weft/util/env.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {
constexpr char kAuthMagic[8] = {'W', 'E', 'F', 'T', 'A', 'U', 'T', 'H'};
constexpr std::uint8_t kVersion = 1;

std::string u32_bytes(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::uint32_t read_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}
std::string as_string(const Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }
Digest as_digest(const std::uint8_t* p) {
  Digest d;
  std::memcpy(d.data(), p, d.size());
  return d;
}
}  // namespace

Digest hmac_sha256(const std::string& key, const std::string& message) {
  Digest out{};
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
         message.size(), out.data(), &len);
  return out;
}

bool digest_equal(const Digest& a, const Digest& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

std::string random_bytes(std::size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(n)) != 1) {
    throw Error("cannot get random bytes for the job token");
  }
  return s;
}

std::string generate_token() {
  static const char* hex = "0123456789abcdef";
  std::string raw = random_bytes(32), out;
  for (unsigned char c : raw) {
    out.push_back(hex[c >> 4]);
    out.push_back(hex[c & 15]);
  }
  return out;
}

double token_strength_bits(const std::string& token) {
  bool lower = false, upper = false, digit = false, other = false;
  std::set<char> distinct;
  for (char c : token) {
    distinct.insert(c);
    const auto u = static_cast<unsigned char>(c);
    lower = lower || std::islower(u);
    upper = upper || std::isupper(u);
    digit = digit || std::isdigit(u);
    other = other || !std::isalnum(u);
  }
  const bool hex = std::all_of(token.begin(), token.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  double alphabet = hex ? 16 : (lower ? 26 : 0) + (upper ? 26 : 0) + (digit ? 10 : 0) + (other ? 33 : 0);
  if (distinct.size() < 16) alphabet = std::min(alphabet, static_cast<double>(distinct.size()));
  return alphabet > 1 ? static_cast<double>(token.size()) * std::log2(alphabet) : 0.0;
}

std::string job_token_from_env() {
  auto t = env_string("WEFT_JOB_TOKEN");
  if (!t) {
    throw ConfigError("WEFT_JOB_TOKEN is not set: start the job with 'weft launch', or export the same secret on "
                      "every rank (e.g. WEFT_JOB_TOKEN=$(openssl rand -hex 32))");
  }
  if (t->size() < 16) throw ConfigError("WEFT_JOB_TOKEN is too short: use at least 16 characters");
  return *t;
}

AcceptStart start_accept(Purpose purpose) {
  AcceptStart a{std::string(kAuthMagic, sizeof kAuthMagic), random_bytes(32)};
  a.hello.push_back(static_cast<char>(kVersion));
  a.hello.push_back(static_cast<char>(purpose));
  a.hello += a.nonce;
  return a;
}

AcceptEnd finish_accept(const std::string& token, Purpose purpose, const std::string& nonce, std::uint32_t my_identity,
                        const std::uint8_t* reply) {
  std::string nonce_c(reinterpret_cast<const char*>(reply), 32);
  const std::uint32_t their_identity = read_u32(reply + 32);
  std::string label(1, static_cast<char>(purpose));
  Digest want = hmac_sha256(token, "connect" + label + nonce + nonce_c + u32_bytes(their_identity));
  if (!digest_equal(want, as_digest(reply + 36))) throw CommError("bad job token");
  Digest mine = hmac_sha256(token, "accept" + label + nonce + nonce_c + u32_bytes(my_identity) + u32_bytes(their_identity));
  return {their_identity, u32_bytes(my_identity) + as_string(mine), session_key(token, purpose, nonce, nonce_c)};
}

std::uint32_t accept_handshake(int fd, const std::string& token, Purpose purpose, std::uint32_t my_identity,
                               double timeout_s) {
  Deadline d = Deadline::in(timeout_s);
  const AcceptStart start = start_accept(purpose);
  write_all(fd, start.hello.data(), start.hello.size(), d);
  std::uint8_t reply[kAcceptReplyBytes];
  read_exact(fd, reply, sizeof reply, d);
  const AcceptEnd end = finish_accept(token, purpose, start.nonce, my_identity, reply);
  write_all(fd, end.answer.data(), end.answer.size(), d);
  return end.their_identity;
}

void RefusalLog::refuse(const std::string& peer, const std::string& why, bool quiet) {
  const int n = ++count_;
  if (quiet) return;
  if (n <= 10) {
    std::fprintf(stderr, "%s: refused a connection from %s (%s)\n", who_.c_str(), peer.c_str(), why.c_str());
  } else if (n % 1000 == 0) {
    std::fprintf(stderr, "%s: %d connections refused so far (the latest from %s: %s)\n", who_.c_str(), n, peer.c_str(),
                 why.c_str());
  }
}

namespace {
// A handshake in progress on a non-blocking socket.
struct Pending {
  Socket socket;
  std::string peer, nonce, in, out;
  Clock::time_point deadline;
  std::uint32_t identity = 0;
  bool answered = false;  // the reply checked; `out` holds the answer until it is sent
};
}  // namespace

std::vector<AcceptedPeer> accept_authenticated(int listen_fd, const std::string& token, Purpose purpose,
                                               std::uint32_t my_identity, int count,
                                               const std::function<bool(std::uint32_t)>& wanted, double timeout_s,
                                               double handshake_s, const std::string& who, int max_pending) {
  const Deadline d = Deadline::in(timeout_s);
  set_nonblocking(listen_fd, true);  // accepts in bursts without blocking
  std::list<Pending> pending;
  std::vector<AcceptedPeer> done;
  RefusalLog log(who);
  auto refuse = [&](Pending& p, const std::string& why) {
    if (!p.socket.valid()) return;
    log.refuse(p.peer, why);
    p.socket.close();
  };
  std::vector<pollfd> fds;
  try {
    while (static_cast<int>(done.size()) < count) {
      if (d.expired()) throw CommError("peers did not connect within the timeout");
      fds.assign(1, pollfd{listen_fd, POLLIN, 0});
      for (Pending& p : pending)
        fds.push_back({p.socket.fd(), static_cast<short>(POLLIN | (p.out.empty() ? 0 : POLLOUT)), 0});
      if (::poll(fds.data(), fds.size(), std::min(d.remaining_ms(), 100)) < 0 && errno != EINTR)
        throw CommError(std::string("poll failed: ") + std::strerror(errno));
      if (fds[0].revents & POLLIN) {
        for (int burst = 0; burst < 64; ++burst) {
          std::string peer;
          int error = 0;
          Socket s = try_accept(listen_fd, &peer, &error);
          if (!s.valid()) {
            if ((error == EMFILE || error == ENFILE) && !pending.empty()) refuse(pending.front(), "dropped for want of descriptors");
            break;
          }
          if (static_cast<int>(pending.size()) >= max_pending) refuse(pending.front(), "too many handshakes at once");
          pending.remove_if([](const Pending& p) { return !p.socket.valid(); });
          set_nonblocking(s.fd(), true);
          Pending& p = pending.emplace_back();
          p.socket = std::move(s);
          p.peer = peer;
          const AcceptStart start = start_accept(purpose);
          p.nonce = start.nonce;
          p.out = start.hello;
          p.deadline = Deadline::in(handshake_s).at;
        }
      }
      const auto now = Clock::now();
      for (Pending& p : pending) {
        const int fd = p.socket.fd();
        while (!p.out.empty()) {  // the hello, or the answer
          const ssize_t n = ::send(fd, p.out.data(), p.out.size(), MSG_NOSIGNAL);
          if (n > 0) {
            p.out.erase(0, static_cast<std::size_t>(n));
          } else if (n < 0 && errno == EINTR) {
            continue;
          } else {
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) refuse(p, std::strerror(errno));
            break;
          }
        }
        if (!p.socket.valid()) continue;
        if (p.answered) {
          if (p.out.empty()) {  // handed over
            set_nonblocking(fd, false);
            done.push_back({p.identity, p.socket.release()});
          }
          continue;
        }
        char buf[kAcceptReplyBytes];
        const ssize_t n = ::recv(fd, buf, kAcceptReplyBytes - p.in.size(), 0);
        if (n > 0) p.in.append(buf, static_cast<std::size_t>(n));
        if (n == 0) refuse(p, "the peer closed the connection");
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) refuse(p, std::strerror(errno));
        if (!p.socket.valid()) continue;
        if (p.in.size() == kAcceptReplyBytes) {
          try {
            const AcceptEnd end = finish_accept(token, purpose, p.nonce, my_identity,
                                                reinterpret_cast<const std::uint8_t*>(p.in.data()));
            if (!wanted(end.their_identity)) {
              refuse(p, "an unexpected identity " + std::to_string(end.their_identity));
              continue;
            }
            p.identity = end.their_identity;
            p.out = end.answer;
            p.answered = true;
          } catch (const CommError& e) {
            refuse(p, e.what());
          }
        } else if (now >= p.deadline) {
          refuse(p, "no handshake within the time allowed");
        }
      }
      pending.remove_if([](const Pending& p) { return !p.socket.valid(); });
    }
  } catch (...) {
    for (const AcceptedPeer& a : done) ::close(a.fd);
    throw;
  }
  return done;
}

Digest session_key(const std::string& token, Purpose purpose, const std::string& nonce_a, const std::string& nonce_c) {
  return hmac_sha256(token, "session" + std::string(1, static_cast<char>(purpose)) + nonce_a + nonce_c);
}

std::uint32_t connect_handshake(int fd, const std::string& token, Purpose purpose, std::uint32_t my_identity,
                                double timeout_s, Digest* session) {
  Deadline d = Deadline::in(timeout_s);
  std::uint8_t hello[8 + 2 + 32];
  read_exact(fd, hello, sizeof hello, d);
  if (std::memcmp(hello, kAuthMagic, sizeof kAuthMagic) != 0 || hello[8] != kVersion) {
    throw CommError("the peer is not a weft process of this version");
  }
  if (hello[9] != static_cast<std::uint8_t>(purpose)) throw CommError("the peer serves another purpose");
  std::string nonce_a(reinterpret_cast<const char*>(hello + 10), 32);
  std::string nonce_c = random_bytes(32);
  std::string label(1, static_cast<char>(purpose));
  Digest mac = hmac_sha256(token, "connect" + label + nonce_a + nonce_c + u32_bytes(my_identity));
  std::string reply = nonce_c + u32_bytes(my_identity) + as_string(mac);
  write_all(fd, reply.data(), reply.size(), d);
  std::uint8_t answer[4 + 32];
  read_exact(fd, answer, sizeof answer, d);
  std::uint32_t their_identity = read_u32(answer);
  Digest want = hmac_sha256(token, "accept" + label + nonce_a + nonce_c + u32_bytes(their_identity) +
                                       u32_bytes(my_identity));
  if (!digest_equal(want, as_digest(answer + 4))) throw CommError("the peer does not hold this job's token");
  if (session) *session = session_key(token, purpose, nonce_a, nonce_c);
  return their_identity;
}

}  // namespace weft::comm
