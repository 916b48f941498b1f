#include "weft/serve/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>  // (before Asio, whose awaitable.hpp uses std::exchange)
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "weft/util/error.h"

namespace weft::serve::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

bool CaseLess::operator()(const std::string& a, const std::string& b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) < std::tolower(static_cast<unsigned char>(y));
  });
}

std::string Request::get_header_value(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

void Response::set_header(const std::string& name, const std::string& value) {
  headers.erase(name);
  headers.emplace(name, value);
}

void Response::set_content(std::string content, const std::string& type) {
  body = std::move(content);
  set_header("Content-Type", type);
}

void Response::set_chunked_content_provider(const std::string& type, ContentProvider provider, Releaser releaser) {
  set_header("Content-Type", type);
  provider_ = std::move(provider);
  releaser_ = std::move(releaser);
}

void Response::set_pumped_content_provider(const std::string& type, ContentProvider provider,
                                           std::shared_ptr<StreamWaker> waker, Releaser releaser) {
  set_chunked_content_provider(type, std::move(provider), std::move(releaser));
  waker_ = std::move(waker);
}

void StreamWaker::wake() {
  std::lock_guard lock(mu_);
  if (target_) target_();
}

void StreamWaker::attach(std::function<void()> target) {
  std::lock_guard lock(mu_);
  target_ = std::move(target);
}

void StreamWaker::detach() {
  std::lock_guard lock(mu_);
  target_ = nullptr;
}

namespace {

constexpr std::size_t kMaxQueuedStream = 1 << 20;  // a stream's bytes queued before its writer waits
constexpr std::size_t kReadChunk = 16 << 10;
constexpr double kLingerS = 2;                       // reading what a refused client still sends
constexpr double kCloseWaitS = 0.5;                  // waiting for a client's close after the last response
constexpr double kCloseAfterDrainS = 2;              // streams' last chunks, after the drain
constexpr auto kPumpPoll = std::chrono::milliseconds(100);  // a pumped stream's provider, unwoken

struct Route {
  std::string method, path;
  Handler handler;
  bool run_inline = false;
};

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// What a stream's writer (a worker) and its connection (the event loop) share.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t queued = 0;  // bytes handed to the connection, not yet written
  bool gone = false;
};

// `data` as one chunk of a chunked body.
std::string chunk_of(const char* data, std::size_t size) {
  char hex[24];
  const int n = std::snprintf(hex, sizeof hex, "%zx\r\n", size);
  std::string chunk(hex, static_cast<std::size_t>(n));
  chunk.append(data, size);
  chunk += "\r\n";
  return chunk;
}

// The path of a request's target: its origin form without the query ("/v1/models?x" ->
// "/v1/models"), or the absolute form's path, which a server must accept (RFC 9112, 3.2.2:
// "http://host:8000/v1/models" -> "/v1/models"; no path: "/").
std::string target_path(const std::string& target) {
  std::string path = target.substr(0, target.find('?'));
  const std::size_t scheme = path.find("://");
  if (scheme != std::string::npos && !path.empty() && path.front() != '/') {
    const std::size_t slash = path.find('/', scheme + 3);
    path = slash == std::string::npos ? "/" : path.substr(slash);
  }
  return path;
}

// The reason a request's body cannot be read as sent: a transfer coding other than chunked
// (gzip, deflate: 400, a framing this server does not read) or a content coding other than
// identity (415); empty when it can.
template <class Message>
std::string unsupported_coding(const Message& m) {
  const auto text = [&](bhttp::field f) {
    const auto v = m[f];
    return std::string(v.data(), v.size());
  };
  const std::string transfer = text(bhttp::field::transfer_encoding);
  for (std::size_t from = 0; from < transfer.size();) {
    const std::size_t comma = std::min(transfer.find(',', from), transfer.size());
    const std::size_t first = transfer.find_first_not_of(" \t", from);
    const std::size_t last = transfer.find_last_not_of(" \t", comma - 1);
    if (first < comma && last != std::string::npos && last >= first) {
      const std::string item = transfer.substr(first, last + 1 - first);
      if (!beast::iequals(item, "chunked")) return "Transfer-Encoding '" + item + "' is not supported (only chunked)";
    }
    from = comma + 1;
  }
  const std::string content = text(bhttp::field::content_encoding);
  if (!content.empty() && !beast::iequals(content, "identity"))
    return "Content-Encoding '" + content + "' is not supported: send the body uncompressed";
  return "";
}

}  // namespace

