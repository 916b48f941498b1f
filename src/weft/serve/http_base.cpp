#include "weft/serve/http_base.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "weft/comm/auth.h"
#include "weft/serve/api.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft::serve {

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param) {
  res.status = status;
  if (status == 429) res.set_header("Retry-After", "1");
  if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_body(status, message, param), "application/json");
}

HttpBase::HttpBase(const ServeOptions& o, Metrics& metrics)
    : o_(o), metrics_(metrics), random_([] {
        std::uint64_t seed = 0;
        const std::string bytes = comm::random_bytes(sizeof seed);
        std::memcpy(&seed, bytes.data(), sizeof seed);
        return seed;
      }()) {
  metrics_.counter("weft_requests_total", "HTTP requests by endpoint and status code");
  metrics_.histogram("weft_request_duration_seconds", "time from a request's arrival to its last byte",
                     {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30});
  metrics_.gauge("weft_requests_in_flight", "requests being served");
  metrics_.gauge("weft_replicas", "model replicas serving");
  // Requests over the limit still need a thread to hear their 429.
  http_.new_task_queue = [n = o.max_concurrency + 8] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  http_.set_payload_max_length(static_cast<size_t>(o.max_body));
  http_.set_tcp_nodelay(true);  // each server-sent event goes out at once
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (o_.token.empty() || req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    const std::string expected = "Bearer " + o_.token;
    const std::string got = req.get_header_value("Authorization");
    if (got.size() == expected.size() && CRYPTO_memcmp(got.data(), expected.data(), got.size()) == 0)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "a valid bearer token is required (Authorization: Bearer <token>)");
    count(req.path, 401, Clock::now());
    return httplib::Server::HandlerResponse::Handled;
  });
  http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string reason;
    switch (res.status) {
      case 404: reason = fmt::format("no such endpoint: {} {}", req.method, req.path); break;
      case 413: reason = fmt::format("the body is larger than the limit of {} bytes", o_.max_body); break;
      case 400: reason = "malformed HTTP request"; break;
      default: reason = fmt::format("HTTP status {}", res.status);
    }
    send_error(res, res.status, reason);
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what);
  });
  http_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    metrics_.set("weft_requests_in_flight", static_cast<double>(in_flight_.load()));
    res.set_content(metrics_.text(), "text/plain; version=0.0.4");
  });
}

void HttpBase::count(const std::string& endpoint, int status, Clock::time_point start) {
  metrics_.add("weft_requests_total", 1, fmt::format("endpoint=\"{}\",code=\"{}\"", endpoint, status));
  metrics_.observe("weft_request_duration_seconds", std::chrono::duration<double>(Clock::now() - start).count(),
                   fmt::format("endpoint=\"{}\"", endpoint));
}

AdmissionPtr HttpBase::admit(const char* endpoint, httplib::Response& res, Clock::time_point start) {
  auto admission = std::make_shared<Admission>(in_flight_);
  if (admission->place() <= o_.max_concurrency) return admission;
  send_error(res, 429, fmt::format("{} requests in flight: the limit; retry later", o_.max_concurrency));
  count(endpoint, 429, start);
  return nullptr;
}

std::uint64_t HttpBase::fresh_random() {
  std::lock_guard lock(random_mu_);
  return random_.next_u64();
}

int HttpBase::listen(std::FILE* log, const std::string& banner) {
  // The library listens with a backlog of 5: many clients connecting at once would wait for
  // SYN retransmissions (a second). The listening socket is noted here and its backlog
  // raised after the bind.
  int listening = -1;
  http_.set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listening = sock;
  });
  int port = o_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(o_.host);
    if (port < 0) throw ConfigError("cannot listen on " + o_.host);
  } else if (!http_.bind_to_port(o_.host, port)) {
    throw ConfigError(fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)", o_.host, port));
  }
  if (listening >= 0) ::listen(listening, SOMAXCONN);
  fmt::print(log, "weft serve: {} on http://{}:{}{}\n", banner, o_.host, port,
             o_.token.empty() ? "" : "; bearer token required");
  std::fflush(log);
  if (!o_.port_file.empty()) write_file_atomic(o_.port_file, std::to_string(port) + "\n");
  const bool ok = http_.listen_after_bind();
  fmt::print(log, "weft serve: stopped\n");
  std::fflush(log);
  return ok ? 0 : 1;
}

int run_until_signal(const std::function<int()>& run, const std::function<void()>& stop) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  std::atomic<bool> running{true};
  std::thread waiter([&] {
    const timespec tick{0, 200'000'000};
    while (running.load()) {
      if (sigtimedwait(&signals, nullptr, &tick) > 0) {
        stop();
        return;
      }
    }
  });
  int code = 1;
  try {
    code = run();
  } catch (...) {
    running = false;
    waiter.join();
    throw;
  }
  running = false;
  waiter.join();
  return code;
}

}  // namespace weft::serve
