// bench/tcp_exchange: what loopback TCP itself carries, for bench/tcp_ceiling.
//
//   tcp_exchange WORLD SIZE [TOTAL]
//
// WORLD processes, bound to cores as weft launch binds ranks (process r on the r-th allowed
// core, modulo their number), form a ring over 127.0.0.1; each sends TOTAL bytes (default
// 512 MiB) to the next while receiving TOTAL from the previous, as a ring step moves data.
// Like an all-reduce of SIZE bytes they send from a SIZE-byte array and receive into
// another (from the caches at a few MiB, from memory at 64 MiB). Sockets as weft's TCP
// channel sets them (non-blocking, TCP_NODELAY, 4 MiB buffers, each call moving as much as
// the socket takes); a process with nothing to move waits in poll, so its processor time
// is the work of moving the bytes: the kernel's copies and TCP.
// Prints one line per process: "rank seconds cpu_seconds".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "tcp_exchange: %s\n", why.c_str());
  std::exit(1);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void tune(int fd) {
  int one = 1, bytes = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void run_rank(int rank, int core, const sockaddr_in& next, int listener, std::size_t size,
              std::size_t total) {
  alarm(300);  // a ring whose peer never came ends instead of waiting for ever
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);
  int out = socket(AF_INET, SOCK_STREAM, 0);
  tune(out);
  if (connect(out, reinterpret_cast<const sockaddr*>(&next), sizeof next) != 0) die("cannot connect");
  int in = accept(listener, nullptr, nullptr);
  if (in < 0) die("cannot accept");
  tune(in);
  std::vector<char> source(size, 1), sink(size, 0);
  std::size_t sent = 0, got = 0;
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  while (sent < total || got < total) {
    bool moved = false;
    if (sent < total) {
      std::size_t at = sent % size, n = std::min(size - at, total - sent);
      ssize_t k = send(out, source.data() + at, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) sent += static_cast<std::size_t>(k), moved = true;
      else if (k < 0 && errno != EAGAIN) die(std::string("send: ") + std::strerror(errno));
    }
    if (got < total) {
      std::size_t at = got % size;
      ssize_t k = recv(in, sink.data() + at, size - at, MSG_DONTWAIT);
      if (k > 0) got += static_cast<std::size_t>(k), moved = true;
      else if (k == 0) die("the peer closed the connection early");
      else if (errno != EAGAIN) die(std::string("recv: ") + std::strerror(errno));
    }
    if (!moved) {
      pollfd fds[2] = {{out, static_cast<short>(sent < total ? POLLOUT : 0), 0},
                       {in, static_cast<short>(got < total ? POLLIN : 0), 0}};
      poll(fds, 2, 100);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d %.6f %.6f\n", rank, seconds, cpu_seconds() - cpu0);
  std::fflush(stdout);
}

std::size_t parse_size(const char* text, const char* what) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0) die(std::string("bad ") + what + " '" + text + "': want a positive integer");
  return static_cast<std::size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) die("usage: tcp_exchange WORLD SIZE [TOTAL]");
  const std::size_t world = parse_size(argv[1], "world");
  const std::size_t size = parse_size(argv[2], "size");
  const std::size_t total = argc == 4 ? parse_size(argv[3], "total") : std::size_t{512} << 20;
  if (world < 2 || world > 64) die("bad world: want 2..64 processes");
  cpu_set_t allowed;
  sched_getaffinity(0, sizeof allowed, &allowed);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  std::vector<int> listeners(world);
  std::vector<sockaddr_in> addrs(world);
  for (std::size_t r = 0; r < world; ++r) {
    listeners[r] = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in& a = addrs[r];
    a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listeners[r], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(listeners[r], reinterpret_cast<sockaddr*>(&a), &len) != 0 || listen(listeners[r], 1) != 0) {
      die(std::string("cannot listen on loopback: ") + std::strerror(errno));
    }
  }
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid < 0) die("cannot fork");
    if (pid == 0) {
      run_rank(static_cast<int>(r), cores[r % cores.size()], addrs[(r + 1) % world],
               listeners[r], size, total);
      _exit(0);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (failed) die(std::to_string(failed) + " of the processes failed");
  return 0;
}
