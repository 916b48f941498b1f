#include "weft/comm/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>

#include "weft/comm/auth.h"
#include "weft/comm/frame_mac.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {

enum StoreOp : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kErase = 5 };
enum Status : std::uint8_t { kOk = 0, kTimeout = 1, kMissing = 2, kBad = 3 };
constexpr std::uint32_t kMaxFrame = 256u << 20;

void put_u32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_uint(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<std::uint8_t>(s[at + i])} << (8 * i);
  return v;
}

// A key at `at`: u32 length then bytes. Returns false when the frame is malformed.
bool parse_key(const std::string& f, std::size_t at, std::string* key, std::size_t* after) {
  if (f.size() < at + 4) return false;
  std::uint64_t n = get_uint(f, at, 4);
  if (n > 4096 || f.size() < at + 4 + n) return false;
  *key = f.substr(at + 4, n);
  *after = at + 4 + n;
  return true;
}

std::string frame(std::uint8_t head, const std::string& body) {
  std::string out;
  put_u32(out, static_cast<std::uint32_t>(body.size() + 1));
  out.push_back(static_cast<char>(head));
  return out + body;
}

}  // namespace

// One connection of the store's loop (outside the anonymous namespace: StoreServer::State
// holds them).
struct StoreConnection {
  Socket socket;
  std::string peer;
  bool authenticated = false;
  std::string nonce;             // of its handshake
  std::string in, out;           // bytes read and not yet handled; bytes to write
  Clock::time_point deadline;    // of the handshake, or of the get it waits on
  std::optional<std::string> waiting;  // the key of a get that waits for it
  bool dead = false;
  FrameMac mac;                  // frames after the handshake (frame_mac.h)
};

struct StoreServer::State {
  std::string token;
  StoreLimits limits;
  Socket listener, wake_read, wake_write;
  std::atomic<bool> stop{false};
  RefusalLog refusals{"weft store"};
  std::atomic<int> open{0};  // descriptors held for connections
  std::map<std::string, std::string> data;
  std::list<StoreConnection> connections;
  std::string error_note;  // an accept error already reported

  void run();
  void accept_new();
  void drop_oldest_stranger(const char* why);
  void refuse(StoreConnection& c, const std::string& why);
  void receive(StoreConnection& c);
  void handle(StoreConnection& c);
  void request(StoreConnection& c, const std::string& f);
  void reply(StoreConnection& c, std::uint8_t status, const std::string& body);
  void send(StoreConnection& c);
  void answer_waiters();
};

StoreServer::StoreServer(const std::string& addr, int port, std::string token, StoreLimits limits)
    : state_(std::make_unique<State>()) {
  state_->token = std::move(token);
  state_->limits = limits;
  state_->listener = listen_tcp(addr, port, &port_);
  set_nonblocking(state_->listener.fd(), true);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) throw CommError(std::string("pipe failed: ") + std::strerror(errno));
  state_->wake_read = Socket(pipe_fds[0]);
  state_->wake_write = Socket(pipe_fds[1]);
  // As many descriptors as the system lets this process have: strangers must not exhaust them.
  rlimit fds{};
  if (::getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    fds.rlim_cur = fds.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &fds);
  }
  loop_ = std::thread([s = state_.get()] { s->run(); });
}

StoreServer::~StoreServer() {
  state_->stop = true;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(state_->wake_write.fd(), &byte, 1);
  loop_.join();
}

int StoreServer::refused() const { return state_->refusals.count(); }
int StoreServer::connections() const { return state_->open.load(); }

