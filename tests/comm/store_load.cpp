// store_load CYCLES HALF_OPEN: a load test of the store on loopback. CYCLES connections that
// connect and close at once, then HALF_OPEN connections that connect and never speak, held
// open; then the job's own client must still be served, the strangers must be gone once
// they time out, and no thread may have been started for them. Prints the rates; exit 1 on
// a failure.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../process_threads.h"
#include "weft/comm/socket.h"
#include "weft/comm/store.h"
#include "weft/util/error.h"

using namespace weft::comm;

namespace {
int threads() { return weft::testing::threads_of_this_process(); }
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fmt::print(stderr, "usage: store_load CYCLES HALF_OPEN\n");
    return 2;
  }
  const long cycles = std::atol(argv[1]), half_open = std::atol(argv[2]);
  const std::string token = "store-load-token-0123456789abcdef";
  StoreServer server("127.0.0.1", 0, token, StoreLimits{1024, 2.0});
  const int threads_before = threads();
  int failures = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < cycles; ++i) Socket s = connect_tcp("127.0.0.1", server.port(), Deadline::in(10.0));
  fmt::print("{} connect-then-close cycles in {:.1f} s ({:.0f}/s)\n", cycles, since(t0), cycles / since(t0));
  t0 = std::chrono::steady_clock::now();
  std::vector<Socket> strangers;
  strangers.reserve(static_cast<std::size_t>(half_open));
  for (long i = 0; i < half_open; ++i) strangers.push_back(connect_tcp("127.0.0.1", server.port(), Deadline::in(10.0)));
  fmt::print("{} half-open connections held in {:.1f} s; the store holds {} of them\n", half_open, since(t0),
             server.connections());
  t0 = std::chrono::steady_clock::now();
  try {
    StoreClient client("127.0.0.1", server.port(), token, 0, 10.0);
    client.set("alive", "yes");
    if (client.get("alive", 1.0) != std::optional<std::string>("yes")) ++failures;
    fmt::print("the job's client served in {:.3f} s with the strangers connected\n", since(t0));
  } catch (const weft::Error& e) {
    fmt::print("FAIL: the job's client was not served: {}\n", e.what());
    ++failures;
  }
  if (threads() != threads_before) {
    fmt::print("FAIL: {} threads, {} before the strangers\n", threads(), threads_before);
    ++failures;
  }
  for (int i = 0; i < 500 && server.connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fmt::print("after the handshake deadline: {} connections open, {} refused in all\n", server.connections(),
             server.refused());
  if (server.connections() != 0) {
    fmt::print("FAIL: strangers still hold connections\n");
    ++failures;
  }
  if (server.refused() != cycles + half_open) {
    fmt::print("FAIL: {} refused, not {}\n", server.refused(), cycles + half_open);
    ++failures;
  }
  std::puts(failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
