// weft's HTTP/1.1 server: one event-loop thread does every connection's reading and writing
// (Boost.Asio), each request is parsed by Boost.Beast's parser as its bytes arrive, and a
// handler runs on a worker thread only once its request is whole. A client, however slow or
// hostile, holds a connection and a few bytes, never a thread:
//
//   - a request's headers must arrive within header_timeout of its first byte and its body
//     within body_timeout after them; a connection idle between requests closes after
//     idle_timeout (slowloris, idle floods);
//   - headers over max_header_bytes get 431; a body over max_body gets 413 whatever its
//     transfer encoding (Content-Length, chunked), before more of it is buffered: at the
//     headers when they declare a longer one (before the client sends it, under Expect:
//     100-continue), else as soon as it grows past the limit;
//   - at most max_connections connections, max_per_address from one address: further ones
//     are closed as they arrive, and the others go on being served;
//   - pipelined requests are answered in order, one at a time; Range is not honoured;
//   - a path that no route of the request's method serves gets 405 with Allow when another
//     method's route serves it, else 404; HEAD is answered as GET without the body; a target
//     in absolute form is routed by its path;
//   - a body in a transfer coding other than chunked gets 400, in a content coding other than
//     identity 415 (both at the headers, before the body is read);
//   - a response the client does not read: a stream's writer waits (a pumped stream is not
//     pumped) while over 1 MiB of it is queued, and the connection closes when queued bytes
//     make no progress for write_timeout;
//   - a client that closes its connection: Request::client_gone() and DataSink::is_writable()
//     say so at once, so that its handler stops the work (a generation) it asked for.
//
// stop() stops accepting, closes idle connections, lets the requests in flight finish for up
// to drain_seconds (DataSink::draining() tells a stream to end early, whole), then closes
// what is left. Handlers see Request/Response/DataSink shaped like cpp-httplib's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace weft::serve::http {

struct CaseLess {
  bool operator()(const std::string& a, const std::string& b) const;
};
using Headers = std::multimap<std::string, std::string, CaseLess>;

struct Request {
  std::string method, target, path, body, remote_address;
  Headers headers;
  std::string get_header_value(const std::string& name) const;
  bool has_header(const std::string& name) const { return headers.count(name) > 0; }
  // True once the client has closed its connection (or the server closed it).
  bool client_gone() const { return gone_ && gone_->load(); }
  std::shared_ptr<std::atomic<bool>> gone_;
};

// A streamed response's writer, used by its content provider on the handler's thread (or, for
// a pumped stream, on the event loop).
class DataSink {
 public:
  virtual ~DataSink() = default;
  // Queues data as one chunk; waits while over 1 MiB is queued (a pumped stream's never waits).
  // False once the connection is gone.
  virtual bool write(const char* data, std::size_t size) = 0;
  virtual bool is_writable() const = 0;
  // The last chunk: the response is complete.
  virtual void done() = 0;
  // True once the server is stopping past its drain time: end the stream now, whole.
  virtual bool draining() const = 0;
};
// Called until it calls sink.done() or returns false (an abort: the connection closes).
using ContentProvider = std::function<bool(std::size_t offset, DataSink& sink)>;
// Called once the stream ended: true when it completed, false when cut.
using Releaser = std::function<void(bool success)>;

class Connection;

// Wakes a pumped stream (Response::set_pumped_content_provider) from any thread: its provider
// runs once more on the event loop soon after; wakes that come before it runs count as one,
// and wakes before the stream starts or after it ended do nothing (it runs once as it starts).
class StreamWaker {
 public:
  void wake();

 private:
  friend class Connection;
  void attach(std::function<void()> target);
  void detach();
  std::mutex mu_;
  std::function<void()> target_;
};

struct Response {
  int status = 200;
  Headers headers;
  std::string body;
  void set_header(const std::string& name, const std::string& value);
  void set_content(std::string content, const std::string& type);
  // A stream whose provider runs on a worker thread until the stream ends: it may wait.
  void set_chunked_content_provider(const std::string& type, ContentProvider provider, Releaser releaser = {});
  // A stream that holds no thread while it waits: its provider runs on the event loop as the
  // stream starts, whenever `waker` is woken, once its client has read what was queued past
  // 1 MiB, and every 100 ms (to see a drain or a deadline); it must not wait: it writes what
  // is ready and returns. For producers that can wake it (a batcher's tokens): one wake of the
  // loop carries every stream's tokens of a step, where a worker each would wake per token.
  void set_pumped_content_provider(const std::string& type, ContentProvider provider,
                                   std::shared_ptr<StreamWaker> waker, Releaser releaser = {});
  ContentProvider provider_;
  Releaser releaser_;
  std::shared_ptr<StreamWaker> waker_;  // a pumped stream's
};

using Handler = std::function<void(const Request&, Response&)>;

struct Limits {
  std::int64_t max_body = 1 << 20;
  std::int64_t max_header_bytes = 64 << 10;
  double header_timeout_s = 10, body_timeout_s = 60, idle_timeout_s = 30, write_timeout_s = 30;
  std::int64_t max_connections = 16384;  // (lowered to what the process may open)
  std::int64_t max_per_address = 1024;   // 0: no limit
  int workers = 72;                      // threads that run handlers
};

class Server {
 public:
  explicit Server(Limits limits);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Routes by method and path: the exact path, or for a path ending in '/', any one more
  // segment after it (Request::path has it). An inline handler runs on the event loop: it
  // must not block (a health check, the metrics).
  void Get(const std::string& path, Handler handler, bool run_inline = false);
  void Post(const std::string& path, Handler handler);
  // Runs before routing on every request; true when it answered (e.g. a 401).
  void set_pre_routing_handler(std::function<bool(const Request&, Response&)> handler);
  // Fills the body of an error the server itself answers (400, 404, 408, 413, 431, 500, ...)
  // from its status and reason.
  void set_error_body(std::function<std::string(int status, const std::string& reason)> body);
  // Binds host:port (0: a free port); returns the port; throws ConfigError when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop() and the drain are over.
  void run();
  // Callable from any thread (a signal's).
  void stop(double drain_seconds = 0);
  // Connections open now (tests, metrics).
  std::int64_t connections() const;
  // True once stop()'s drain time is over: handlers end their work now, whole.
  bool draining() const;

  struct Impl;  // the event loop and its connections (http_server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::serve::http