class Connection;

struct Server::Impl {
  explicit Impl(Limits l) : limits(l) {
    // As many connections as the process may open (raised to its hard limit), less a reserve.
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
      if (r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
        getrlimit(RLIMIT_NOFILE, &r);
      }
      if (r.rlim_cur != RLIM_INFINITY)
        limits.max_connections = std::min<std::int64_t>(limits.max_connections, static_cast<std::int64_t>(r.rlim_cur) - 256);
    }
    limits.max_connections = std::max<std::int64_t>(limits.max_connections, 16);
  }

  Limits limits;
  net::io_context loop{1};
  tcp::acceptor acceptor{loop};
  net::steady_timer accept_retry{loop}, drain{loop};
  std::vector<Route> routes;
  std::function<bool(const Request&, Response&)> pre_routing;
  std::function<std::string(int, const std::string&)> error_body = [](int, const std::string& reason) { return reason; };

  // Connections, on the loop only.
  std::unordered_map<Connection*, std::weak_ptr<Connection>> open;
  std::unordered_map<std::string, std::int64_t> per_address;
  std::atomic<std::int64_t> open_count{0};
  bool stopping = false;
  std::atomic<bool> drained{false};  // past the drain: streams end now

  // The workers that run handlers.
  std::mutex work_mu;
  std::condition_variable work_cv;
  std::deque<std::function<void()>> work;
  bool work_stop = false;
  std::vector<std::thread> workers;

  void post_work(std::function<void()> task) {
    {
      std::lock_guard lock(work_mu);
      work.push_back(std::move(task));
    }
    work_cv.notify_one();
  }
  void worker_loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(work_mu);
        work_cv.wait(lock, [&] { return work_stop || !work.empty(); });
        if (work.empty()) return;
        task = std::move(work.front());
        work.pop_front();
      }
      task();
    }
  }

  // Whether route `r` serves `path`: its own path, or, for a path ending in '/', one that
  // continues it by one more segment ("/v1/models/" serves "/v1/models/gpt").
  static bool serves(const Route& r, const std::string& path) {
    return r.path == path || (r.path.back() == '/' && path.size() > r.path.size() && path.rfind(r.path, 0) == 0 &&
                              path.find('/', r.path.size()) == std::string::npos);
  }
  // The route of `method` and `path`: one of that path, else one that serves it.
  const Route* route(const std::string& method, const std::string& path) const {
    for (const Route& r : routes)
      if (r.method == method && r.path == path) return &r;
    for (const Route& r : routes)
      if (r.method == method && serves(r, path)) return &r;
    return nullptr;
  }
  // The methods that `path` takes ("GET, POST"); empty when no route serves it.
  std::string methods_of(const std::string& path) const {
    std::string methods;
    for (const Route& r : routes)
      if (serves(r, path) && methods.find(r.method) == std::string::npos)
        methods += (methods.empty() ? "" : ", ") + r.method + (r.method == "GET" ? ", HEAD" : "");
    return methods;
  }

  void accept();
  void on_accept(error_code ec, tcp::socket socket);
  void forget(Connection* c, const std::string& address);
  void begin_stop(double drain_seconds);
  void close_all();
  void maybe_finish();
};

