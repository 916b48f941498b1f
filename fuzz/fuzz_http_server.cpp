// libFuzzer harness: the bytes a client sends weft serve's HTTP server (serve/http_server.h),
// over a real loopback connection to a server running in this process: request lines,
// headers, Content-Length and chunked bodies, pipelined requests, Expect: 100-continue, and
// what follows. Each input is written, the client's side shut, and the answer read until the
// server closes; then a well-formed request on a fresh connection must still get its 200
// (no input stops the server or takes it down).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "weft/comm/socket.h"
#include "weft/serve/http_server.h"
#include "weft/util/error.h"

using namespace weft::serve::http;

namespace {

Server& server(int* port_out) {
  static int port = 0;
  static Server* s = [] {
    Limits limits;
    limits.max_body = 4096;
    limits.max_header_bytes = 2048;
    limits.header_timeout_s = 2;
    limits.body_timeout_s = 2;
    limits.idle_timeout_s = 2;
    limits.workers = 4;
    auto* srv = new Server(limits);
    srv->Get("/healthz", [](const Request&, Response& res) { res.set_content("ok", "text/plain"); }, true);
    srv->Post("/echo", [](const Request& req, Response& res) { res.set_content(req.body, "text/plain"); });
    srv->Get("/models/", [](const Request& req, Response& res) { res.set_content(req.path, "text/plain"); });
    srv->Post("/stream", [](const Request& req, Response& res) {
      res.set_chunked_content_provider("text/event-stream", [n = 0, body = req.body](std::size_t, DataSink& sink) mutable {
        if (n++ < 3) return sink.write(body.data(), body.size());
        sink.done();
        return true;
      });
    });
    port = srv->bind("127.0.0.1", 0);
    std::thread([srv] { srv->run(); }).detach();
    return srv;
  }();
  *port_out = port;
  return *s;
}

// A connection to the server: weft's own connect_tcp, which carries on past a connect that a
// signal interrupted (libFuzzer's timer interrupts system calls with SIGALRM).
int connect_to(int port) {
  return weft::comm::connect_tcp("127.0.0.1", port, weft::comm::Deadline::in(5)).release();
}

// Sends all of `size` bytes; false when the server closed the connection first.
bool send_all(int fd, const void* data, std::size_t size) {
  try {
    weft::comm::write_all(fd, data, size, weft::comm::Deadline::in(5));
    return true;
  } catch (const weft::CommError&) {
    return false;
  }
}

// Everything the server sends until it closes (or 5 s pass: a hang is a finding).
std::string read_all(int fd) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr, "the server neither answered nor closed within 5 s\n");
      std::abort();
    }
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int port = 0;
  server(&port);
  const int fd = connect_to(port);
  send_all(fd, data, size);  // false: the server closed (a refusal): fine
  ::shutdown(fd, SHUT_WR);
  read_all(fd);
  ::close(fd);
  // The server still serves.
  const int check = connect_to(port);
  const std::string ok = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (!send_all(check, ok.data(), ok.size())) std::abort();
  const std::string answer = read_all(check);
  ::close(check);
  if (answer.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "after the input, /healthz got: %s\n", answer.substr(0, 200).c_str());
    std::abort();
  }
  return 0;
}
