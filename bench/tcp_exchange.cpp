// bench/tcp_exchange: what loopback TCP itself carries, for bench/tcp_ceiling.
//
//   tcp_exchange WORLD SIZE [TOTAL]
//
// WORLD processes, bound to cores as weft launch binds ranks (process r on the r-th allowed
// core, modulo their number), form a ring over 127.0.0.1; each sends TOTAL bytes (default
// 512 MiB) to the next while receiving TOTAL from the previous, as a ring step moves data.
// Like an all-reduce of SIZE bytes they send from a SIZE-byte array and receive into
// another (from the caches at a few MiB, from memory at 64 MiB). The bytes go through
// weft's own TCP channel (comm::TcpChannel: its socket settings, one call moving as much as
// the socket takes) without the executor, its framing or any reduction; a process with
// nothing to move waits in poll, so its processor time is the work of moving the bytes: the
// kernel's copies and TCP.
// Prints one line per process: "rank seconds cpu_seconds".
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "weft/comm/channel.h"
#include "weft/comm/process.h"
#include "weft/comm/socket.h"
#include "weft/util/error.h"

using namespace weft::comm;

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

void run_rank(int rank, int core, int next_port, int listener, std::size_t size, std::size_t total) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  sched_setaffinity(0, sizeof set, &set);
  TcpChannel out(connect_tcp("127.0.0.1", next_port, Deadline::in(60)));
  Socket accepted = accept_tcp(listener, Deadline::in(60));
  if (!accepted.valid()) die("the previous process did not connect within 60 s");
  TcpChannel in(std::move(accepted));
  std::vector<std::uint8_t> source(size, 1), sink(size, 0);
  std::size_t sent = 0, got = 0;
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  while (sent < total || got < total) {
    std::size_t moved = 0;
    if (sent < total) {
      std::size_t at = sent % size, k = out.write_some(source.data() + at, std::min(size - at, total - sent));
      sent += k, moved += k;
    }
    if (got < total) {
      std::size_t at = got % size, k = in.read_some(sink.data() + at, size - at);
      got += k, moved += k;
    }
    if (moved == 0) {
      pollfd fds[2] = {{out.fd(), static_cast<short>(sent < total ? POLLOUT : 0), 0},
                       {in.fd(), static_cast<short>(got < total ? POLLIN : 0), 0}};
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
  const std::vector<int> cores = allowed_cores();
  std::vector<Socket> listeners;
  std::vector<int> ports(world);
  try {
    for (std::size_t r = 0; r < world; ++r) listeners.push_back(listen_tcp("127.0.0.1", 0, &ports[r]));
  } catch (const weft::Error& e) {
    die(e.what());
  }
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid < 0) die("cannot fork");
    if (pid == 0) {
      alarm(300);  // a ring whose peer never came ends instead of waiting for ever
      try {
        run_rank(static_cast<int>(r), cores[r % cores.size()], ports[(r + 1) % world], listeners[r].fd(), size,
                 total);
      } catch (const weft::Error& e) {
        die(e.what());
      }
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