// One client connection, driven by the event loop; a handler's worker reaches it by posting.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Server::Impl& server, tcp::socket socket, std::string address)
      : s_(server), socket_(std::move(socket)), address_(std::move(address)), timer_(s_.loop), write_timer_(s_.loop),
        buffer_(static_cast<std::size_t>(s_.limits.max_header_bytes) + (1 << 20)), pump_timer_(s_.loop) {}

  void start() {
    next_request();
  }

  // At a stop: a connection between requests (or in the middle of receiving one) closes now,
  // one with a request in flight after its response.
  void finish_then_close() {
    keep_alive_ = false;
    if (state_ == State::kReading) close();
  }

  void close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    cancel_timer();
    write_timer_.cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    mark_gone();
    s_.forget(this, address_);
    end_pump(false);  // a pumped stream's releaser hears of it at once
  }

  bool closed() const { return state_ == State::kClosed; }

  // On the loop: `data` queued as a stream's chunk, counted (a pumped stream's writer).
  void queue_chunk(const char* data, std::size_t size) {
    std::string chunk = chunk_of(data, size);
    {
      std::lock_guard lock(stream_->mu);
      stream_->queued += chunk.size();
    }
    queue(std::move(chunk), false, true);
  }

  // From any thread: the pumped stream's provider runs again (once for any number of wakes
  // before it runs).
  void wake_pump() {
    if (pump_posted_.exchange(true)) return;
    net::post(s_.loop, [self = shared_from_this()] {
      self->pump_posted_ = false;
      self->pump();
    });
  }

  // From a worker: queue bytes of the response (posted to the loop).
  void post_bytes(std::string bytes, bool last, bool counted) {
    net::post(s_.loop, [self = shared_from_this(), bytes = std::move(bytes), last, counted]() mutable {
      self->queue(std::move(bytes), last, counted);
    });
  }
  void post_close() {
    net::post(s_.loop, [self = shared_from_this()] { self->close(); });
  }
  Server::Impl& server() { return s_; }

  // The response, whole, or (`stream`) its head: its chunks follow from run_stream.
  void answer(Response& res, bool stream = false) {
    std::string head = status_line(res.status);
    for (const auto& [name, value] : res.headers) {
      if (beast::iequals(name, "Content-Length") || beast::iequals(name, "Transfer-Encoding") ||
          beast::iequals(name, "Connection"))
        continue;
      head += name + ": " + value + "\r\n";
    }
    if (s_.stopping) keep_alive_ = false;
    head += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    if (stream) {
      head += "Transfer-Encoding: chunked\r\n\r\n";
      queue(std::move(head), false);
      return;
    }
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n";
    queue(head_only_ ? head : head + res.body, true);
  }

 private:
  enum class State { kReading, kHandling, kClosed };

  static std::string status_line(int status) {
    const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
    return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
  }

  void arm(double s, bool header_deadline) {
    const std::uint64_t generation = ++timer_generation_;
    timer_.expires_after(seconds(s));
    timer_.async_wait([self = shared_from_this(), generation, header_deadline](error_code ec) {
      if (ec || generation != self->timer_generation_ || self->state_ != State::kReading) return;
      if (!self->started_) return self->close();  // idle between requests
      self->fail(408, header_deadline ? "the request's headers did not arrive within the time allowed"
                                      : "the request's body did not arrive within the time allowed");
    });
  }
  void cancel_timer() {
    ++timer_generation_;
    timer_.cancel();
  }

  void mark_gone() {
    gone_->store(true);
    std::lock_guard lock(stream_->mu);
    stream_->gone = true;
    stream_->cv.notify_all();
  }

  void next_request() {
    state_ = State::kReading;
    started_ = header_done_ = head_only_ = false;
    header_bytes_ = 0;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(s_.limits.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(s_.limits.max_body));
    gone_ = std::make_shared<std::atomic<bool>>(false);
    stream_ = std::make_shared<StreamState>();
    arm(s_.limits.idle_timeout_s, false);
    parse();
  }

  // One read at a time: the request being received, the next ones read ahead while a handler
  // runs (pipelined requests; the close of a client that leaves), or, lingering after a
  // refusal, bytes dropped.
  void read() {
    if (reading_ || state_ == State::kClosed) return;
    if (lingering_) buffer_.consume(buffer_.size());
    if (buffer_.size() + kReadChunk > buffer_.max_size()) return;  // read ahead enough
    reading_ = true;
    socket_.async_read_some(buffer_.prepare(kReadChunk), [self = shared_from_this()](error_code ec, std::size_t n) {
      self->reading_ = false;
      if (self->state_ == State::kClosed) return;
      if (ec) return self->close();  // the client went away (or shut its side): nothing more to read or answer
      self->buffer_.commit(n);
      if (self->state_ == State::kReading && !self->lingering_) self->parse();
      else self->read();
    });
  }

  void parse() {
    while (state_ == State::kReading && buffer_.size() > 0) {
      if (!started_) {
        started_ = true;
        arm(s_.limits.header_timeout_s, true);
      }
      error_code ec;
      const std::size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      // Beast's own limit lets a header that arrives whole in one piece run past it; the
      // bytes up to the header's end are counted here (until then the parser takes no body).
      if (!header_done_) header_bytes_ += used;
      if (!header_done_ && header_bytes_ > static_cast<std::uint64_t>(s_.limits.max_header_bytes))
        ec = bhttp::error::header_limit;
      if (ec == bhttp::error::need_more) break;
      if (ec == bhttp::error::body_limit) return fail(413, "the body is larger than the limit of " + std::to_string(s_.limits.max_body) + " bytes");
      if (ec == bhttp::error::header_limit)
        return fail(431, "the request's headers are larger than the limit of " + std::to_string(s_.limits.max_header_bytes) + " bytes");
      if (ec) return fail(400, "malformed HTTP request (" + ec.message() + ")");
      if (parser_->is_header_done() && !header_done_) {
        header_done_ = true;
        if (const std::string refused = unsupported_coding(parser_->get()); !refused.empty())
          return fail(refused.rfind("Transfer", 0) == 0 ? 400 : 415, refused);
        const auto length = parser_->content_length();
        if (length && *length > static_cast<std::uint64_t>(s_.limits.max_body))
          return fail(413, "the body is larger than the limit of " + std::to_string(s_.limits.max_body) + " bytes");
        if (!parser_->is_done()) {
          arm(s_.limits.body_timeout_s, false);
          if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue"))
            queue("HTTP/1.1 100 Continue\r\n\r\n", false);
        }
        parser_->eager(true);
      }
      if (parser_->is_done()) return dispatch();
    }
    if (state_ == State::kReading) read();
  }

  // Answers `status` with the server's error body, then closes (reading for a while what the
  // client still sends, so that it sees the answer instead of a reset).
  void fail(int status, const std::string& reason) {
    state_ = State::kHandling;
    cancel_timer();
    keep_alive_ = false;
    lingering_ = true;
    Response res;
    res.status = status;
    res.set_content(s_.error_body(status, reason), "application/json");
    answer(res);
  }

  void dispatch() {
    cancel_timer();
    state_ = State::kHandling;
    auto message = parser_->release();
    keep_alive_ = message.keep_alive();
    Request req;
    req.method = std::string(message.method_string());
    req.target = std::string(message.target());
    req.path = target_path(req.target);
    for (const auto& field : message) req.headers.emplace(std::string(field.name_string()), std::string(field.value()));
    req.body = std::move(message.body());
    req.remote_address = address_;
    req.gone_ = gone_;
    read();  // read ahead: a client that leaves is noticed at once
    Response res;
    head_only_ = req.method == "HEAD";  // a GET's answer without its body (RFC 9110, 9.3.2)
    if (s_.pre_routing && s_.pre_routing(req, res)) return answer(res);
    const Route* r = s_.route(head_only_ ? "GET" : req.method, req.path);
    if (r == nullptr) {
      const std::string allowed = s_.methods_of(req.path);
      res.status = allowed.empty() ? 404 : 405;
      if (!allowed.empty()) res.set_header("Allow", allowed);
      res.set_content(s_.error_body(res.status, allowed.empty() ? "no such endpoint: " + req.method + " " + req.path
                                                                : req.method + " " + req.path + ": this endpoint takes " + allowed),
                      "application/json");
      return answer(res);
    }
    if (r->run_inline) {
      run_handler(*r, req, res);
      return answer(res);
    }
    s_.post_work([self = shared_from_this(), handler = r, req = std::move(req)]() mutable {
      Response answered;
      self->run_handler(*handler, req, answered);
      if (answered.provider_ && answered.waker_)  // pumped on the loop: the worker is free
        return net::post(self->s_.loop, [self, answered = std::move(answered)]() mutable { self->start_pump(answered); });
      if (answered.provider_) return self->run_stream(answered);
      net::post(self->s_.loop, [self, answered = std::move(answered)]() mutable {
        if (self->state_ != State::kClosed) self->answer(answered);
      });
    });
  }

  void run_handler(const Route& route, const Request& req, Response& res) {
    try {
      route.handler(req, res);
    } catch (const std::exception& e) {
      res = Response();
      res.status = 500;
      res.set_content(s_.error_body(500, e.what()), "application/json");
    }
  }

  // On a worker: the stream's chunks from its provider until it is done, fails or the client leaves.
  void run_stream(Response& res);

  // A pumped stream, on the loop: its head, then its provider whenever woken (its waker, the
  // client's reads after a full queue, every kPumpPoll) until it is done, fails or the client
  // leaves.
  void start_pump(Response& res) {
    pump_provider_ = std::move(res.provider_);
    pump_releaser_ = std::move(res.releaser_);
    pump_waker_ = std::move(res.waker_);
    if (state_ == State::kClosed) return end_pump(false);
    answer(res, true);
    pump_waker_->attach([weak = weak_from_this()] {
      if (auto c = weak.lock()) c->wake_pump();
    });
    poll_pump();
    pump();
  }

  void poll_pump() {
    pump_timer_.expires_after(kPumpPoll);
    pump_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || !self->pump_provider_) return;
      self->pump();
      if (self->pump_provider_) self->poll_pump();
    });
  }

  void pump();

  // The pumped stream ended (`ok`: whole): its provider released, its last chunk queued (or
  // the connection closed), then its releaser told.
  void end_pump(bool ok) {
    if (!pump_provider_) return;
    ContentProvider().swap(pump_provider_);  // its captures (the request's admission) released
    Releaser releaser = std::move(pump_releaser_);
    pump_releaser_ = nullptr;
    pump_waker_->detach();
    pump_waker_.reset();
    pump_timer_.cancel();
    if (ok) queue("0\r\n\r\n", true);
    else close();
    if (releaser) releaser(ok);
  }

  // `counted`: a stream's chunk, whose bytes its writer counts (StreamState::queued).
  void queue(std::string bytes, bool last, bool counted = false) {
    if (state_ == State::kClosed) return;
    out_.emplace_back(std::move(bytes), counted);
    if (last) response_queued_ = true;
    write();
  }

  void write() {
    if (writing_ || out_.empty() || state_ == State::kClosed) return;
    writing_ = true;
    write_timer_.expires_after(seconds(s_.limits.write_timeout_s));
    write_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && self->writing_) self->close();  // the client does not read
    });
    net::async_write(socket_, net::buffer(out_.front().first), [self = shared_from_this()](error_code ec, std::size_t n) {
      self->writing_ = false;
      self->write_timer_.cancel();
      if (self->state_ == State::kClosed) return;
      if (ec) return self->close();
      if (self->out_.front().second) {
        std::lock_guard lock(self->stream_->mu);
        self->stream_->queued -= std::min(self->stream_->queued, n);
        self->stream_->cv.notify_all();
        if (self->pump_starved_ && self->stream_->queued <= kMaxQueuedStream) self->wake_pump();
      }
      self->out_.pop_front();
      if (!self->out_.empty()) return self->write();
      if (self->response_queued_) self->response_written();
    });
  }

  void response_written() {
    response_queued_ = false;
    if (lingering_) return linger(kLingerS);
    if (!keep_alive_ || s_.stopping) return linger(kCloseWaitS);
    next_request();
  }

  // After the last response: what the client still sends is read and dropped for a while (so
  // that a refused client sees the answer instead of a reset), then the connection closes.
  void linger(double s) {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    state_ = State::kHandling;
    lingering_ = true;
    const std::uint64_t generation = ++timer_generation_;
    timer_.expires_after(seconds(s));
    timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (!ec && generation == self->timer_generation_) self->close();
    });
    read();
  }

  Server::Impl& s_;
  tcp::socket socket_;
  std::string address_;
  net::steady_timer timer_, write_timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  State state_ = State::kReading;
  bool started_ = false, header_done_ = false, reading_ = false, writing_ = false;
  std::uint64_t header_bytes_ = 0;  // of the request being read, until its header's end
  bool head_only_ = false;          // the request is a HEAD: its answer goes without the body
  bool keep_alive_ = true, response_queued_ = false, lingering_ = false;
  std::uint64_t timer_generation_ = 0;
  std::deque<std::pair<std::string, bool>> out_;  // bytes to write; whether a stream's writer counts them
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<StreamState> stream_ = std::make_shared<StreamState>();
  // A pumped stream's (start_pump).
  net::steady_timer pump_timer_;
  ContentProvider pump_provider_;
  Releaser pump_releaser_;
  std::shared_ptr<StreamWaker> pump_waker_;
  std::atomic<bool> pump_posted_{false};  // a pump() posted, not yet run
  bool pump_starved_ = false;             // not pumped: over kMaxQueuedStream queued
};

