// weft's HTTP server's pumped streams (Response::set_pumped_content_provider), with a real
// server on loopback and raw sockets as its clients: a pumped stream holds no worker while it
// waits, takes what its producer wakes it for in order, and its releaser hears at once of a
// client that leaves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "weft/serve/http_server.h"

namespace weft::serve {
namespace {

// A client connection; every read gives up after 10 s (a hang fails the test, not the suite).
class Client {
 public:
  explicit Client(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { close_now(); }
  bool connected() const { return connected_; }
  void send_all(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }
  // Reads until `text` has arrived (true) or the connection ends or times out (false).
  bool read_until(const std::string& text) {
    char buf[4096];
    while (got_.find(text) == std::string::npos) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  const std::string& got() const { return got_; }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string got_;
};

// What a test's producer hands its streams: pieces by stream name, and how each ended.
struct Streams {
  std::mutex mu;
  std::map<std::string, std::deque<std::string>> pieces;
  std::map<std::string, std::shared_ptr<http::StreamWaker>> wakers;
  std::map<std::string, int> released;  // 1 completed, 0 cut
  void put(const std::string& name, const std::string& piece) {
    std::shared_ptr<http::StreamWaker> w;
    {
      std::lock_guard lock(mu);
      pieces[name].push_back(piece);
      w = wakers[name];
    }
    if (w) w->wake();
  }
  int released_as(const std::string& name) {
    std::lock_guard lock(mu);
    auto it = released.find(name);
    return it == released.end() ? -1 : it->second;
  }
};

class PumpedStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    http::Limits limits;
    limits.workers = 1;  // one thread for every handler: a stream that held it would stop the rest
    server_ = std::make_unique<http::Server>(limits);
    // GET /stream/NAME: the pieces put for NAME, one chunk each, until the piece "END".
    server_->Get("/stream/", [this](const http::Request& req, http::Response& res) {
      const std::string name = req.path.substr(std::string("/stream/").size());
      auto waker = std::make_shared<http::StreamWaker>();
      {
        std::lock_guard lock(streams_.mu);
        streams_.wakers[name] = waker;
      }
      res.set_pumped_content_provider(
          "text/plain",
          [this, name](std::size_t, http::DataSink& sink) {
            std::deque<std::string> ready;
            {
              std::lock_guard lock(streams_.mu);
              ready.swap(streams_.pieces[name]);
            }
            for (const std::string& p : ready) {
              if (p == "END") {
                sink.done();
                return true;
              }
              if (!sink.write(p.data(), p.size())) return false;
            }
            return sink.is_writable();
          },
          waker, [this, name](bool success) {
            std::lock_guard lock(streams_.mu);
            streams_.released[name] = success ? 1 : 0;
          });
    });
    server_->Get("/plain", [](const http::Request&, http::Response& res) { res.set_content("plain", "text/plain"); });
    port_ = server_->bind("127.0.0.1", 0);
    loop_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop(0);
    loop_.join();
  }
  static std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"; }

  Streams streams_;
  std::unique_ptr<http::Server> server_;
  std::thread loop_;
  int port_ = 0;
};

TEST_F(PumpedStreams, HoldNoWorkerAndCarryWhatTheirProducerWakesThemFor) {
  Client a(port_), b(port_);
  ASSERT_TRUE(a.connected() && b.connected());
  a.send_all(get("/stream/a"));
  ASSERT_TRUE(a.read_until("Transfer-Encoding: chunked\r\n\r\n")) << a.got();
  b.send_all(get("/stream/b"));  // the one worker ran a's handler and is free again
  ASSERT_TRUE(b.read_until("Transfer-Encoding: chunked\r\n\r\n")) << b.got();
  // Both streams open, waiting: a plain request still finds the worker.
  Client c(port_);
  c.send_all(get("/plain"));
  ASSERT_TRUE(c.read_until("plain")) << c.got();
  EXPECT_EQ(c.got().rfind("HTTP/1.1 200", 0), 0u);
  // Pieces from another thread, in order, each stream its own.
  std::thread producer([&] {
    for (int i = 0; i < 50; ++i) {
      streams_.put("a", "a" + std::to_string(i) + ";");
      streams_.put("b", "b" + std::to_string(i) + ";");
    }
  });
  producer.join();
  ASSERT_TRUE(a.read_until("a49;")) << a.got();
  ASSERT_TRUE(b.read_until("b49;")) << b.got();
  for (Client* cl : {&a, &b}) {
    std::string body;  // the chunks' payloads, framing dropped
    const std::string& g = cl->got();
    for (std::size_t at = g.find("\r\n\r\n") + 4; at < g.size();) {
      const std::size_t eol = g.find("\r\n", at);
      const std::size_t size = std::stoul(g.substr(at, eol - at), nullptr, 16);
      body += g.substr(eol + 2, size);
      at = eol + 2 + size + 2;
    }
    std::string expected;
    const char tag = cl == &a ? 'a' : 'b';
    for (int i = 0; i < 50; ++i) expected += tag + std::to_string(i) + ";";
    EXPECT_EQ(body, expected);
  }
  // The end: the last chunk, and the releaser told it completed.
  streams_.put("a", "END");
  ASSERT_TRUE(a.read_until("0\r\n\r\n")) << a.got();
  for (int i = 0; i < 1000 && streams_.released_as("a") < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(streams_.released_as("a"), 1);
  // A client that leaves: its stream's releaser hears it was cut, with nothing more produced.
  b.close_now();
  for (int i = 0; i < 1000 && streams_.released_as("b") < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(streams_.released_as("b"), 0);
}

TEST_F(PumpedStreams, WhatIsReadyBeforeTheStreamStartsGoesOutAsItStarts) {
  streams_.put("early", "first;");  // before any request, no one to wake: the stream's first run takes it
  Client a(port_);
  ASSERT_TRUE(a.connected());
  a.send_all(get("/stream/early"));
  ASSERT_TRUE(a.read_until("first;")) << a.got();
  streams_.put("early", "END");
  ASSERT_TRUE(a.read_until("0\r\n\r\n")) << a.got();
}

}  // namespace
}  // namespace weft::serve
