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
#include <cstring>
#include <string>
#include <thread>

#include "weft/serve/http_server.h"

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

// (libFuzzer's timer interrupts system calls with SIGALRM: each call here carries on past
// EINTR; a connect so interrupted goes on in the background and is waited for.)
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0) std::abort();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (errno != EINTR) {
    std::perror("connect");
    std::abort();
  }
  pollfd p{fd, POLLOUT, 0};
  while (::poll(&p, 1, 5000) < 0 && errno == EINTR) {
  }
  if (!(p.revents & POLLOUT)) {
    std::fprintf(stderr, "connect: no connection within 5 s\n");
    std::abort();
  }
  int error = 0;
  socklen_t len = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
    std::fprintf(stderr, "connect: %s\n", std::strerror(error));
    std::abort();
  }
  return fd;
}

ssize_t send_some(int fd, const void* data, std::size_t size) {
  ssize_t n;
  while ((n = ::send(fd, data, size, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  return n;
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
  std::size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send_some(fd, data + sent, size - sent);
    if (n <= 0) break;  // the server closed (a refusal): fine
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  read_all(fd);
  ::close(fd);
  // The server still serves.
  const int check = connect_to(port);
  const std::string ok = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (send_some(check, ok.data(), ok.size()) != static_cast<ssize_t>(ok.size())) std::abort();
  const std::string answer = read_all(check);
  ::close(check);
  if (answer.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "after the input, /healthz got: %s\n", answer.substr(0, 200).c_str());
    std::abort();
  }
  return 0;
}