namespace {

class ChunkSink : public DataSink {
 public:
  ChunkSink(std::shared_ptr<Connection> c, std::shared_ptr<StreamState> st, double write_timeout_s)
      : c_(std::move(c)), st_(std::move(st)), timeout_(seconds(write_timeout_s)) {}
  bool write(const char* data, std::size_t size) override {
    if (size == 0) return is_writable();
    std::string chunk = chunk_of(data, size);
    {
      std::unique_lock lock(st_->mu);
      st_->cv.wait_for(lock, timeout_, [&] { return st_->gone || st_->queued <= kMaxQueuedStream; });
      if (st_->gone || st_->queued > kMaxQueuedStream) return false;  // gone, or not reading
      st_->queued += chunk.size();
    }
    c_->post_bytes(std::move(chunk), false, true);
    return true;
  }
  bool is_writable() const override {
    std::lock_guard lock(st_->mu);
    return !st_->gone;
  }
  // (The last chunk is sent by run_stream once the provider, and what it holds, is released:
  // a client's next request must not find this one still counted.)
  void done() override { finished_ = true; }
  bool draining() const override { return c_->server().drained.load(); }
  bool finished() const { return finished_; }

 private:
  std::shared_ptr<Connection> c_;
  std::shared_ptr<StreamState> st_;
  std::chrono::steady_clock::duration timeout_;
  bool finished_ = false;
};

// A pumped stream's writer, on the loop: never waits (Connection::pump does not run the
// provider while over kMaxQueuedStream is queued).
class LoopSink : public DataSink {
 public:
  explicit LoopSink(Connection& c) : c_(c) {}
  bool write(const char* data, std::size_t size) override {
    if (c_.closed()) return false;
    if (size > 0) c_.queue_chunk(data, size);
    wrote_ = wrote_ || size > 0;
    return true;
  }
  bool is_writable() const override { return !c_.closed(); }
  void done() override { finished_ = true; }
  bool draining() const override { return c_.server().drained.load(); }
  bool finished() const { return finished_; }
  bool wrote() const { return wrote_; }

