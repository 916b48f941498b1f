// Thin TCP helpers: RAII sockets, listen/connect with retries, and blocking reads and
// writes bounded by a deadline (they throw CommError on timeout, EOF or error).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace weft::comm {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void close();

 private:
  int fd_ = -1;
};

using Clock = std::chrono::steady_clock;

struct Deadline {
  Clock::time_point at;
  static Deadline in(double seconds) {
    return {Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
  }
  int remaining_ms() const;  // >= 0
  bool expired() const { return Clock::now() >= at; }
};

// Listens on addr:port (port 0: any free port); returns the socket and the bound port.
Socket listen_tcp(const std::string& addr, int port, int* bound_port);
// The IPv4 address of a connected socket's side that listened: its own (`accepted`) or
// its peer's ("" when unknown).
std::string listening_side_address(int fd, bool accepted);
// Connects, retrying until the deadline (the peer may not be listening yet).
Socket connect_tcp(const std::string& host, int port, Deadline deadline);
// Accepts one pending connection (the returned socket is blocking); on a non-blocking
// listener it never waits. An invalid socket when none was pending, or on an error (*error:
// its errno, e.g. EMFILE; else 0).
Socket try_accept(int listen_fd, std::string* peer_address, int* error);
// Accepts one connection, waiting until the deadline; returns an invalid socket on timeout.
Socket accept_tcp(int listen_fd, Deadline deadline, std::string* peer_address = nullptr);

void set_nodelay(int fd);
void set_nonblocking(int fd, bool on);
void set_buffer_sizes(int fd, int bytes);
void write_all(int fd, const void* data, std::size_t n, Deadline deadline);
void read_exact(int fd, void* data, std::size_t n, Deadline deadline);

std::string host_name();

}  // namespace weft::comm