void StoreServer::State::run() {
  std::vector<pollfd> fds;
  std::vector<StoreConnection*> owner;
  while (!stop) {
    fds.clear();
    owner.clear();
    fds.push_back({wake_read.fd(), POLLIN, 0});
    fds.push_back({listener.fd(), POLLIN, 0});
    auto wake_at = Clock::now() + std::chrono::seconds(1);
    for (StoreConnection& c : connections) {
      fds.push_back({c.socket.fd(), static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      owner.push_back(&c);
      if (!c.authenticated || c.waiting) wake_at = std::min(wake_at, c.deadline);
    }
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake_at - Clock::now()).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(wait_ms + 1, 0, 1000)));
    if (rc < 0 && errno != EINTR) throw CommError(std::string("poll failed: ") + std::strerror(errno));
    if (stop) break;
    if (rc > 0 && (fds[0].revents & POLLIN)) {
      char drain[64];
      while (::read(wake_read.fd(), drain, sizeof drain) > 0) {
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      StoreConnection& c = *owner[i - 2];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(c);
      if (!c.dead && (fds[i].revents & POLLOUT)) send(c);
    }
    if (rc > 0 && (fds[1].revents & POLLIN)) accept_new();
    answer_waiters();
    const auto now = Clock::now();
    for (StoreConnection& c : connections) {
      if (!c.dead && !c.authenticated && now >= c.deadline) refuse(c, "no handshake within the time allowed");
    }
    // A stranger dropped to make room closed its descriptor already (and left the count then).
    open -= static_cast<int>(
        connections.remove_if([](const StoreConnection& c) { return c.dead && c.socket.valid(); }));
    connections.remove_if([](const StoreConnection& c) { return c.dead; });
  }
  connections.clear();
  open = 0;
}

void StoreServer::State::accept_new() {
  for (int burst = 0; burst < 256; ++burst) {
    std::string peer;
    int error = 0;
    Socket s = try_accept(listener.fd(), &peer, &error);
    if (!s.valid()) {
      if (error == EMFILE || error == ENFILE) {
        // No descriptor left: make room by dropping the oldest stranger (the next poll
        // accepts again); with none to drop, the connection waits in the backlog.
        if (error_note.empty()) {
          error_note = std::strerror(error);
          std::fprintf(stderr, "weft store: accept: %s: dropping the oldest unauthenticated connections\n",
                       error_note.c_str());
        }
        drop_oldest_stranger("dropped for want of descriptors");
      }
      return;
    }
    int pending = 0;
    for (const StoreConnection& c : connections) pending += (c.authenticated || c.dead) ? 0 : 1;
    if (pending >= limits.max_pending) drop_oldest_stranger("too many unauthenticated connections");
    set_nonblocking(s.fd(), true);
    StoreConnection& c = connections.emplace_back();
    ++open;
    c.socket = std::move(s);
    c.peer = peer;
    const AcceptStart start = start_accept(Purpose::kStore);
    c.nonce = start.nonce;
    c.out = start.hello;
    c.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.auth_timeout_s));
    send(c);
  }
}

void StoreServer::State::drop_oldest_stranger(const char* why) {
  for (StoreConnection& c : connections) {
    if (!c.authenticated && !c.dead) {
      refuse(c, why);
      c.socket.close();  // the descriptor now, not at the end of the round
      --open;
      return;
    }
  }
}

void StoreServer::State::refuse(StoreConnection& c, const std::string& why) {
  c.dead = true;
  refusals.refuse(c.peer, why, stop);
}

void StoreServer::State::receive(StoreConnection& c) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(c.socket.fd(), buf, sizeof buf);
    if (n > 0) {
      c.in.append(buf, static_cast<std::size_t>(n));
      if (!c.authenticated && c.in.size() > kAcceptReplyBytes) return refuse(c, "bytes beyond the handshake");
      if (c.in.size() > kMaxFrame + 4u + kFrameTagBytes) return refuse(c, "a request beyond the frame limit");
      continue;
    }
    if (n == 0) {
      if (!c.authenticated) return refuse(c, "the peer closed the connection");
      c.dead = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      if (!c.authenticated) return refuse(c, std::strerror(errno));
      c.dead = true;
      return;
    }
    break;
  }
  handle(c);
}