 private:
  Connection& c_;
  bool finished_ = false, wrote_ = false;
};

}  // namespace

void Connection::pump() {
  if (!pump_provider_) return;
  if (state_ == State::kClosed) return end_pump(false);
  // Called again while it writes (a piece's call may leave the end for the next one), up to
  // a bound, so that a stream that keeps writing does not hold the loop.
  for (int calls = 0; calls < 16; ++calls) {
    {
      std::lock_guard lock(stream_->mu);
      pump_starved_ = stream_->queued > kMaxQueuedStream;
    }
    if (pump_starved_) return;  // the client's reads wake it (write), or write_timeout closes
    LoopSink sink(*this);
    bool ok = true;
    try {
      ok = pump_provider_(0, sink) && !closed();
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) return end_pump(false);
    if (sink.finished()) return end_pump(true);
    if (!sink.wrote()) return;
  }
  wake_pump();  // (the rest after the other connections' turns)
}

void Connection::run_stream(Response& res) {
  auto self = shared_from_this();
  Response head;  // the status and headers, without the provider (and what it holds)
  head.status = res.status;
  head.headers = res.headers;
  net::post(s_.loop, [self, head = std::move(head)]() mutable {
    if (self->state_ != State::kClosed) self->answer(head, true);
  });
  ChunkSink sink(self, stream_, s_.limits.write_timeout_s);
  bool ok = true;
  for (const std::size_t offset = 0; !sink.finished();) {  // (offset: cpp-httplib's; weft's providers keep their own place)
    try {
      ok = res.provider_(offset, sink) && sink.is_writable();
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok) break;
  }
  ContentProvider().swap(res.provider_);  // its captures (the request's admission) released
  if (ok) post_bytes("0\r\n\r\n", true, false);
  else post_close();
  if (res.releaser_) res.releaser_(ok);
}

