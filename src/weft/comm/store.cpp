#include "weft/comm/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include "weft/comm/auth.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {

enum Op : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kErase = 5 };
enum Status : std::uint8_t { kOk = 0, kTimeout = 1, kMissing = 2, kBad = 3 };
constexpr std::uint32_t kMaxFrame = 256u << 20;
constexpr double kIdleTimeout = 24 * 3600.0;

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

StoreServer::StoreServer(const std::string& addr, int port, std::string token) : token_(std::move(token)) {
  listener_ = listen_tcp(addr, port, &port_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : connection_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  changed_.notify_all();
  acceptor_.join();
  for (auto& t : connections_) t.join();
}

void StoreServer::accept_loop() {
  while (!stop_) {
    std::string peer;
    Socket s = accept_tcp(listener_.fd(), Deadline::in(0.1), &peer);
    if (!s.valid()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || connections_.size() >= 65536) continue;
    connection_fds_.push_back(s.fd());
    connections_.emplace_back([this, sock = std::move(s), peer]() mutable { serve(std::move(sock), peer); });
  }
}

void StoreServer::serve(Socket s, std::string peer) {
  // Forget the descriptor before the socket closes, so shutdown never hits a reused one.
  struct Forget {
    StoreServer* self;
    int fd;
    ~Forget() {
      std::lock_guard<std::mutex> lock(self->mu_);
      std::erase(self->connection_fds_, fd);
    }
  } forget{this, s.fd()};
  try {
    accept_handshake(s.fd(), token_, Purpose::kStore, 0, 10.0);
  } catch (const CommError& e) {
    ++refused_;
    if (!stop_) std::fprintf(stderr, "weft store: refused a connection from %s (%s)\n", peer.c_str(), e.what());
    return;
  }
  try {
    while (!stop_) {
      std::uint8_t len_bytes[4];
      read_exact(s.fd(), len_bytes, 4, Deadline::in(kIdleTimeout));
      std::uint32_t len = static_cast<std::uint32_t>(get_uint(std::string(reinterpret_cast<char*>(len_bytes), 4), 0, 4));
      if (len == 0 || len > kMaxFrame) throw CommError("bad frame length " + std::to_string(len));
      std::string f(len, '\0');
      read_exact(s.fd(), f.data(), len, Deadline::in(60.0));
      const std::uint8_t op = static_cast<std::uint8_t>(f[0]);
      std::string key, reply_body;
      std::size_t after = 0;
      std::uint8_t status = kOk;
      if (op == kSet && parse_key(f, 1, &key, &after)) {
        std::lock_guard<std::mutex> lock(mu_);
        data_[key] = f.substr(after);
        changed_.notify_all();
      } else if (op == kGet && f.size() >= 5 && parse_key(f, 5, &key, &after)) {
        double timeout_s = static_cast<double>(get_uint(f, 1, 4)) / 1000.0;
        std::unique_lock<std::mutex> lock(mu_);
        bool found = changed_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                       [&] { return stop_ || data_.count(key) > 0; });
        if (found && data_.count(key)) reply_body = data_[key]; else status = kTimeout;
      } else if (op == kAdd && f.size() >= 9 && parse_key(f, 9, &key, &after)) {
        auto delta = static_cast<std::int64_t>(get_uint(f, 1, 8));
        std::lock_guard<std::mutex> lock(mu_);
        std::int64_t v = 0;
        auto it = data_.find(key);
        if (it != data_.end()) {
          try {
            v = std::stoll(it->second);
          } catch (const std::exception&) {
            v = 0;
          }
        }
        v += delta;
        data_[key] = std::to_string(v);
        reply_body = data_[key];
        changed_.notify_all();
      } else if (op == kCheck && parse_key(f, 1, &key, &after)) {
        std::lock_guard<std::mutex> lock(mu_);
        status = data_.count(key) ? kOk : kMissing;
      } else if (op == kErase && parse_key(f, 1, &key, &after)) {
        std::lock_guard<std::mutex> lock(mu_);
        data_.erase(key);
      } else {
        throw CommError("malformed request");
      }
      std::string out = frame(status, reply_body);
      write_all(s.fd(), out.data(), out.size(), Deadline::in(60.0));
    }
  } catch (const CommError& e) {
    if (!stop_ && std::string(e.what()) != "the peer closed the connection") {
      ++refused_;
      std::fprintf(stderr, "weft store: dropped the connection from %s (%s)\n", peer.c_str(), e.what());
    }
  }
}

StoreClient::StoreClient(const std::string& host, int port, const std::string& token, std::uint32_t identity,
                         double timeout_s)
    : where_(host + ":" + std::to_string(port)) {
  Deadline d = Deadline::in(timeout_s);
  socket_ = connect_tcp(host, port, d);
  try {
    connect_handshake(socket_.fd(), token, Purpose::kStore, identity, std::max(1.0, d.remaining_ms() / 1000.0));
  } catch (const CommError& e) {
    throw CommError("the store at " + where_ + " refused this process (" + e.what() +
                    "): WEFT_JOB_TOKEN differs between the ranks, or the rank serving the store (rank 0) stopped");
  }
}

std::string StoreClient::request(std::uint8_t op, const std::string& body, double timeout_s, std::uint8_t* status) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = frame(op, body);
  Deadline d = Deadline::in(timeout_s + 30.0);
  try {
    write_all(socket_.fd(), out.data(), out.size(), d);
    std::uint8_t len_bytes[4];
    read_exact(socket_.fd(), len_bytes, 4, d);
    std::uint32_t len = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (std::uint32_t{len_bytes[3]} << 24);
    if (len == 0 || len > kMaxFrame) throw CommError("bad reply from the store");
    std::string f(len, '\0');
    read_exact(socket_.fd(), f.data(), len, d);
    *status = static_cast<std::uint8_t>(f[0]);
    return f.substr(1);
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