void StoreServer::State::handle(StoreConnection& c) {
  if (!c.authenticated) {
    if (c.in.size() < kAcceptReplyBytes) return;
    try {
      const AcceptEnd end = finish_accept(token, Purpose::kStore, c.nonce, 0,
                                          reinterpret_cast<const std::uint8_t*>(c.in.data()));
      c.authenticated = true;
      c.in.erase(0, kAcceptReplyBytes);
      c.out += end.answer;
      c.mac = FrameMac(end.session, false);
    } catch (const CommError& e) {
      return refuse(c, e.what());
    }
  }
  while (!c.dead && !c.waiting && c.in.size() >= 4) {
    const auto len = static_cast<std::uint32_t>(get_uint(c.in, 0, 4));
    if (len == 0 || len > kMaxFrame) {
      refuse(c, "bad frame length " + std::to_string(len));
      return;
    }
    if (c.in.size() < 4u + len + kFrameTagBytes) break;
    const std::string whole = c.in.substr(0, 4u + len);
    if (!c.mac.check(whole, reinterpret_cast<const std::uint8_t*>(c.in.data()) + 4 + len)) {
      refuse(c, "a request that failed its integrity check");
      return;
    }
    c.in.erase(0, 4u + len + kFrameTagBytes);
    request(c, whole.substr(4));
  }
  send(c);
}

void StoreServer::State::request(StoreConnection& c, const std::string& f) {
  const std::uint8_t op = static_cast<std::uint8_t>(f[0]);
  std::string key;
  std::size_t after = 0;
  if (op == kSet && parse_key(f, 1, &key, &after)) {
    data[key] = f.substr(after);
    reply(c, kOk, "");
  } else if (op == kGet && f.size() >= 5 && parse_key(f, 5, &key, &after)) {
    auto it = data.find(key);
    if (it != data.end()) return reply(c, kOk, it->second);
    c.waiting = key;  // answered by answer_waiters: when the key is set, or at the deadline
    c.deadline = Clock::now() + std::chrono::milliseconds(get_uint(f, 1, 4));
  } else if (op == kAdd && f.size() >= 9 && parse_key(f, 9, &key, &after)) {
    std::int64_t v = 0;
    auto it = data.find(key);
    if (it != data.end()) {
      try {
        v = std::stoll(it->second);
      } catch (const std::exception&) {
        v = 0;
      }
    }
    v = static_cast<std::int64_t>(static_cast<std::uint64_t>(v) + get_uint(f, 1, 8));  // wraps, never UB
    data[key] = std::to_string(v);
    reply(c, kOk, data[key]);
  } else if (op == kCheck && parse_key(f, 1, &key, &after)) {
    reply(c, data.count(key) ? kOk : kMissing, "");
  } else if (op == kErase && parse_key(f, 1, &key, &after)) {
    data.erase(key);
    reply(c, kOk, "");
  } else {
    refuse(c, "malformed request");
  }
}

void StoreServer::State::reply(StoreConnection& c, std::uint8_t status, const std::string& body) {
  const std::string f = frame(status, body);
  c.out += f + c.mac.seal(f);
}

void StoreServer::State::send(StoreConnection& c) {
  while (!c.dead && !c.out.empty()) {
    const ssize_t n = ::send(c.socket.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) {
      c.out.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) c.dead = true;
      return;
    }
  }
}

// Gets waiting on a key: answered when it exists, or with a timeout at their deadline; the
// requests that followed them are handled then.
void StoreServer::State::answer_waiters() {
  const auto now = Clock::now();
  for (StoreConnection& c : connections) {
    if (c.dead || !c.waiting) continue;
    auto it = data.find(*c.waiting);
    if (it == data.end() && now < c.deadline) continue;
    if (it != data.end()) reply(c, kOk, it->second);
    else reply(c, kTimeout, "");
    c.waiting.reset();
    handle(c);
  }
}