void Server::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void Server::Impl::on_accept(error_code ec, tcp::socket socket) {
  if (stopping) return;
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    // Out of descriptors or memory for a moment: try again shortly, the open connections go on.
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([this](error_code e) {
      if (!e && !stopping) accept();
    });
    return;
  }
  error_code peer_ec;
  const auto peer = socket.remote_endpoint(peer_ec);
  const std::string address = peer_ec ? std::string("?") : peer.address().to_string();
  std::int64_t& mine = per_address[address];
  if (open_count.load() >= limits.max_connections || (limits.max_per_address > 0 && mine >= limits.max_per_address)) {
    if (mine == 0) per_address.erase(address);
    error_code ignored;
    socket.close(ignored);  // over a limit: refused as it comes, the others served
  } else {
    ++mine;
    ++open_count;
    socket.set_option(tcp::no_delay(true), peer_ec);  // each server-sent event goes out at once
    auto c = std::make_shared<Connection>(*this, std::move(socket), address);
    open[c.get()] = c;
    c->start();
  }
  accept();
}

void Server::Impl::forget(Connection* c, const std::string& address) {
  if (open.erase(c) == 0) return;
  --open_count;
  auto it = per_address.find(address);
  if (it != per_address.end() && --it->second <= 0) per_address.erase(it);
  maybe_finish();
}

