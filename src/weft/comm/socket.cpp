#include "weft/comm/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "weft/util/error.h"

namespace weft::comm {

Socket::~Socket() { close(); }

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int Deadline::remaining_ms() const {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

namespace {
addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw ConfigError("cannot resolve '" + host + "': " + ::gai_strerror(rc));
  return res;
}
}  // namespace

Socket listen_tcp(const std::string& addr, int port, int* bound_port) {
  addrinfo* res = resolve(addr, port, true);
  Socket s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    ::freeaddrinfo(res);
    throw CommError(std::string("cannot create a socket: ") + std::strerror(errno));
  }
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd(), res->ai_addr, res->ai_addrlen) != 0) {
    int e = errno;
    ::freeaddrinfo(res);
    throw CommError("cannot listen on " + (addr.empty() ? std::string("*") : addr) + ":" + std::to_string(port) + ": " +
                    std::strerror(e));
  }
  ::freeaddrinfo(res);
  // A deep backlog (the kernel caps it at net.core.somaxconn, 4096 by default): a connection
  // the full queue drops waits for TCP's retry, 1 s later. Thousands of ranks meeting the
  // store at once, or a connect storm, then cost no second-long stalls (comm.store_load:
  // 10 such stalls in 30,000 connect-then-close cycles at a backlog of 1024, 2 or 3 at 4096).
  if (::listen(s.fd(), 4096) != 0) throw CommError(std::string("listen failed: ") + std::strerror(errno));
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  if (bound_port) *bound_port = ntohs(sa.sin_port);
  return s;
}

std::string listening_side_address(int fd, bool accepted) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  const int rc = accepted ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len)
                          : ::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  char text[INET_ADDRSTRLEN] = {};
  if (rc != 0 || sa.sin_family != AF_INET || !::inet_ntop(AF_INET, &sa.sin_addr, text, sizeof text)) return "";
  return text;
}

Socket connect_tcp(const std::string& host, int port, Deadline deadline) {
  std::string last_error = "timed out";
  int delay_ms = 10;
  while (true) {
    addrinfo* res = resolve(host, port, false);
    Socket s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int rc = ::connect(s.fd(), res->ai_addr, res->ai_addrlen);
    int e = errno;
    ::freeaddrinfo(res);
    if (rc == 0) {
      set_nodelay(s.fd());
      return s;
    }
    last_error = std::strerror(e);
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(delay_ms, deadline.remaining_ms() + 1)));
    delay_ms = std::min(delay_ms * 2, 500);
  }
  throw CommError("cannot connect to " + host + ":" + std::to_string(port) + ": " + last_error);
}

Socket try_accept(int listen_fd, std::string* peer_address, int* error) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  *error = 0;
  int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) *error = errno;
    return Socket();
  }
  set_nonblocking(fd, false);
  if (peer_address) {
    char buf[INET_ADDRSTRLEN] = {0};
    ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
    *peer_address = std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
  }
  set_nodelay(fd);
  return Socket(fd);
}

Socket accept_tcp(int listen_fd, Deadline deadline, std::string* peer_address) {
  while (true) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return Socket();
    int error = 0;
    Socket s = try_accept(listen_fd, peer_address, &error);
    if (s.valid()) return s;
    if (error != 0) throw CommError(std::string("accept failed: ") + std::strerror(error));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void set_buffer_sizes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void write_all(int fd, const void* data, std::size_t n, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw CommError(std::string("connection lost while writing: ") + std::strerror(errno));
    }
    pollfd pf{fd, POLLOUT, 0};
    int rc = ::poll(&pf, 1, deadline.remaining_ms());
    if (rc == 0) throw CommError("timed out writing to a peer");
  }
}

void read_exact(int fd, void* data, std::size_t n, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) throw CommError("the peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw CommError(std::string("connection lost while reading: ") + std::strerror(errno));
    }
    pollfd pf{fd, POLLIN, 0};
    int rc = ::poll(&pf, 1, deadline.remaining_ms());
    if (rc == 0) throw CommError("timed out reading from a peer");
  }
}

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace weft::comm