StoreClient::StoreClient(const std::string& host, int port, const std::string& token, std::uint32_t identity,
                         double timeout_s)
    : where_(host + ":" + std::to_string(port)) {
  Deadline d = Deadline::in(timeout_s);
  socket_ = connect_tcp(host, port, d);
  try {
    Digest session{};
    connect_handshake(socket_.fd(), token, Purpose::kStore, identity, std::max(1.0, d.remaining_ms() / 1000.0), &session);
    mac_ = FrameMac(session, true);
  } catch (const CommError& e) {
    throw CommError("the store at " + where_ + " refused this process (" + e.what() +
                    "): WEFT_JOB_TOKEN differs between the ranks, or the rank serving the store (rank 0) stopped");
  }
}

std::string StoreClient::request(std::uint8_t op, const std::string& body, double timeout_s, std::uint8_t* status) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = frame(op, body);
  out += mac_.seal(out);
  Deadline d = Deadline::in(timeout_s + 30.0);
  try {
    write_all(socket_.fd(), out.data(), out.size(), d);
    std::string f(4, '\0');
    read_exact(socket_.fd(), f.data(), 4, d);
    const auto len = static_cast<std::uint32_t>(get_uint(f, 0, 4));
    if (len == 0 || len > kMaxFrame) throw CommError("bad reply from the store");
    f.resize(4u + len + kFrameTagBytes);
    read_exact(socket_.fd(), f.data() + 4, len + kFrameTagBytes, d);
    if (!mac_.check(f.substr(0, 4u + len), reinterpret_cast<const std::uint8_t*>(f.data()) + 4 + len))
      throw CommError("a reply failed its integrity check (altered on the way?)");
    *status = static_cast<std::uint8_t>(f[4]);
    return f.substr(5, len - 1);
  } catch (const CommError& e) {
    throw CommError("lost the store at " + where_ + ": " + e.what());
  }
}

void StoreClient::set(const std::string& key, const std::string& value) {
  std::string body;
  put_u32(body, static_cast<std::uint32_t>(key.size()));
  body += key + value;
  std::uint8_t st;
  request(kSet, body, 0, &st);
}

std::optional<std::string> StoreClient::get(const std::string& key, double timeout_s) {
  std::string body;
  put_u32(body, static_cast<std::uint32_t>(std::max(0.0, timeout_s) * 1000.0));
  put_u32(body, static_cast<std::uint32_t>(key.size()));
  body += key;
  std::uint8_t st;
  std::string v = request(kGet, body, timeout_s, &st);
  if (st != kOk) return std::nullopt;
  return v;
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  std::string body;
  put_u64(body, static_cast<std::uint64_t>(delta));
  put_u32(body, static_cast<std::uint32_t>(key.size()));
  body += key;
  std::uint8_t st;
  return std::stoll(request(kAdd, body, 0, &st));
}

bool StoreClient::check(const std::string& key) {
  std::string body;
  put_u32(body, static_cast<std::uint32_t>(key.size()));
  body += key;
  std::uint8_t st;
  request(kCheck, body, 0, &st);
  return st == kOk;
}

void StoreClient::erase(const std::string& key) {
  std::string body;
  put_u32(body, static_cast<std::uint32_t>(key.size()));
  body += key;
  std::uint8_t st;
  request(kErase, body, 0, &st);
}

std::vector<std::string> StoreClient::wait_all(const std::vector<std::string>& keys, double timeout_s) {
  Deadline d = Deadline::in(timeout_s);
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!missing.empty()) {
      if (!check(k)) missing.push_back(k);
      continue;
    }
    if (!get(k, d.remaining_ms() / 1000.0)) missing.push_back(k);
  }
  return missing;
}

}  // namespace weft::comm

namespace weft::comm {
std::string StoreClient::local_address() const {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(socket_.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  char buf[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return buf;
}
}  // namespace weft::comm