void Server::Impl::begin_stop(double drain_seconds) {
  if (stopping) return;
  stopping = true;
  error_code ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> all;
  for (auto& [ptr, weak] : open)
    if (auto c = weak.lock()) all.push_back(c);
  for (auto& c : all) c->finish_then_close();  // idle ones now; the others after their response
  drain.expires_after(seconds(drain_seconds));
  drain.async_wait([this](error_code ec) {
    if (ec) return;
    drained = true;  // streams end now, whole
    drain.expires_after(seconds(kCloseAfterDrainS));
    drain.async_wait([this](error_code e) {
      if (!e) close_all();
    });
  });
  maybe_finish();
}

void Server::Impl::close_all() {
  std::vector<std::shared_ptr<Connection>> all;
  for (auto& [ptr, weak] : open)
    if (auto c = weak.lock()) all.push_back(c);
  for (auto& c : all) c->close();
}

void Server::Impl::maybe_finish() {
  if (stopping && open.empty()) drain.cancel();  // the loop runs out of work and run() returns
}

Server::Server(Limits limits) : impl_(std::make_unique<Impl>(limits)) {}

Server::~Server() {
  {
    std::lock_guard lock(impl_->work_mu);
    impl_->work_stop = true;
  }
  impl_->work_cv.notify_all();
  for (auto& t : impl_->workers)
    if (t.joinable()) t.join();
}

void Server::Get(const std::string& path, Handler handler, bool run_inline) {
  impl_->routes.push_back({"GET", path, std::move(handler), run_inline});
}

void Server::Post(const std::string& path, Handler handler) { impl_->routes.push_back({"POST", path, std::move(handler), false}); }

void Server::set_pre_routing_handler(std::function<bool(const Request&, Response&)> handler) {
  impl_->pre_routing = std::move(handler);
}

void Server::set_error_body(std::function<std::string(int, const std::string&)> body) { impl_->error_body = std::move(body); }

int Server::bind(const std::string& host, int port) {
  error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec) throw ConfigError("cannot listen on " + host + ": not an IP address");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(endpoint, ec);
  if (!ec) impl_->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw ConfigError("cannot listen on " + host + ":" + std::to_string(port) + " (" + ec.message() +
                      ": in use, or not an address of this machine)");
  return impl_->acceptor.local_endpoint().port();
}

void Server::run() {
  for (int i = 0; i < impl_->limits.workers; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
  impl_->accept();
  impl_->loop.run();
  {
    std::lock_guard lock(impl_->work_mu);
    impl_->work_stop = true;
  }
  impl_->work_cv.notify_all();
  for (auto& t : impl_->workers) t.join();
  impl_->workers.clear();
}

void Server::stop(double drain_seconds) {
  net::post(impl_->loop, [this, drain_seconds] { impl_->begin_stop(drain_seconds); });
}

std::int64_t Server::connections() const { return impl_->open_count.load(); }

bool Server::draining() const { return impl_->drained.load(); }

}  // namespace weft::serve::http
